//! The transport flags under `--check-config`: a fleet process without `--tls-*` flags and without
//! `--insecure-plaintext` is refused saying what to give; mutual TLS with readable certificates passes;
//! incomplete or unreadable TLS flags are refused naming the flag or the file.

use super::binaries::{describe, run};
use crate::pki::Pki;

/// An etcd URL nothing listens on: `--check-config` must not dial it.
const ETCD: &str = "http://127.0.0.1:9";

async fn check(binary: &str, args: &[&str]) -> std::process::Output {
    let mut argv: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    argv.push("--check-config".to_owned());
    run(binary, &argv).await
}

fn assert_ok(output: &std::process::Output) {
    assert!(output.status.success(), "{}", describe(output));
}

fn assert_refused(output: &std::process::Output, naming: &str) {
    assert!(!output.status.success(), "{}", describe(output));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains(naming),
        "the error should name {naming:?}; {}",
        describe(output)
    );
}

fn path(p: &std::path::Path) -> &str {
    p.to_str().unwrap()
}

#[tokio::test]
async fn without_tls_flags_or_insecure_plaintext_every_fleet_process_is_refused_saying_why() {
    for (binary, args) in [
        ("flotilla", &["coordinator", "--etcd-endpoints", ETCD][..]),
        ("flotilla", &["worker", "--etcd-endpoints", ETCD][..]),
        ("greeting-controller", &["--etcd-endpoints", ETCD][..]),
    ] {
        let refused = check(binary, args).await;
        assert_refused(&refused, "--insecure-plaintext");
        assert_refused(&refused, "--tls-cert");
    }
}

#[tokio::test]
async fn mutual_tls_with_readable_certificates_passes_and_bad_tls_flags_are_refused() {
    let pki = Pki::new();
    let server = pki.server("coordinator");
    let client = pki.client("w0", "w0");
    let ca = path(pki.ca_file());
    let coordinator = [
        "coordinator",
        "--etcd-endpoints",
        ETCD,
        "--tls-cert",
        path(&server.cert),
        "--tls-key",
        path(&server.key),
        "--tls-client-ca",
        ca,
    ];
    assert_ok(&check("flotilla", &coordinator).await);
    let worker = [
        "worker",
        "--etcd-endpoints",
        ETCD,
        "--worker-id",
        "w0",
        "--tls-cert",
        path(&client.cert),
        "--tls-key",
        path(&client.key),
        "--tls-client-ca",
        ca,
        "--tls-server-name",
        "flotilla-coordinator.flotilla-system.svc",
    ];
    assert_ok(&check("flotilla", &worker).await);

    // Incomplete, contradictory, misplaced and unreadable.
    assert_refused(
        &check("flotilla", &coordinator[..7]).await,
        "--tls-client-ca",
    );
    let both = [&coordinator[..], &["--insecure-plaintext"]].concat();
    assert_refused(&check("flotilla", &both).await, "--insecure-plaintext");
    let named = [&coordinator[..], &["--tls-server-name", "x"]].concat();
    assert_refused(&check("flotilla", &named).await, "--tls-server-name");
    let mut missing = coordinator;
    missing[6] = "/nonexistent/tls.key";
    assert_refused(&check("flotilla", &missing).await, "/nonexistent/tls.key");
    let mut not_a_key = worker;
    not_a_key[8] = ca;
    assert_refused(&check("flotilla", &not_a_key).await, ca);
}
