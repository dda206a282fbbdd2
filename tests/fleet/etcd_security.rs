//! A fleet on an etcd as production runs it: client TLS with client certificates required, auth on,
//! and a `flotilla` user whose role may read and write only the fleet's `--etcd-prefix`. A coordinator
//! and a worker reconcile through it; a wrong password and a client without a certificate are refused
//! at start-up with errors naming the flags; and two fleets of one name under different prefixes in
//! one etcd never see each other. The first test also runs the fleet at debug level on an RBAC cluster
//! and checks that no log holds the API token, the etcd password or the client key.
//!
//! The Kubernetes side is the test's devcluster, on its own plaintext etcd.

use std::path::PathBuf;
use std::time::Duration;

use etcd_client::{GetOptions, Permission};
use flotilla_common::{EtcdClientConfig, EtcdFlags, FleetKeys};
use flotilla_devcluster::{EtcdServer, EtcdServerTls};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::Api;

use crate::support::cluster::TestCluster;
use crate::support::fleet::{Fleet, Proc};
use crate::support::namespace::unique_namespace;
use crate::support::pki::{CertFiles, Pki};
use crate::support::wait::wait_for;

/// The prefix the secured fleet's keys live under, and the only range its etcd user may touch.
const PREFIX: &str = "/tenants/a";

/// The password of the `flotilla` etcd user.
const PASSWORD: &str = "flotilla-etcd-password";

/// A TLS etcd with auth enabled and its test PKI.
struct SecureEtcd {
    etcd: EtcdServer,
    pki: Pki,
    /// A client certificate whose CN names no etcd user, so it authenticates nobody by itself.
    client: CertFiles,
    /// A file holding [`PASSWORD`].
    password_file: PathBuf,
}

impl SecureEtcd {
    /// Starts etcd with client TLS (`--client-cert-auth`), then, through the auth API, adds `root`
    /// and a `flotilla` user whose role grants readwrite on `PREFIX/` only, and enables auth.
    async fn start() -> Self {
        let pki = Pki::new();
        let server = pki.server("etcd-server");
        let client = pki.client("etcd-client", "flotilla-test-client");
        let etcd = EtcdServer::start_tls(EtcdServerTls {
            cert: server.cert,
            key: server.key,
            trusted_ca: pki.ca_file().to_path_buf(),
        })
        .await
        .unwrap_or_else(|err| panic!("cannot start etcd with client TLS: {err}"));
        let password_file = pki.dir().join("etcd-password");
        std::fs::write(&password_file, format!("{PASSWORD}\n")).unwrap();
        let secure = SecureEtcd {
            etcd,
            pki,
            client,
            password_file,
        };
        // Before auth is on, a client certificate is all etcd asks for.
        let config = secure.flags(None, PREFIX).client_config().unwrap();
        let mut admin =
            etcd_client::Client::connect(&config.endpoints, Some(config.connect_options()))
                .await
                .unwrap();
        admin.user_add("root", "root-password", None).await.unwrap();
        admin.user_grant_role("root", "root").await.unwrap();
        admin.role_add("flotilla").await.unwrap();
        admin
            .role_grant_permission(
                "flotilla",
                Permission::read_write(format!("{PREFIX}/")).with_prefix(),
            )
            .await
            .unwrap();
        admin.user_add("flotilla", PASSWORD, None).await.unwrap();
        admin.user_grant_role("flotilla", "flotilla").await.unwrap();
        admin.auth_enable().await.unwrap();
        secure
    }

    /// The `--etcd-*` flags of a client with the test certificate, as `user` (none: anonymous),
    /// under `prefix`.
    fn flags(&self, user: Option<(&str, &std::path::Path)>, prefix: &str) -> EtcdFlags {
        let mut flags = EtcdFlags::plaintext(self.etcd.endpoints());
        flags.cafile = Some(self.pki.ca_file().to_path_buf());
        flags.certfile = Some(self.client.cert.clone());
        flags.keyfile = Some(self.client.key.clone());
        if let Some((name, password_file)) = user {
            flags.username = Some(name.to_owned());
            flags.password_file = Some(password_file.to_path_buf());
        }
        prefix.clone_into(&mut flags.prefix);
        flags
    }

    /// The flags as the fleet's processes get them: the `flotilla` user under [`PREFIX`].
    fn args(&self) -> Vec<String> {
        let mut args = vec![
            "--etcd-cafile".to_owned(),
            self.pki.ca_file().display().to_string(),
            "--etcd-certfile".to_owned(),
            self.client.cert.display().to_string(),
            "--etcd-keyfile".to_owned(),
            self.client.key.display().to_string(),
        ];
        args.extend(self.user_args(&self.password_file));
        args
    }

    fn user_args(&self, password_file: &std::path::Path) -> Vec<String> {
        vec![
            "--etcd-username".to_owned(),
            "flotilla".to_owned(),
            "--etcd-password-file".to_owned(),
            password_file.display().to_string(),
            "--etcd-prefix".to_owned(),
            PREFIX.to_owned(),
        ]
    }

