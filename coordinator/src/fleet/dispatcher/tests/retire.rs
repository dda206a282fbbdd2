//! A controller retired while one of its keys still runs, then registered again: the new queue knows
//! nothing of that run, so the key must wait for it (it becomes foreign at retirement), and the old
//! run's Done must not finish the new queue's run of the key.

use std::time::Duration;

use tokio::time::Instant;

use super::super::super::messages::ControllerSpec;
use super::{CONTROLLER, Fleet, keys_of_shard, spec};

#[tokio::test(start_paused = true)]
async fn a_key_running_when_its_controller_retires_runs_again_only_after_that_run_ends() {
    let mut f = Fleet::new(100).await;
    f.start_worker("a", 100);
    f.advance(Duration::from_secs(1)).await;
    let key = keys_of_shard(0, 1)[0].clone();
    f.enqueue(&[key.as_str()]);
    assert_eq!(f.assignments_of(&key), ["a"]);

    // Retired (as when no live worker declared it for --controller-retire-after) while `a` runs the
    // key, then declared again, and the key changes once more.
    f.d.retire(CONTROLLER, Instant::now());
    f.turn();
    f.d.register_controller(ControllerSpec::try_from(spec()).expect("the test spec is valid"));
    f.advance(Duration::from_secs(1)).await;
    f.enqueue(&[key.as_str()]);
    assert_eq!(
        f.assignments_of(&key),
        ["a"],
        "the key is not sent again while its run from before the retirement is out"
    );

    f.finish("a", &key);
    assert_eq!(
        f.assignments_of(&key),
        ["a", "a"],
        "the new registration's run goes out once the old run ended"
    );
    f.finish("a", &key);
    assert!(f.owed.is_empty(), "no key is lost: {:?}", f.owed);
    assert_eq!(
        f.runner_of(&key),
        None,
        "nothing runs the key twice or forever"
    );
}
