//! The `service-cidr` controller: a new ServiceCIDR gets the finalizer
//! `networking.k8s.io/service-cidr-finalizer` and `Ready` `True`; deleted with no IPAddress in it,
//! it is gone after upstream's 10 s grace period; deleted while an IPAddress kube-apiserver
//! allocated lies in it and in no other ServiceCIDR, it stays with `Ready` `False` reason
//! `Terminating` until that IPAddress is deleted. On devcluster the bootstrap `kubernetes`
//! ServiceCIDR gets the finalizer too.
//!
//! Skipped on a cluster that does not serve `networking.k8s.io/v1` ServiceCIDRs (before v1.33).

use std::time::Duration;

use k8s_openapi::api::networking::v1::{IPAddress, ServiceCIDR};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

use crate::support::cluster::TestCluster;
use crate::support::fleet::Fleet;
use crate::support::namespace::random_suffix;
use crate::support::wait::wait_for;

const FINALIZER: &str = "networking.k8s.io/service-cidr-finalizer";
/// Upstream's 10 s deletion grace period, plus the fleet's delays.
const CONVERGE: Duration = Duration::from_secs(25);

/// The `Ready` condition's (status, reason, message), if any.
fn ready(cidr: &ServiceCIDR) -> Option<(String, String, String)> {
    let conditions = cidr.status.as_ref()?.conditions.as_ref()?;
    let c = conditions.iter().find(|c| c.type_ == "Ready")?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

fn has_finalizer(cidr: &ServiceCIDR) -> bool {
    cidr.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|x| x == FINALIZER))
}

async fn wait_ready(cidrs: &Api<ServiceCIDR>, name: &str) {
    wait_for(CONVERGE, &format!("{name} finalized and Ready"), || async {
        let cidr = cidrs.get_opt(name).await.ok()??;
        let ready = ready(&cidr)?;
        (has_finalizer(&cidr) && ready.0 == "True" && ready.2 == "Kubernetes Service CIDR is ready")
            .then_some(())
    })
    .await;
}

async fn wait_gone(cidrs: &Api<ServiceCIDR>, name: &str) {
    wait_for(CONVERGE, &format!("{name} gone"), || async {
        matches!(cidrs.get_opt(name).await, Ok(None)).then_some(())
    })
    .await;
}

fn service_cidr(name: &str, cidr: &str) -> ServiceCIDR {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"cidrs": [cidr]}})).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_service_cidr_is_finalized_ready_and_kept_while_an_ip_address_needs_it() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let cidrs: Api<ServiceCIDR> = Api::all(client.clone());
    if cidrs.list(&Default::default()).await.is_err() {
        eprintln!("skipped: the cluster does not serve networking.k8s.io/v1 ServiceCIDRs");
        return;
    }
    let (_fleet, _procs) = Fleet::of_controllers(&cluster, "service-cidr", 1).await;
    let suffix = random_suffix(5);

    // Nothing in it: finalized, Ready, then gone once the grace period has passed.
    let empty = format!("empty-{suffix}");
    cidrs
        .create(
            &PostParams::default(),
            &service_cidr(&empty, "10.91.0.0/24"),
        )
        .await
        .unwrap();
    wait_ready(&cidrs, &empty).await;
    cidrs
        .delete(&empty, &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&cidrs, &empty).await;

    // An allocated IPAddress only it holds: kept, Terminating, until the address goes.
    let held = format!("held-{suffix}");
    cidrs
        .create(&PostParams::default(), &service_cidr(&held, "10.92.0.0/24"))
        .await
        .unwrap();
    wait_ready(&cidrs, &held).await;
    let ips: Api<IPAddress> = Api::all(client.clone());
    let ip: IPAddress = serde_json::from_value(json!({
        "metadata": {"name": "10.92.0.7", "labels": {
            "ipaddress.kubernetes.io/managed-by": "ipallocator.k8s.io",
            "ipaddress.kubernetes.io/ip-family": "IPv4",
        }},
        "spec": {"parentRef": {"group": "", "resource": "services", "namespace": "default", "name": format!("svc-{suffix}")}},
    }))
    .unwrap();
    ips.create(&PostParams::default(), &ip).await.unwrap();
    cidrs.delete(&held, &DeleteParams::default()).await.unwrap();
    let terminating = wait_for(CONVERGE, "Ready False Terminating", || async {
        let cidr = cidrs.get_opt(&held).await.ok()??;
        ready(&cidr).filter(|r| r.0 == "False")
    })
    .await;
    assert_eq!(terminating.1, "Terminating");
    assert_eq!(
        terminating.2,
        "There are still IPAddresses referencing the ServiceCIDR, please remove them or create a new ServiceCIDR"
    );
    ips.delete("10.92.0.7", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&cidrs, &held).await;

    if cluster.is_devcluster() {
        let default = cidrs.get("kubernetes").await.unwrap();
        assert_eq!(
            default.spec.and_then(|s| s.cidrs),
            Some(vec!["10.0.0.0/24".to_owned()])
        );
        wait_ready(&cidrs, "kubernetes").await;
    }
}
