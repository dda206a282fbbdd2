//! The reconcile journal (`--reconcile-journal`, a test and benchmark aid): one JSON line when a
//! reconcile starts and one when it ends, so a checker can prove that no key was ever reconciled by
//! two workers at once and that every key's last change was reconciled.
//!
//! The format is the one the `fleet-probe` example's journal writes, plus the controller's name:
//! `{"key", "controller", "worker", "start_ns", "end_ns", "rv", "reason"}`. `start_ns` and `end_ns`
//! are nanoseconds since the Unix epoch on the realtime clock (`CLOCK_REALTIME`), comparable across
//! the processes of one machine; the start line has `end_ns` 0, so a reconcile cut short by a kill
//! shows as an interval open until the worker died. A reconcile cancelled by the worker (its lease
//! lost, a kill requested) gets its end line when the cancellation took effect. `rv` is the
//! resourceVersion of the primary object the reconcile was given, empty when it was gone.
//!
//! Every line is one `write` on a file opened with `O_APPEND`, so the lines of concurrent reconciles,
//! and of several workers sharing one file, never interleave. A failed write is logged and otherwise
//! ignored: the journal observes reconciles and never changes their outcome.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Errors of opening the journal.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// The file cannot be opened for appending.
    #[error("cannot open the reconcile journal {path}")]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// One line of the journal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalEntry {
    /// The workqueue key.
    pub key: String,
    /// The controller that reconciled it.
    pub controller: String,
    /// The worker that ran it.
    pub worker: String,
    /// Start, ns since the Unix epoch.
    pub start_ns: u64,
    /// End, ns since the Unix epoch; 0 on the line written at the start.
    pub end_ns: u64,
    /// resourceVersion of the primary object the reconcile got; empty when it was gone.
    pub rv: String,
    /// Why the reconcile ran (the item's reason, displayed).
    pub reason: String,
}

/// The journal file, opened for appending.
#[derive(Debug)]
pub struct ReconcileJournal {
    file: File,
}

impl ReconcileJournal {
    /// Opens (creating) `path` for appending.
    ///
    /// # Errors
    /// [`JournalError::Open`] when it cannot be opened.
    pub fn open(path: &Path) -> Result<Self, JournalError> {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map(|file| Self { file })
            .map_err(|source| JournalError::Open {
                path: path.to_owned(),
                source,
            })
    }

    /// Appends `entry` as one line in one write; a failure is logged.
    pub fn append(&self, entry: &JournalEntry) {
        let Ok(mut line) = serde_json::to_vec(entry) else {
            return;
        };
        line.push(b'\n');
        match (&self.file).write(&line) {
            Ok(n) if n == line.len() => {}
            Ok(n) => tracing::warn!(
                written = n,
                len = line.len(),
                "short write to the reconcile journal"
            ),
            Err(err) => tracing::warn!(error = %err, "cannot append to the reconcile journal"),
        }
    }
}

/// Nanoseconds since the Unix epoch on the realtime clock: the journal's clock.
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// The `metadata.resourceVersion` of a primary object as shipped with an item (JSON); empty when the
/// object is gone or carries none.
pub fn resource_version(object: &[u8]) -> String {
    #[derive(Deserialize)]
    struct Object {
        #[serde(default)]
        metadata: Metadata,
    }
    #[derive(Deserialize, Default)]
    struct Metadata {
        #[serde(default, rename = "resourceVersion")]
        resource_version: String,
    }
    if object.is_empty() {
        return String::new();
    }
    serde_json::from_slice::<Object>(object)
        .map(|o| o.metadata.resource_version)
        .unwrap_or_default()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_resource_version_is_read_from_the_object_and_empty_when_it_is_gone() {
        let object = br#"{"metadata":{"name":"a","resourceVersion":"42"},"spec":{}}"#;
        assert_eq!(resource_version(object), "42");
        assert_eq!(resource_version(b""), "");
        assert_eq!(resource_version(b"{}"), "");
        assert_eq!(resource_version(b"not json"), "");
    }

    #[test]
    fn lines_of_concurrent_appenders_never_interleave_and_read_back() {
        let path = std::env::temp_dir().join(format!(
            "flotilla-reconcile-journal-{}-{}.jsonl",
            std::process::id(),
            now_ns()
        ));
        let writers: Vec<_> = (0..4)
            .map(|w| {
                let journal = ReconcileJournal::open(&path).unwrap();
                std::thread::spawn(move || {
                    for i in 0..300 {
                        journal.append(&JournalEntry {
                            key: format!("ns/key-{i}"),
                            controller: "deployment".into(),
                            worker: format!("worker-{w}"),
                            start_ns: 1,
                            end_ns: 2,
                            rv: "7".into(),
                            reason: "resync".into(),
                        });
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.join().unwrap();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let entries: Vec<JournalEntry> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(entries.len(), 1200);
        assert!(entries.iter().all(|e| e.rv == "7" && e.end_ns == 2));
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn an_unopenable_path_is_an_error_naming_it() {
        let err = ReconcileJournal::open(Path::new("/nonexistent/dir/journal")).unwrap_err();
        assert!(
            err.to_string().contains("/nonexistent/dir/journal"),
            "{err}"
        );
    }
}
