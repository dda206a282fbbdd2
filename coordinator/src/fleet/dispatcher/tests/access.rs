//! A worker reads the cache the moment its Welcome arrives, and the Welcome travels on another thread
//! than the dispatcher's: the view of who may read must be published before the Hello is answered, not
//! at the end of the turn. (Found as a fleet test's cache read refused 1.5 ms after its Welcome.)

use super::{Fleet, configmaps};

#[tokio::test(start_paused = true)]
async fn a_worker_may_read_its_kinds_as_soon_as_its_hello_is_answered() {
    let mut f = Fleet::new(10).await;
    f.register_worker("a", 4);
    let lease = f.workers["a"]
        .lease
        .expect("a registered worker has a lease");
    assert!(
        f.d.ctx
            .access
            .check("a", lease, &configmaps(), |_| false)
            .is_err(),
        "a worker that has not said Hello reads nothing"
    );
    f.say_hello("a");
    let reply = f
        .workers
        .get_mut("a")
        .and_then(|w| w.stream.as_mut())
        .and_then(|s| s.reply.as_mut())
        .expect("a stream waiting for its Welcome")
        .try_recv();
    assert!(
        matches!(reply, Ok(Ok(_))),
        "the Hello is answered at once: {reply:?}"
    );
    let read = f.d.ctx.access.check("a", lease, &configmaps(), |_| false);
    assert_eq!(
        read,
        Ok(()),
        "the Welcome went out before the worker may read"
    );
}
