//! `--check-config` on the coordinator and on worker binaries: good flags print `configuration ok` and
//! exit 0, bad ones exit non-zero naming the problem — and neither touches etcd or the Kubernetes API,
//! which here is a port that accepts connections and never answers, so a process that dialled it
//! would hang past the run's bound.

use std::net::TcpListener;

use super::binaries::{describe, run};

/// A port that takes connections and never answers, and a kubeconfig pointing at it.
struct Silent {
    _listener: TcpListener,
    url: String,
    kubeconfig: tempfile::NamedTempFile,
}

fn silent() -> Silent {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let kubeconfig = tempfile::NamedTempFile::new().unwrap();
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {url}\n\
         users:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\n\
         current-context: x\n"
    );
    std::fs::write(kubeconfig.path(), text).unwrap();
    Silent {
        _listener: listener,
        url,
        kubeconfig,
    }
}

async fn check(binary: &str, args: &[&str]) -> std::process::Output {
    let mut argv: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    argv.push("--check-config".to_owned());
    run(binary, &argv).await
}

fn assert_ok(output: &std::process::Output) {
    assert!(output.status.success(), "{}", describe(output));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        "configuration ok",
        "{}",
        describe(output)
    );
}

fn assert_refused(output: &std::process::Output, naming: &str) {
    assert!(!output.status.success(), "{}", describe(output));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains(naming),
        "the error should name {naming:?}; {}",
        describe(output)
    );
}

#[tokio::test]
async fn good_flags_pass_without_touching_etcd_or_the_api() {
    let s = silent();
    let kubeconfig = s.kubeconfig.path().to_str().unwrap();
    let coordinator = check(
        "flotilla",
        &[
            "coordinator",
            "--etcd-endpoints",
            &s.url,
            "--insecure-plaintext",
            "--kubeconfig",
            kubeconfig,
            "--hot-standby",
            "--namespace-selector",
            "team=a",
            "--advertise=$(POD_IP):7450",
        ],
    )
    .await;
    assert_ok(&coordinator);
    let worker = check(
        "flotilla",
        &[
            "worker",
            "--etcd-endpoints",
            &s.url,
            "--insecure-plaintext",
            "--kubeconfig",
            kubeconfig,
            "--controllers=*,-namespace",
            "--concurrent-gc-syncs=40",
        ],
    )
    .await;
    assert_ok(&worker);
    let custom = check(
        "greeting-controller",
        &["--etcd-endpoints", &s.url, "--insecure-plaintext"],
    )
    .await;
    assert_ok(&custom);
}

#[tokio::test]
async fn bad_flags_are_refused_naming_the_problem() {
    let s = silent();
    let coordinator = [
        "coordinator",
        "--etcd-endpoints",
        &s.url,
        "--insecure-plaintext",
    ];
    let refused = check(
        "flotilla",
        &[&coordinator[..], &["--leader-elect-renew-deadline", "10s"]].concat(),
    )
    .await;
    assert_refused(&refused, "--leader-elect-lease-duration");
    let refused = check(
        "flotilla",
        &[&coordinator[..], &["--namespaces", "Not_A_Namespace"]].concat(),
    )
    .await;
    assert_refused(&refused, "--namespaces");
    let refused = check(
        "flotilla",
        &[
            &coordinator[..],
            &["--kubeconfig", "/nonexistent/kubeconfig"],
        ]
        .concat(),
    )
    .await;
    assert_refused(&refused, "/nonexistent/kubeconfig");

    let worker = ["worker", "--etcd-endpoints", &s.url, "--insecure-plaintext"];
    let refused = check(
        "flotilla",
        &[&worker[..], &["--controllers", "bogus"]].concat(),
    )
    .await;
    assert_refused(&refused, "bogus");
    let refused = check(
        "flotilla",
        &[
            &worker[..],
            &["--lease-ttl", "3s", "--lease-renew-interval", "2s"],
        ]
        .concat(),
    )
    .await;
    assert_refused(&refused, "renew interval");
    let refused = check(
        "flotilla",
        &[&worker[..], &["--kube-api-qps", "fast"]].concat(),
    )
    .await;
    assert_refused(&refused, "--kube-api-qps");
    let refused = check("flotilla", &["worker", "--fleet", "f"]).await;
    assert_refused(&refused, "--etcd-endpoints");
    let refused = check(
        "greeting-controller",
        &[
            "--etcd-endpoints",
            &s.url,
            "--insecure-plaintext",
            "--worker-id",
            "UPPER",
        ],
    )
    .await;
    assert_refused(&refused, "--worker-id");
}
