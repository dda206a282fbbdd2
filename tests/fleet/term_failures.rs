//! Whatever ends a leader's term — etcd going away, a Hello whose worker id etcd refuses as a key, a
//! stored controller spec whose numbers would overflow — the coordinator steps down cleanly, campaigns
//! again, and its `/healthz` and `/readyz` never claim what is not so.
//!
//! Regression tests of an outside probe's findings: a term that ended on an error made the leadership
//! loop poll a finished JoinHandle and die, leaving a process that said "leading; caches synced" and
//! never led again; a resync of u64::MAX persisted in etcd panicked every leader that loaded it.

use std::time::{Duration, Instant};

use flotilla_common::{FleetKeys, connect_etcd};
use flotilla_devcluster::EtcdServer;
use flotilla_proto as proto;
use prost::Message;
use tonic::Code;

use super::common::{JOURNAL_LABEL, create_configmaps, journal_worker, leader_id, reconciled};
use super::peer::{configmaps, hello, hello_with, open, register, spec};
use crate::support::cluster::TestCluster;
use crate::support::fleet::{Fleet, LEASE, Proc, metric};
use crate::support::namespace::unique_namespace;
use crate::support::wait::wait_for;

/// How each coordinator's `/readyz` describes it: "leading", "following" or something else (stepping
/// down, no etcd session), or "down" when it does not answer 200 on `/healthz`.
async fn roles(coordinators: &[(&str, &Proc)]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (id, proc) in coordinators {
        let (health, _) = proc.http_get("/healthz").await;
        let (ready, body) = proc.http_get("/readyz").await;
        let role = if health != 200 {
            "down".to_owned()
        } else if ready == 200 && body.starts_with("leading") {
            "leading".to_owned()
        } else if ready == 200 && body.starts_with("following") {
            "following".to_owned()
        } else {
            format!("not ready ({body})")
        };
        out.push(((*id).to_owned(), role));
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn after_etcd_dies_and_returns_a_coordinator_leads_again_within_the_lease_and_health_never_lies()
 {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let ns = unique_namespace(&client, "etcdloss").await;
    // The fleet's own etcd, so the cluster keeps serving while it is down.
    let mut etcd = EtcdServer::start().await.unwrap();
    let fleet = Fleet::new(etcd.endpoints(), cluster.kubeconfig_path());
    let journal = fleet.dir().join("journal.jsonl");
    let c0 = fleet.coordinator("c0", &[]);
    let c1 = fleet.coordinator("c1", &[]);
    let _w = journal_worker(&fleet, "w0", &journal, 5, 10);
    fleet.wait_for_workers(1, Duration::from_secs(60)).await;
    create_configmaps(&client, &ns, "before", 1, JOURNAL_LABEL).await;
    reconciled(&journal, &format!("{ns}/before-0"), Duration::from_secs(30)).await;
    let coordinators = [("c0", &c0), ("c1", &c1)];
    let led_before = leader_id(&fleet).await;

    // etcd gone for twice the renew deadline (2 s in tests): every term ends, on a lost lease or on the
    // dispatcher's own etcd errors, whichever comes first.
    etcd.kill();
    let outage = Duration::from_secs(4);
    let down_since = Instant::now();
    while down_since.elapsed() < outage {
        // Nobody can lead without etcd: past the renew deadline, no process may say it leads.
        if down_since.elapsed() > Duration::from_secs(3) {
            for (id, role) in roles(&coordinators).await {
                assert_ne!(role, "leading", "{id} says it leads while etcd is down");
                assert_ne!(
                    role, "down",
                    "{id}'s leadership loop died while etcd was down"
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    etcd.restart().await.unwrap();
    let back = Instant::now();

    // A leader (this one or the standby) leads again within the lease plus 2 s, and says so.
    let leader = wait_for(
        LEASE + Duration::from_secs(2),
        "a coordinator to lead again after etcd returned",
        || async {
            let leader = fleet.leader().await?.info.id;
            let roles = roles(&coordinators).await;
            roles
                .iter()
                .any(|(id, role)| *id == leader && role == "leading")
                .then_some(leader)
        },
    )
    .await;
    eprintln!("{leader} leads {:?} after etcd returned", back.elapsed());
    // From then on, for longer than a lease, exactly the elected one says it leads, the other follows.
    let until = Instant::now() + LEASE + Duration::from_secs(1);
    while Instant::now() < until {
        let elected = fleet.leader().await.map(|l| l.info.id);
        for (id, role) in roles(&coordinators).await {
            if Some(&id) == elected.as_ref() {
                assert!(
                    role == "leading" || role.starts_with("not ready (leading"),
                    "the elected {id} says {role}"
                );
            } else {
                assert_eq!(role, "following", "{id} is not elected but says {role}");
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // And the fleet works: a new key is reconciled.
    create_configmaps(&client, &ns, "after", 1, JOURNAL_LABEL).await;
    reconciled(&journal, &format!("{ns}/after-0"), Duration::from_secs(30)).await;
    eprintln!(
        "a new key reconciled {:?} after etcd returned",
        back.elapsed()
    );
    let (_, led) = coordinators
        .iter()
        .find(|(id, _)| *id == led_before)
        .expect("the leader is one of the two");
    assert!(
        led.log_text().contains("stepped down"),
        "{led_before} never stepped down"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hello_etcd_would_refuse_and_a_stored_spec_that_would_overflow_cannot_end_a_term() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let ns = unique_namespace(&client, "poison").await;
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    // A spec that once slipped into etcd: a resync of u64::MAX seconds, which overflowed `now + resync`
    // in every leader that loaded it.
    let poisoned = proto::ControllerSpec {
        resync_seconds: u64::MAX,
        ..spec("poisoned", configmaps())
    };
    let mut etcd = connect_etcd(&fleet.etcd_endpoints).await.unwrap();
    etcd.put(
        FleetKeys::new(&fleet.name).controller("poisoned"),
        poisoned.encode_to_vec(),
        None,
    )
    .await
    .unwrap();
    let journal = fleet.dir().join("journal.jsonl");
    let coordinator = fleet.coordinator("c0", &[]);
    let _w = journal_worker(&fleet, "w0", &journal, 5, 10);
    wait_for(
        Duration::from_secs(60),
        "the leader to count the stored spec as invalid",
        || async {
            let text = coordinator.metrics_text().await;
            (metric(
                &text,
                r#"flotilla_bad_input_total{reason="invalid_stored_spec"}"#,
            ) >= 1.0)
                .then_some(())
        },
    )
    .await;
    let leader = fleet.leader().await.expect("a leader");
    let term = leader.term;
    let addr = leader.info.address;

    // The same spec in a Hello is refused at the edge, before anything reaches etcd.
    let (_, lease) = register(&fleet, "rogue", 60, 1).await;
    let refused = open(&addr, hello_with("rogue", lease, vec![(poisoned, 1)]))
        .await
        .1;
    let status = refused.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{}", status.message());
    assert!(status.message().contains("resync"), "{}", status.message());

    // A 2 MiB worker id: etcd refuses such a key, which used to end the term.
    let huge = "w".repeat(2 << 20);
    let status = open(&addr, hello(&huge, lease, 0, "rogue"))
        .await
        .1
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{}", status.message());
    assert!(
        status.message().contains("worker_id"),
        "{}",
        status.message()
    );
    assert!(
        status.message().len() < 1024,
        "the refusal must not echo the id"
    );

    // The term goes on, and the fleet reconciles.
    create_configmaps(&client, &ns, "after", 1, JOURNAL_LABEL).await;
    reconciled(&journal, &format!("{ns}/after-0"), Duration::from_secs(30)).await;
    let now = fleet.leader().await.expect("a leader");
    assert_eq!(
        (now.info.id.as_str(), now.term),
        ("c0", term),
        "the term changed"
    );
    assert_eq!(coordinator.http_get("/healthz").await.0, 200);
    let log = coordinator.log_text();
    assert!(
        !log.contains("panicked"),
        "the coordinator panicked:\n{log}"
    );
    assert!(
        log.len() < 1 << 20,
        "the 2 MiB id must not reach the log whole"
    );
}
