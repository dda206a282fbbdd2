//! Certificate material built from files and rebuilt when the files change, checked lazily: at most once
//! per [`RECHECK`], when a handshake asks for it — no timer, so an idle process stays idle.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use tracing::{info, warn};

use super::TlsError;

/// How often, at most, the files are looked at again (one `stat` each): a rotated certificate is used
/// by the first handshake at most this long after it was written.
pub const RECHECK: Duration = Duration::from_secs(1);

/// What identifies one version of a file: modification time, length and inode. A Kubernetes Secret
/// volume swaps a symlink to a new directory, and a rename replaces the inode, so either is seen even
/// when the time and length happen to repeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

fn stamp(path: &std::path::Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    Some(Stamp {
        modified: meta.modified().ok(),
        len: meta.len(),
        inode: meta.ino(),
    })
}

type Build<T> = Box<dyn Fn() -> Result<T, TlsError> + Send + Sync>;

/// A value built from `files`, rebuilt when one of them changes.
///
/// Contract: [`Reloading::current`] returns the last value that built; a change that does not build
/// (a half-written rotation, a key that does not fit its certificate) is logged once and the previous
/// value stays in use until the files change again.
pub(crate) struct Reloading<T> {
    what: &'static str,
    files: Vec<PathBuf>,
    build: Build<T>,
    state: Mutex<State<T>>,
}

struct State<T> {
    current: Arc<T>,
    stamps: Vec<Option<Stamp>>,
    checked: Instant,
}

impl<T> Reloading<T> {
    /// Builds the first value; `what` names it in logs (`server certificate`, …).
    ///
    /// # Errors
    /// The first build's error: a process does not start on unusable certificates.
    pub(crate) fn new(
        what: &'static str,
        files: Vec<PathBuf>,
        build: impl Fn() -> Result<T, TlsError> + Send + Sync + 'static,
    ) -> Result<Self, TlsError> {
        let stamps = files.iter().map(|f| stamp(f)).collect();
        let current = Arc::new(build()?);
        Ok(Self {
            what,
            files,
            build: Box::new(build),
            state: Mutex::new(State {
                current,
                stamps,
                checked: Instant::now(),
            }),
        })
    }

    /// The current value, rebuilt first if the files changed since the last look (looked at no more
    /// than once per [`RECHECK`]). Blocking file reads happen only when a file changed.
    pub(crate) fn current(&self) -> Arc<T> {
        let mut state = self.state.lock();
        let now = Instant::now();
        if now.duration_since(state.checked) < RECHECK {
            return state.current.clone();
        }
        state.checked = now;
        let stamps: Vec<Option<Stamp>> = self.files.iter().map(|f| stamp(f)).collect();
        if stamps == state.stamps {
            return state.current.clone();
        }
        state.stamps = stamps;
        match (self.build)() {
            Ok(value) => {
                info!(what = self.what, files = ?self.files, "reloaded TLS certificates");
                state.current = Arc::new(value);
            }
            Err(err) => {
                warn!(what = self.what, error = %err,
                    "TLS certificate files changed but do not load; keeping the previous ones");
            }
        }
        state.current.clone()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn reader(path: PathBuf, builds: Arc<AtomicUsize>) -> Reloading<String> {
        let file = path.clone();
        Reloading::new("test", vec![path], move || {
            builds.fetch_add(1, Ordering::SeqCst);
            let text = std::fs::read_to_string(&file).map_err(|source| TlsError::Read {
                path: file.clone(),
                source,
            })?;
            if text.starts_with("bad") {
                return Err(TlsError::NoCertificate(file.clone()));
            }
            Ok(text)
        })
        .unwrap()
    }

    fn past_recheck(r: &Reloading<String>) {
        r.state.lock().checked -= RECHECK;
    }

    #[test]
    fn a_changed_file_is_reloaded_at_the_next_look_after_the_recheck_interval() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, "one").unwrap();
        let builds = Arc::new(AtomicUsize::new(0));
        let r = reader(path.clone(), builds.clone());
        std::fs::write(&path, "two!").unwrap();
        assert_eq!(
            *r.current(),
            "one",
            "within the interval the files are not looked at"
        );
        past_recheck(&r);
        assert_eq!(*r.current(), "two!");
        past_recheck(&r);
        assert_eq!(*r.current(), "two!");
        assert_eq!(
            builds.load(Ordering::SeqCst),
            2,
            "an unchanged file is not re-read"
        );
    }

    #[test]
    fn a_change_that_does_not_build_keeps_the_previous_value_until_the_next_change() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, "good").unwrap();
        let builds = Arc::new(AtomicUsize::new(0));
        let r = reader(path.clone(), builds.clone());
        std::fs::write(&path, "bad, half written").unwrap();
        past_recheck(&r);
        assert_eq!(*r.current(), "good");
        past_recheck(&r);
        assert_eq!(*r.current(), "good");
        assert_eq!(
            builds.load(Ordering::SeqCst),
            2,
            "a failed change is tried once"
        );
        std::fs::write(&path, "better").unwrap();
        past_recheck(&r);
        assert_eq!(*r.current(), "better");
    }

    #[test]
    fn the_first_build_failing_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing");
        let built = Reloading::new("test", vec![path.clone()], move || {
            std::fs::read_to_string(&path).map_err(|source| TlsError::Read {
                path: path.clone(),
                source,
            })
        });
        assert!(built.is_err());
    }
}
