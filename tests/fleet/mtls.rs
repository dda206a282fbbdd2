//! Mutual TLS between workers and coordinators, end to end with real processes and certificates from a
//! test CA: a fleet over mTLS reconciles; a worker whose certificate names another id is refused with a
//! clear error and counted, and joins once its files are rotated to the right identity, without a
//! restart; a certificate from an unknown CA gets no connection either way; a rotated coordinator
//! certificate is served to the next connection; a FIFO in place of the coordinator's certificate is
//! refused while the previous certificate keeps serving; and a process with neither TLS flags nor
//! `--insecure-plaintext` exits non-zero saying why.

use std::time::Duration;

use flotilla_common::tls::{ClientTransport, TlsFiles, TlsFlags};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::Api;

use crate::support::cluster::TestCluster;
use crate::support::fleet::{Fleet, Proc, binary, metric};
use crate::support::namespace::unique_namespace;
use crate::support::pki::{CertFiles, Pki};
use crate::support::wait::{wait_for, within};

/// `--tls-cert <cert> --tls-key <key> --tls-client-ca <ca>`.
fn tls_flags(files: &CertFiles, ca: &std::path::Path) -> Vec<String> {
    [
        "--tls-cert",
        files.cert.to_str().unwrap(),
        "--tls-key",
        files.key.to_str().unwrap(),
        "--tls-client-ca",
        ca.to_str().unwrap(),
    ]
    .map(String::from)
    .to_vec()
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// A coordinator serving `server`'s certificate, requiring client certificates of `pki`'s CA.
fn tls_coordinator(fleet: &Fleet, pki: &Pki, server: &CertFiles) -> Proc {
    fleet.coordinator("c0", &strs(&tls_flags(server, pki.ca_file())))
}

/// `flotilla worker --controllers serviceaccount` as `id`, presenting `client`, trusting `ca`.
fn tls_worker(fleet: &Fleet, id: &str, client: &CertFiles, ca: &std::path::Path) -> Proc {
    let mut args = vec![
        "worker".to_owned(),
        "--controllers".to_owned(),
        "serviceaccount".to_owned(),
    ];
    args.extend(tls_flags(client, ca));
    fleet.worker("flotilla", id, &strs(&args))
}

/// How the test asks the leader for its status: a client certificate of `pki`'s CA (the Admin service
/// asks for no particular identity).
fn admin_transport(pki: &Pki) -> ClientTransport {
    let status = pki.client("status", "flotilla-status");
    TlsFlags::tls(status.cert, status.key, pki.ca_file().to_owned())
        .client()
        .expect("load the status client's certificate")
}

/// Waits until `proc`'s log has a line holding every one of `needles`, and returns that line.
async fn log_line(proc: &Proc, needles: &[&str], what: &str) -> String {
    wait_for(Duration::from_secs(30), what, || async {
        proc.log_text()
            .lines()
            .find(|l| needles.iter().all(|n| l.contains(n)))
            .map(str::to_owned)
    })
    .await
}

async fn bad_input(coordinator: &Proc, reason: &str) -> f64 {
    let text = coordinator.metrics_text().await;
    metric(
        &text,
        &format!(r#"flotilla_bad_input_total{{reason="{reason}"}}"#),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_over_mutual_tls_reconciles_and_flotilla_status_reads_it_with_a_certificate() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let pki = Pki::new();
    let mut fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    fleet.admin = admin_transport(&pki);
    let coordinator = tls_coordinator(&fleet, &pki, &pki.server("coordinator"));
    let _w0 = tls_worker(&fleet, "w0", &pki.client("w0", "w0"), pki.ca_file());
    // A certificate naming its worker by CN only (no SAN) is as good.
    let w1_files = pki.ca.cn_only_leaf("w1").write(pki.dir(), "w1");
    let _w1 = tls_worker(&fleet, "w1", &w1_files, pki.ca_file());
    fleet.wait_for_workers(2, Duration::from_secs(60)).await;

    // Dispatch and the Cache reads of the serviceaccount controller both go over mTLS.
    let ns = unique_namespace(&client, "mtls").await;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    wait_for(
        Duration::from_secs(30),
        "the default ServiceAccount of a new namespace, made by a worker over mTLS",
        || async { accounts.get_opt("default").await.ok().flatten() },
    )
    .await;
    assert_eq!(
        bad_input(&coordinator, "tls_identity_mismatch").await,
        0.0,
        "no refusal on a fleet whose certificates are right"
    );

    // `flotilla status` over mTLS; and the same without a certificate is refused.
    let status = pki.client("status-cli", "flotilla-status");
    let mut args = vec![
        "status".to_owned(),
        "-o".to_owned(),
        "json".to_owned(),
        "--fleet".to_owned(),
        fleet.name.clone(),
        "--etcd-endpoints".to_owned(),
        fleet.etcd_endpoints.join(","),
    ];
    let plaintext = std::process::Command::new(binary("flotilla"))
        .args(&args)
        .arg("--insecure-plaintext")
        .output()
        .unwrap();
    assert!(
        !plaintext.status.success(),
        "a plaintext status must not reach an mTLS coordinator"
    );
    args.extend(tls_flags(&status, pki.ca_file()));
    let output = std::process::Command::new(binary("flotilla"))
        .args(&args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "flotilla status over mTLS failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["workers"].as_array().map(Vec::len), Some(2), "{json}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_whose_certificate_names_another_id_is_refused_until_its_files_are_rotated() {
    let cluster = TestCluster::start().await;
    let pki = Pki::new();
    let mut fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    fleet.admin = admin_transport(&pki);
    let coordinator = tls_coordinator(&fleet, &pki, &pki.server("coordinator"));
    // w0 presents a certificate of the fleet's CA, but for "someone-else".
    let files = pki.client("w0", "someone-else");
    let mut worker = tls_worker(&fleet, "w0", &files, pki.ca_file());

    let line = log_line(
        &worker,
        &["the leader refused the stream", "worker identity refused"],
        "the worker to log why the leader refused it",
    )
    .await;
    assert!(
        line.contains(r#"DNS SAN \"someone-else\" does not match worker id \"w0\""#),
        "{line}"
    );
    wait_for(
        Duration::from_secs(30),
        "the refusal counted as tls_identity_mismatch",
        || async { (bad_input(&coordinator, "tls_identity_mismatch").await >= 1.0).then_some(()) },
    )
    .await;
    log_line(
        &coordinator,
        &["refusing a worker stream", "tls_identity_mismatch"],
        "the coordinator to log the refusal",
    )
    .await;
    let status = fleet.status().await.expect("the leader answers over mTLS");
    assert!(
        status.workers.iter().all(|w| !w.connected),
        "a refused worker is not connected: {status:?}"
    );

    // Rotate the worker's files to a certificate for w0: its next connection presents it.
    let pid = worker.pid();
    pki.ca.client_leaf("w0").write_to(&files);
    fleet.wait_for_workers(1, Duration::from_secs(30)).await;
    assert!(worker.is_running(), "the worker was not restarted");
    assert_eq!(worker.pid(), pid);
}

#[tokio::test(flavor = "multi_thread")]
async fn certificates_of_an_unknown_ca_get_no_connection_either_way() {
    let cluster = TestCluster::start().await;
    let pki = Pki::new();
    let stranger = Pki::named("some-other-ca");
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let coordinator = tls_coordinator(&fleet, &pki, &pki.server("coordinator"));
    // A client certificate the coordinator's client CA did not sign.
    let outsider = tls_worker(&fleet, "w0", &stranger.client("w0", "w0"), pki.ca_file());
    // A worker that trusts another CA than the one that signed the coordinator's certificate.
    let distrustful = tls_worker(&fleet, "w1", &pki.client("w1", "w1"), stranger.ca_file());

    log_line(
        &outsider,
        &["cannot open a stream to the leader"],
        "the worker with an unknown CA's certificate to fail to connect",
    )
    .await;
    let line = log_line(
        &distrustful,
        &["cannot open a stream to the leader"],
        "the worker distrusting the coordinator's CA to fail to connect",
    )
    .await;
    assert!(
        line.contains("certificate") || line.contains("UnknownIssuer"),
        "{line}"
    );
    wait_for(
        Duration::from_secs(30),
        "the failed handshakes counted as tls_handshake",
        || async { (bad_input(&coordinator, "tls_handshake").await >= 2.0).then_some(()) },
    )
    .await;
    assert!(
        !outsider.log_text().contains("welcomed") && !distrustful.log_text().contains("welcomed"),
        "neither worker may be welcomed"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rotated_coordinator_certificate_is_served_to_the_next_connection_without_a_restart() {
    let cluster = TestCluster::start().await;
    let pki = Pki::new();
    let next_ca = Pki::named("next-ca");
    let mut fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    fleet.admin = admin_transport(&pki);
    let server = pki.server("coordinator");
    let mut coordinator = tls_coordinator(&fleet, &pki, &server);
    wait_for(Duration::from_secs(30), "the coordinator to lead", || {
        fleet.status()
    })
    .await;

    // A client that trusts only the next CA cannot talk to the coordinator yet...
    let status = pki.client("status", "flotilla-status");
    let trusts_next = ClientTransport::Tls(
        flotilla_common::tls::ClientTls::load(
            &TlsFiles {
                cert: status.cert.clone(),
                key: status.key.clone(),
                ca: next_ca.ca_file().to_owned(),
            },
            None,
        )
        .unwrap(),
    );
    let mut next_fleet = Fleet::new(fleet.etcd_endpoints.clone(), &fleet.kubeconfig);
    next_fleet.name = fleet.name.clone();
    next_fleet.admin = trusts_next;
    assert!(
        next_fleet.status().await.is_none(),
        "the coordinator's certificate is not of the next CA yet"
    );

    // ...until the coordinator's files are rotated to a certificate of the next CA.
    let pid = coordinator.pid();
    next_ca.ca.server_leaf("coordinator").write_to(&server);
    wait_for(
        Duration::from_secs(15),
        "the rotated server certificate on a new connection",
        || next_fleet.status(),
    )
    .await;
    assert!(
        coordinator.is_running(),
        "the coordinator was not restarted"
    );
    assert_eq!(coordinator.pid(), pid);
    log_line(
        &coordinator,
        &["reloaded TLS certificates"],
        "the coordinator to log the reload",
    )
    .await;
    // And the old CA's clients no longer trust it: the rotation really took.
    assert!(fleet.status().await.is_none());
}

/// Regression: the reload read the certificate on a runtime thread inside the accept loop, so a FIFO at
/// the certificate path blocked it for good: no connection was accepted, `/healthz` went unanswered and
/// the lease was lost.
#[tokio::test(flavor = "multi_thread")]
async fn a_fifo_in_place_of_the_coordinator_certificate_is_refused_and_the_old_one_keeps_serving() {
    let cluster = TestCluster::start().await;
    let pki = Pki::new();
    let mut fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    fleet.admin = admin_transport(&pki);
    let server = pki.server("coordinator");
    let coordinator = tls_coordinator(&fleet, &pki, &server);
    let _w0 = tls_worker(&fleet, "w0", &pki.client("w0", "w0"), pki.ca_file());
    fleet.wait_for_workers(1, Duration::from_secs(60)).await;
    let leader = fleet.leader().await.expect("a leader");

    std::fs::remove_file(&server.cert).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(&server.cert)
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo failed");
    // Past the recheck interval the next handshake looks at the files; and past the lease duration
    // (5 s) a frozen leader would have lost its lease.
    tokio::time::sleep(flotilla_common::tls::RECHECK + Duration::from_millis(200)).await;
    for _ in 0..3 {
        let status = within(
            Duration::from_secs(5),
            "a new mTLS connection's answer",
            fleet.status(),
        )
        .await;
        assert!(
            status.is_some(),
            "a new connection must still be served the previous certificate"
        );
        let (code, _) = within(
            Duration::from_secs(5),
            "/healthz",
            coordinator.http_get("/healthz"),
        )
        .await;
        assert_eq!(code, 200);
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let now = fleet.leader().await.expect("a leader");
    assert_eq!(
        (now.info.id, now.term),
        (leader.info.id, leader.term),
        "the leader kept its lease"
    );
    log_line(
        &coordinator,
        &["do not load", "is a FIFO, not a regular file"],
        "the coordinator to log the refusal",
    )
    .await;
    let text = coordinator.metrics_text().await;
    assert_eq!(
        metric(
            &text,
            r#"flotilla_tls_reload_failures_total{reason="not_regular_file"}"#
        ),
        1.0,
        "counted once, not once per handshake"
    );
    let status = fleet.status().await.expect("the leader answers");
    assert!(status.workers.iter().any(|w| w.id == "w0" && w.connected));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_process_without_tls_flags_or_insecure_plaintext_exits_non_zero_saying_why() {
    // Refused before anything is dialled: an etcd that is not there and a kubeconfig for an API that is
    // not there either.
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:9\n\
         users:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\n\
         current-context: x\n",
    )
    .unwrap();
    let kubeconfig = kubeconfig.to_str().unwrap();
    let etcd = "http://127.0.0.1:9";
    for (program, args) in [
        (
            "flotilla",
            vec![
                "coordinator",
                "--etcd-endpoints",
                etcd,
                "--kubeconfig",
                kubeconfig,
            ],
        ),
        (
            "flotilla",
            vec![
                "worker",
                "--etcd-endpoints",
                etcd,
                "--kubeconfig",
                kubeconfig,
            ],
        ),
        (
            "fleet-probe",
            vec![
                "--controllers",
                "one-child",
                "--etcd-endpoints",
                etcd,
                "--kubeconfig",
                kubeconfig,
            ],
        ),
        ("flotilla", vec!["status", "--etcd-endpoints", etcd]),
    ] {
        let run = tokio::process::Command::new(binary(program))
            .args(&args)
            .kill_on_drop(true)
            .output();
        let output = tokio::time::timeout(Duration::from_secs(30), run)
            .await
            .unwrap_or_else(|_| panic!("{program} {args:?} still runs after 30s"))
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !output.status.success(),
            "{program} {args:?} started: {stderr}"
        );
        assert!(
            stderr.contains("no transport security configured")
                && stderr.contains("--insecure-plaintext"),
            "{program} {args:?} must say why: {stderr}"
        );
    }
}
