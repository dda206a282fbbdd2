//! Certificate material built from files and rebuilt when the files change, checked lazily: at most once
//! per [`RECHECK`], when a handshake asks for it — no timer, so an idle process stays idle.
//!
//! The files are looked at and read on tokio's blocking pool, never on a runtime thread, and the
//! handshake that started a check waits for it at most [`RELOAD_TIMEOUT`] (others meanwhile take the
//! current value at once). So a file that cannot be read promptly — a FIFO swapped in for the
//! certificate, a hung network mount — leaves the previous certificate in use and holds up neither
//! accepting nor `/healthz`: a FIFO at the certificate path used to freeze the coordinator's accept
//! loop on a blocking read until its lease was lost.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use tracing::{info, warn};

use super::TlsError;
use super::metrics::reload_failed;

/// How often, at most, the files are looked at again (one `stat` each): a rotated certificate is used
/// by the first handshake at most this long after it was written.
pub const RECHECK: Duration = Duration::from_secs(1);

/// How long a handshake waits for a check of the files it started; past it, the handshake goes on with
/// the previous certificate and the check finishes (or hangs) on the blocking pool alone. Reading three
/// small files takes milliseconds; 2 s is a disk in trouble, and well inside the 10 s handshake bound.
pub const RELOAD_TIMEOUT: Duration = Duration::from_secs(2);

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
/// (a half-written rotation, a key that does not fit its certificate, a FIFO in place of a file) is
/// logged and counted once and the previous value stays in use until the files change again.
pub(crate) struct Reloading<T> {
    what: &'static str,
    files: Vec<PathBuf>,
    build: Build<T>,
    /// How long the handshake that starts a check waits for it ([`RELOAD_TIMEOUT`]; shorter in tests).
    timeout: Duration,
    /// Held only to read or swap fields, never across a file operation.
    state: Mutex<State<T>>,
}

struct State<T> {
    current: Arc<T>,
    stamps: Vec<Option<Stamp>>,
    checked: Instant,
    /// A check runs on the blocking pool: no second one starts until it returns, so a file that hangs
    /// every read ties up one blocking thread, not one per handshake.
    checking: bool,
}

/// Clears `checking` when a check ends, however it ends (a panicking build included).
struct CheckDone<'a, T>(&'a Mutex<State<T>>);

impl<T> Drop for CheckDone<'_, T> {
    fn drop(&mut self) {
        self.0.lock().checking = false;
    }
}