    /// A client as the `flotilla` user, checked against fleet `fleet`'s range.
    async fn flotilla_client(&self, fleet: &str) -> (etcd_client::Client, EtcdClientConfig) {
        let config = self
            .flags(Some(("flotilla", &self.password_file)), PREFIX)
            .client_config()
            .unwrap();
        (config.connect(fleet).await.unwrap(), config)
    }
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// The owner of every shard of `keys`' fleet once all `shards` are owned by one worker.
async fn sole_owner(
    etcd: &mut etcd_client::Client,
    keys: &FleetKeys,
    shards: usize,
) -> Option<String> {
    let resp = etcd
        .get(keys.shards_prefix(), Some(GetOptions::new().with_prefix()))
        .await
        .ok()?;
    let owners: std::collections::BTreeSet<_> = resp
        .kvs()
        .iter()
        .map(|kv| String::from_utf8_lossy(kv.value()).into_owned())
        .collect();
    (resp.kvs().len() == shards && owners.len() == 1).then(|| owners.into_iter().next())?
}

/// Waits until `proc` exits on its own (bounded) and returns its log.
async fn exits(proc: &mut Proc, why: &str) -> String {
    wait_for(
        Duration::from_secs(30),
        &format!("{} to exit: {why}", proc.name),
        || {
            let running = proc.is_running();
            async move { (!running).then_some(()) }
        },
    )
    .await;
    proc.log_text()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_reconciles_through_an_etcd_with_client_tls_and_a_user_limited_to_its_prefix() {
    // RBAC, so the fleet's kubeconfig carries a bearer token: with the etcd password and the client
    // key, one of the secrets the debug logs must never show.
    let cluster = TestCluster::builder().with_rbac().start().await;
    let client = cluster.client();
    let secure = SecureEtcd::start().await;
    let mut fleet = Fleet::new(secure.etcd.endpoints(), cluster.kubeconfig_path());
    fleet.rust_log = Some("debug".into());
    let args = secure.args();
    let mut coordinator_args = strs(&args);
    coordinator_args.extend(["--shards", "16"]);
    let c0 = fleet.coordinator("c0", &coordinator_args);
    let mut worker_args = vec!["worker", "--controllers", "serviceaccount"];
    worker_args.extend(strs(&args));
    let w0 = fleet.worker("flotilla", "w0", &worker_args);

    let (etcd, config) = secure.flotilla_client(&fleet.name).await;
    let keys = config.fleet_keys(&fleet.name);
    let owner = wait_for(
        Duration::from_secs(60),
        "w0 to own every shard of the fleet under /tenants/a",
        || {
            let (mut etcd, keys) = (etcd.clone(), keys.clone());
            async move { sole_owner(&mut etcd, &keys, 16).await }
        },
    )
    .await;
    assert_eq!(owner, "w0");

    let ns = unique_namespace(&client, "etcdtls").await;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    wait_for(
        Duration::from_secs(30),
        "the fleet to create the default ServiceAccount of a new namespace",
        || async { accounts.get_opt("default").await.ok().flatten() },
    )
    .await;

    // Everything the fleet wrote is under its prefix: the user could not have written elsewhere,
    // and root sees nothing under the default prefix.
    let root_password = secure.pki.dir().join("root-password");
    std::fs::write(&root_password, "root-password").unwrap();
    let root = secure
        .flags(Some(("root", &root_password)), "/")
        .client_config();
    assert!(root.is_err(), "`/` alone is refused as a prefix");
    let mut root = secure
        .flags(Some(("root", &root_password)), "/flotilla")
        .client_config()
        .unwrap()
        .connect(&fleet.name)
        .await
        .unwrap();
    let everything = root
        .get("", Some(GetOptions::new().with_all_keys().with_keys_only()))
        .await
        .unwrap();
    let outside: Vec<_> = everything
        .kvs()
        .iter()
        .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
        .filter(|key| !key.starts_with(&format!("{PREFIX}/{}/", fleet.name)))
        .collect();
    assert!(outside.is_empty(), "keys outside the prefix: {outside:?}");
    assert!(
        everything
            .kvs()
            .iter()
            .any(|kv| kv.key() == keys.worker("w0").as_bytes()),
        "w0's registration is under the prefix"
    );

    // Secrets are never logged, not even at debug level: the etcd password, the client key, the
    // API token.
    let mut secrets = vec![("the etcd password", PASSWORD.to_owned())];
    let key = std::fs::read_to_string(&secure.client.key).unwrap();
    let key_body = key.lines().find(|l| !l.starts_with("-----")).unwrap();
    secrets.push(("the etcd client key", key_body.to_owned()));
    let kubeconfig = kube::config::Kubeconfig::read_from(cluster.kubeconfig_path()).unwrap();
    let kubeconfig = serde_json::to_value(&kubeconfig).unwrap();
    for user in kubeconfig["users"].as_array().into_iter().flatten() {
        if let Some(token) = user["user"]["token"].as_str() {
            secrets.push(("the API token", token.to_owned()));
        }
    }
    assert!(
        !cluster.is_devcluster() || secrets.len() == 3,
        "an RBAC devcluster's kubeconfig carries a token"
    );
    for proc in [&c0, &w0] {
        let log = proc.log_text();
        assert!(
            log.lines().count() > 20 && log.contains("DEBUG"),
            "{} logged at debug level",
            proc.name
        );
        for (what, secret) in &secrets {
            assert!(
                !log.contains(secret.as_str()),
                "{} logged {what}",
                proc.name
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_password_or_a_client_without_a_certificate_is_refused_naming_the_flags() {
    let cluster = TestCluster::start().await;
    let secure = SecureEtcd::start().await;
    let fleet = Fleet::new(secure.etcd.endpoints(), cluster.kubeconfig_path());

    let wrong = secure.pki.dir().join("wrong-password");
    std::fs::write(&wrong, "not-the-password\n").unwrap();
    let mut args = vec![
        "--etcd-cafile".to_owned(),
        secure.pki.ca_file().display().to_string(),
        "--etcd-certfile".to_owned(),
        secure.client.cert.display().to_string(),
        "--etcd-keyfile".to_owned(),
        secure.client.key.display().to_string(),
    ];
    args.extend(secure.user_args(&wrong));
    let mut c0 = fleet.coordinator("c0", &strs(&args));
    let log = exits(&mut c0, "etcd refuses its password").await;
    assert!(
        log.contains("refused user \"flotilla\"") && log.contains("--etcd-password-file"),
        "the coordinator must say the password was refused: {log}"
    );

    let mut args = vec![
        "--etcd-cafile".to_owned(),
        secure.pki.ca_file().display().to_string(),
    ];
    args.extend(secure.user_args(&secure.password_file));
    let mut worker_args = vec!["worker", "--controllers", "serviceaccount"];
    worker_args.extend(strs(&args));
    let mut w0 = fleet.worker("flotilla", "w0", &worker_args);
    let log = exits(&mut w0, "etcd refuses a client without a certificate").await;
    assert!(
        log.contains("cannot reach etcd") && log.contains("--etcd-certfile"),
        "the worker must say it was refused and which flags to check: {log}"
    );

    // The right password under a prefix the role does not cover: denied, naming the range.
    let outside = secure
        .flags(Some(("flotilla", &secure.password_file)), "/flotilla")
        .client_config()
        .unwrap()
        .connect("prod")
        .await
        .err()
        .expect("the role covers only /tenants/a/");
    assert!(
        outside
            .to_string()
            .contains("denied user \"flotilla\" access to /flotilla/prod/"),
        "{outside}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn two_fleets_of_one_name_under_different_prefixes_in_one_etcd_do_not_see_each_other() {
    let cluster = TestCluster::start().await;
    let a = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let mut b = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    b.name.clone_from(&a.name);
    let mut procs = Vec::new();
    for (fleet, prefix, coordinator, worker) in [(&a, "/a", "ca", "wa"), (&b, "/b", "cb", "wb")] {
        procs.push(fleet.coordinator(coordinator, &["--etcd-prefix", prefix, "--shards", "16"]));
        procs.push(fleet.worker(
            "flotilla",
            worker,
            &[
                "worker",
                "--controllers",
                "serviceaccount",
                "--etcd-prefix",
                prefix,
            ],
        ));
    }

    let mut etcd = flotilla_common::connect_etcd(&cluster.etcd_endpoints())
        .await
        .unwrap();
    for (prefix, coordinator, worker) in [("/a", "ca", "wa"), ("/b", "cb", "wb")] {
        let keys = FleetKeys::with_prefix(prefix, &a.name);
        // Each coordinator leads its own fleet and gives every shard to its own worker: neither
        // saw the other's leader key nor the other's worker.
        let owner = wait_for(
            Duration::from_secs(60),
            &format!("{worker} to own every shard under {prefix}"),
            || {
                let (mut etcd, keys) = (etcd.clone(), keys.clone());
                async move { sole_owner(&mut etcd, &keys, 16).await }
            },
        )
        .await;
        assert_eq!(owner, worker);
        let leader = flotilla_common::Election::new(etcd.clone(), keys.election())
            .leader()
            .await
            .unwrap()
            .expect("a leader under the prefix");
        assert_eq!(leader.info.id, coordinator);
        let workers = etcd
            .get(
                keys.workers_prefix(),
                Some(GetOptions::new().with_prefix().with_keys_only()),
            )
            .await
            .unwrap();
        let ids: Vec<_> = workers
            .kvs()
            .iter()
            .filter_map(|kv| keys.parse_worker(kv.key()).map(str::to_owned))
            .collect();
        assert_eq!(ids, [worker], "workers registered under {prefix}");
    }
    let default = etcd
        .get(
            FleetKeys::new(&a.name).root(),
            Some(GetOptions::new().with_prefix().with_keys_only()),
        )
        .await
        .unwrap();
    assert_eq!(default.count(), 0, "nothing under the default prefix");
}
