//! The `journal` probe: records when each reconcile of a ConfigMap labelled
//! `flotilla.dev/probe=journal` started and ended, on which worker and at which resourceVersion.
//!
//! A controller spec cannot filter its primary kind by label, so the probe reconciles every ConfigMap
//! and journals only the labelled ones. Deleted objects (no labels left to look at) are journalled
//! with `rv = ""`.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use flotilla_sdk::k8s_openapi::api::core::v1::ConfigMap;
use flotilla_sdk::kube::ResourceExt;
use flotilla_sdk::{Action, Context, Controller, Request};
use serde::Serialize;

use crate::PROBE_LABEL;

/// Errors of the journal probe.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// The line could not be written whole.
    #[error("cannot append to the journal")]
    Io(#[from] std::io::Error),
}

/// One line of the journal.
#[derive(Debug, Serialize)]
pub struct Entry<'a> {
    /// The reconciled key.
    pub key: &'a str,
    /// The worker that ran it.
    pub worker: &'a str,
    /// Wall-clock start, ns since the Unix epoch.
    pub start_ns: u64,
    /// Wall-clock end, ns since the Unix epoch; 0 on the line written when the reconcile starts.
    pub end_ns: u64,
    /// resourceVersion of the object the reconcile got; empty when it was gone.
    pub rv: &'a str,
    /// Why the reconcile ran (the request's reason, displayed).
    pub reason: &'a str,
}

/// The journal file, opened for appending; lines from concurrent processes never interleave because
/// each is one `write` on an `O_APPEND` file.
pub struct Journal {
    file: File,
}

impl Journal {
    /// Opens (creating) `path` for appending.
    ///
    /// # Errors
    /// When the file cannot be opened.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        Ok(Self {
            file: OpenOptions::new().create(true).append(true).open(path)?,
        })
    }

    /// Appends `entry` (an [`Entry`], or another probe's line) as one JSON line in one write.
    ///
    /// # Errors
    /// [`JournalError::Io`] when the write fails or is short.
    pub fn append(&self, entry: &impl Serialize) -> Result<(), JournalError> {
        let mut line = serde_json::to_vec(entry).map_err(std::io::Error::from)?;
        line.push(b'\n');
        let written = (&self.file).write(&line)?;
        if written != line.len() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::WriteZero,
                "short write to the journal",
            )
            .into());
        }
        Ok(())
    }
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Whether a ConfigMap is meant for the journal probe.
pub fn is_journalled(configmap: &ConfigMap) -> bool {
    configmap
        .labels()
        .get(PROBE_LABEL)
        .is_some_and(|v| v == "journal")
}

/// The journal controller: sleeps `pause` per reconcile and journals it.
pub fn controller(journal: Arc<Journal>, pause: Duration) -> Controller<ConfigMap> {
    Controller::<ConfigMap>::new("journal").reconcile(
        move |request: Request<ConfigMap>, ctx: Context| {
            let journal = journal.clone();
            async move {
                let rv = match request.object() {
                    Some(object) if !is_journalled(object) => return Ok(Action::await_change()),
                    Some(object) => object.resource_version().unwrap_or_default(),
                    None => String::new(),
                };
                // A start line first (end_ns 0), so a reconcile cut short by a kill still shows in
                // the journal as an interval that runs until the worker died.
                let start_ns = now_ns();
                let reason = request.reason().to_string();
                let mut entry = Entry {
                    key: request.key(),
                    worker: ctx.worker_id(),
                    start_ns,
                    end_ns: 0,
                    rv: &rv,
                    reason: &reason,
                };
                journal.append(&entry)?;
                tokio::time::sleep(pause).await;
                entry.end_ns = now_ns();
                journal.append(&entry)?;
                Ok::<_, JournalError>(Action::await_change())
            }
        },
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn concurrent_appenders_never_interleave_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.jsonl");
        let writers: Vec<_> = (0..4)
            .map(|w| {
                let journal = Journal::open(&path).unwrap();
                std::thread::spawn(move || {
                    let worker = format!("worker-{w}");
                    for i in 0..500 {
                        let key = format!("ns/key-{i}");
                        let entry = Entry {
                            key: &key,
                            worker: &worker,
                            start_ns: 1,
                            end_ns: 2,
                            rv: "7",
                            reason: "resync",
                        };
                        journal.append(&entry).unwrap();
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.join().unwrap();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines.len(), 2000);
        for line in lines {
            let value: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(value["rv"], "7");
        }
    }

    #[test]
    fn only_configmaps_labelled_for_the_journal_are_journalled() {
        let mut configmap = ConfigMap::default();
        assert!(!is_journalled(&configmap));
        configmap
            .labels_mut()
            .insert(PROBE_LABEL.into(), "journal".into());
        assert!(is_journalled(&configmap));
        configmap
            .labels_mut()
            .insert(PROBE_LABEL.into(), "parent".into());
        assert!(!is_journalled(&configmap));
    }
}