impl<T: Send + Sync + 'static> Reloading<T> {
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
            timeout: RELOAD_TIMEOUT,
            state: Mutex::new(State {
                current,
                stamps,
                checked: Instant::now(),
                checking: false,
            }),
        })
    }

    /// The current value, rebuilt first if the files changed since the last look (looked at no more
    /// than once per [`RECHECK`], on the blocking pool, waited for at most [`RELOAD_TIMEOUT`]).
    ///
    /// # Cancel safety
    /// A check started here goes on without the caller and updates the value when it ends.
    pub(crate) async fn current(self: &Arc<Self>) -> Arc<T> {
        {
            let mut state = self.state.lock();
            let now = Instant::now();
            if state.checking || now.duration_since(state.checked) < RECHECK {
                return state.current.clone();
            }
            state.checked = now;
            state.checking = true;
        }
        let this = Arc::clone(self);
        let check = tokio::task::spawn_blocking(move || this.check());
        if tokio::time::timeout(self.timeout, check).await.is_err() {
            reload_failed("timed_out");
            warn!(what = self.what, files = ?self.files, timeout = ?self.timeout,
                "TLS certificate files could not be read in time; keeping the previous ones (no new check starts until this one ends)");
        }
        self.state.lock().current.clone()
    }

    /// Looks at the files and rebuilds if they changed; runs on the blocking pool.
    fn check(&self) {
        let _done = CheckDone(&self.state);
        let stamps: Vec<Option<Stamp>> = self.files.iter().map(|f| stamp(f)).collect();
        if stamps == self.state.lock().stamps {
            return;
        }
        let built = (self.build)();
        let mut state = self.state.lock();
        state.stamps = stamps;
        match built {
            Ok(value) => {
                info!(what = self.what, files = ?self.files, "reloaded TLS certificates");
                state.current = Arc::new(value);
            }
            Err(err) => {
                reload_failed(match err {
                    TlsError::NotRegularFile { .. } => "not_regular_file",
                    _ => "invalid",
                });
                warn!(what = self.what, error = %err,
                    "TLS certificate files changed but do not load; keeping the previous ones");
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn reader(path: PathBuf, builds: Arc<AtomicUsize>) -> Arc<Reloading<String>> {
        let file = path.clone();
        let reloading = Reloading::new("test", vec![path], move || {
            builds.fetch_add(1, Ordering::SeqCst);
            let text = String::from_utf8_lossy(&super::super::config::read(&file)?).into_owned();
            if text.starts_with("bad") {
                return Err(TlsError::NoCertificate(file.clone()));
            }
            Ok(text)
        });
        Arc::new(reloading.unwrap())
    }

    fn past_recheck(r: &Reloading<String>) {
        r.state.lock().checked -= RECHECK;
    }

    fn failures(reason: &'static str) -> u64 {
        super::super::metrics::RELOAD_FAILURES
            .get_or_create(&super::super::metrics::ReasonLabel { reason })
            .get()
    }

    #[tokio::test]
    async fn a_changed_file_is_reloaded_at_the_next_look_after_the_recheck_interval() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, "one").unwrap();
        let builds = Arc::new(AtomicUsize::new(0));
        let r = reader(path.clone(), builds.clone());
        std::fs::write(&path, "two!").unwrap();
        assert_eq!(
            *r.current().await,
            "one",
            "within the interval the files are not looked at"
        );
        past_recheck(&r);
        assert_eq!(*r.current().await, "two!");
        past_recheck(&r);
        assert_eq!(*r.current().await, "two!");
        assert_eq!(
            builds.load(Ordering::SeqCst),
            2,
            "an unchanged file is not re-read"
        );
    }

    #[tokio::test]
    async fn a_change_that_does_not_build_keeps_the_previous_value_until_the_next_change() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, "good").unwrap();
        let builds = Arc::new(AtomicUsize::new(0));
        let r = reader(path.clone(), builds.clone());
        std::fs::write(&path, "bad, half written").unwrap();
        past_recheck(&r);
        assert_eq!(*r.current().await, "good");
        past_recheck(&r);
        assert_eq!(*r.current().await, "good");
        assert_eq!(
            builds.load(Ordering::SeqCst),
            2,
            "a failed change is tried once"
        );
        std::fs::write(&path, "better").unwrap();
        past_recheck(&r);
        assert_eq!(*r.current().await, "better");
    }

    /// Regression: a FIFO in place of the certificate file blocked the reload's read, on a runtime
    /// thread inside the accept loop, until the coordinator lost its lease.
    #[tokio::test]
    async fn a_fifo_in_place_of_the_file_is_refused_at_once_and_the_previous_value_stays() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cert.pem");
        std::fs::write(&path, "one").unwrap();
        let builds = Arc::new(AtomicUsize::new(0));
        let r = reader(path.clone(), builds.clone());
        std::fs::remove_file(&path).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap();
        assert!(made.success(), "mkfifo failed");
        let refused = failures("not_regular_file");
        past_recheck(&r);
        // Under the reload timeout (a hung open would take all of it), with room for a loaded machine.
        let current = tokio::time::timeout(RELOAD_TIMEOUT * 3 / 4, r.current())
            .await
            .expect("a FIFO must not hold up the reload");
        assert_eq!(*current, "one");
        assert_eq!(failures("not_regular_file"), refused + 1);
        // Refused again without opening it, and never a hang.
        let err = super::super::config::read(&path).unwrap_err();
        assert!(
            err.to_string().contains("is a FIFO, not a regular file"),
            "{err}"
        );
        // Back to a regular file: reloaded.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, "two").unwrap();
        past_recheck(&r);
        assert_eq!(*r.current().await, "two");
    }

    #[tokio::test]
    async fn a_check_that_hangs_holds_a_handshake_only_until_the_timeout_and_others_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, "one").unwrap();
        let (release, hold) = std::sync::mpsc::channel::<()>();
        let hold = parking_lot::Mutex::new(hold);
        let first = std::sync::atomic::AtomicBool::new(true);
        let file = path.clone();
        let mut reloading = Reloading::new("test", vec![path.clone()], move || {
            // Every build after the first waits as a read of a hung mount would.
            if !first.swap(false, Ordering::SeqCst) {
                let _ = hold.lock().recv();
            }
            Ok(std::fs::read_to_string(&file).unwrap())
        })
        .unwrap();
        reloading.timeout = Duration::from_secs(1);
        let r = Arc::new(reloading);
        std::fs::write(&path, "two!").unwrap();
        past_recheck(&r);
        let timed_out = failures("timed_out");
        let started = Instant::now();
        assert_eq!(*r.current().await, "one");
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_secs(1) && waited < Duration::from_secs(5),
            "{waited:?}"
        );
        assert_eq!(failures("timed_out"), timed_out + 1);
        // While the check hangs, nobody waits for it, and no second one starts.
        past_recheck(&r);
        let started = Instant::now();
        assert_eq!(*r.current().await, "one");
        // Half the timeout: a call that waited for the check would take all of it.
        assert!(started.elapsed() < Duration::from_millis(500));
        // Once it ends, its value is served.
        release.send(()).unwrap();
        let started = Instant::now();
        while *r.current().await != "two!" {
            assert!(started.elapsed() < Duration::from_secs(5), "never reloaded");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
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

    #[test]
    fn a_fifo_at_start_up_is_refused_not_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cert.pem");
        let made = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap();
        assert!(made.success(), "mkfifo failed");
        let file = path.clone();
        let built = Reloading::new("test", vec![path], move || {
            super::super::config::read(&file).map(|_| ())
        });
        assert!(matches!(
            built,
            Err(TlsError::NotRegularFile { kind: "FIFO", .. })
        ));
    }
}
