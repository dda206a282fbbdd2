//! Sessions and elections against a real etcd: one leader at a time, terms increase, resigning hands over
//! at once, and a deposed leader's fenced writes fail.

use std::time::Duration;

use etcd_client::TxnOp;
use flotilla_common::{Election, ElectionError, LeaderInfo, Session, SessionConfig, connect_etcd};
use flotilla_devcluster::EtcdServer;
use futures::StreamExt;

fn info(id: &str) -> LeaderInfo {
    LeaderInfo {
        id: id.into(),
        address: format!("{id}:1"),
    }
}

fn fast() -> SessionConfig {
    SessionConfig {
        ttl: Duration::from_secs(2),
        renew_interval: Duration::from_millis(500),
        renew_deadline: Duration::from_millis(1500),
    }
}

#[tokio::test]
async fn one_candidate_leads_and_the_next_takes_over_with_a_higher_term_when_it_resigns() {
    let etcd = EtcdServer::start().await.unwrap();
    let client = connect_etcd(&etcd.endpoints()).await.unwrap();
    let election = Election::new(client.clone(), "/flotilla/t/leader".into());
    assert_eq!(
        election.leader().await.unwrap(),
        None,
        "no leader before anyone campaigns"
    );

    let a = Session::start(client.clone(), fast()).await.unwrap();
    let elected_a = election.campaign(&a, &info("a")).await.unwrap();
    let leader = election.leader().await.unwrap().unwrap();
    assert_eq!(leader.info, info("a"));
    assert_eq!(leader.term, elected_a.term());

    let b = Session::start(client.clone(), fast()).await.unwrap();
    let election_b = election.clone();
    let campaign_b = tokio::spawn(async move {
        let elected = election_b.campaign(&b, &info("b")).await;
        (elected, b)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!campaign_b.is_finished(), "b must wait while a leads");

    // a's fenced write works while it leads.
    assert!(
        election
            .fenced_txn(
                &elected_a,
                vec![],
                vec![TxnOp::put("/flotilla/t/x", "a", None)]
            )
            .await
            .unwrap()
    );
    election.resign(&elected_a).await.unwrap();
    let (elected_b, _b) = tokio::time::timeout(Duration::from_secs(2), campaign_b)
        .await
        .expect("b elected within 2s of a resigning")
        .unwrap();
    let elected_b = elected_b.unwrap();
    assert!(elected_b.term() > elected_a.term(), "terms increase");

    // a is deposed: its fenced writes fail and say so.
    let err = election
        .fenced_txn(
            &elected_a,
            vec![],
            vec![TxnOp::put("/flotilla/t/x", "a2", None)],
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, ElectionError::Deposed(t) if t == elected_a.term()),
        "{err:?}"
    );
    drop(a);
}

#[tokio::test]
async fn observe_reports_the_leader_and_its_changes() {
    let etcd = EtcdServer::start().await.unwrap();
    let client = connect_etcd(&etcd.endpoints()).await.unwrap();
    let election = Election::new(client.clone(), "/flotilla/o/leader".into());
    let mut leaders = Box::pin(election.observe());
    assert_eq!(leaders.next().await.unwrap(), None);
    let a = Session::start(client.clone(), fast()).await.unwrap();
    let elected = election.campaign(&a, &info("a")).await.unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(3), leaders.next())
        .await
        .expect("a change within 3s")
        .unwrap();
    assert_eq!(
        seen.map(|l| (l.info.id, l.term)),
        Some(("a".to_owned(), elected.term()))
    );
    a.close().await;
    let seen = tokio::time::timeout(Duration::from_secs(3), leaders.next())
        .await
        .expect("a change within 3s")
        .unwrap();
    assert_eq!(
        seen, None,
        "closing the session ends the leadership at once"
    );
}

#[tokio::test]
async fn a_session_whose_lease_is_revoked_reports_itself_lost() {
    let etcd = EtcdServer::start().await.unwrap();
    let mut client = connect_etcd(&etcd.endpoints()).await.unwrap();
    let session = Session::start(client.clone(), fast()).await.unwrap();
    let lost = session.lost();
    assert!(!session.is_lost());
    client.lease_revoke(session.lease_id()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(3), lost.cancelled())
        .await
        .expect("lost within 3s of the revoke");
}

#[tokio::test]
async fn a_session_that_cannot_reach_etcd_fences_itself_before_its_lease_can_expire() {
    let mut etcd = EtcdServer::start().await.unwrap();
    let client = connect_etcd(&etcd.endpoints()).await.unwrap();
    let session = Session::start(client, fast()).await.unwrap();
    let lost = session.lost();
    let killed_at = tokio::time::Instant::now();
    etcd.kill();
    tokio::time::timeout(Duration::from_secs(3), lost.cancelled())
        .await
        .expect("lost within 3s of etcd going away");
    // The lease (2 s) could at the earliest expire 2 s after the last renewal, which was at most 0.5 s
    // before the kill; fencing must come before that.
    assert!(
        killed_at.elapsed() < Duration::from_millis(2000),
        "fenced after {:?}",
        killed_at.elapsed()
    );
}

#[test]
fn a_renew_deadline_outside_the_lease_is_refused() {
    let config = SessionConfig {
        ttl: Duration::from_secs(5),
        renew_interval: Duration::from_secs(1),
        renew_deadline: Duration::from_secs(5),
    };
    assert!(config.validate().is_err());
}
