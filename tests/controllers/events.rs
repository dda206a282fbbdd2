//! The Events a fleet's `deployment` and `replicaset` controllers write are the ones
//! kube-controller-manager writes for the same objects (`kube-fixtures/kcm/10-events-core-v1.json`):
//! core/v1 Events named `<object>.<hex nanoseconds>`, one per distinct message, reported by
//! `deployment-controller` / `replicaset-controller` with an empty reporting instance, count 1 — and
//! a repeated message patches its Event's count instead of writing another. And what the fleet writes
//! names it as field manager (`flotilla`, from its User-Agent), as kube-controller-manager's writes
//! name `kube-controller-manager`.

use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::cluster::TestCluster;
use crate::support::fleet::Fleet;
use crate::support::namespace::unique_namespace;
use crate::support::objects::deployment;
use crate::support::wait::wait_for;

const CONVERGE: Duration = Duration::from_secs(60);

/// The Event about `object` with `reason` and `message`, once there is exactly one.
async fn the_event(events: &Api<Event>, object: &str, reason: &str, message: &str) -> Event {
    wait_for(
        CONVERGE,
        &format!("one {reason} Event on {object}: {message:?}"),
        || async {
            let list = events.list(&ListParams::default()).await.ok()?;
            let mut matching = list.items.into_iter().filter(|e| {
                e.involved_object.name.as_deref() == Some(object)
                    && e.reason.as_deref() == Some(reason)
                    && e.message.as_deref() == Some(message)
            });
            let one = matching.next()?;
            matching.next().is_none().then_some(one)
        },
    )
    .await
}

/// Checks `event` has kube-controller-manager's shape for a first occurrence reported by `source`
/// about an object of `kind`.
fn assert_kcm_shape(event: &Event, kind: &str, source: &str) {
    let object = event.involved_object.name.clone().unwrap();
    let name = event.name_any();
    let suffix = name
        .strip_prefix(&format!("{object}."))
        .unwrap_or_else(|| panic!("{name} is named after {object}"));
    assert!(
        suffix.len() >= 15
            && suffix
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()),
        "{name}: the suffix is the time in lowercase hex nanoseconds"
    );
    let involved = &event.involved_object;
    assert_eq!(involved.kind.as_deref(), Some(kind));
    assert_eq!(involved.api_version.as_deref(), Some("apps/v1"));
    assert!(involved.uid.is_some() && involved.resource_version.is_some());
    assert_eq!(involved.namespace, event.metadata.namespace);
    let component = event.source.as_ref().and_then(|s| s.component.as_deref());
    assert_eq!(component, Some(source), "{name}: source.component");
    assert_eq!(event.reporting_component.as_deref(), Some(source));
    assert_eq!(event.reporting_instance.as_deref(), Some(""));
    assert_eq!(event.type_.as_deref(), Some("Normal"));
    assert_eq!(event.count, Some(1));
    assert!(event.first_timestamp.is_some());
    assert_eq!(event.first_timestamp, event.last_timestamp);
    assert!(
        event.event_time.is_none() && event.series.is_none() && event.action.is_none(),
        "{name}: a core/v1 Event as client-go's recorder writes it, no events.k8s.io fields"
    );
}

#[tokio::test]
async fn a_rollout_writes_kcms_events_and_a_repeated_message_raises_its_count_as_flotilla() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let (_fleet, _procs) = Fleet::of_controllers(&cluster, "deployment,replicaset", 1).await;
    let ns = unique_namespace(&client, "events").await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);

    deployments
        .create(&PostParams::default(), &deployment("web", 2))
        .await
        .unwrap();
    let (rs, pod_names) = wait_for(CONVERGE, "web's ReplicaSet and its 2 pods", || async {
        let rs = sets.list(&ListParams::default()).await.ok()?.items.pop()?;
        let pods = pods.list(&ListParams::default()).await.ok()?.items;
        (pods.len() == 2).then(|| {
            (
                rs,
                pods.iter().map(ResourceExt::name_any).collect::<Vec<_>>(),
            )
        })
    })
    .await;
    let rs_name = rs.name_any();
    let managers: Vec<_> = rs
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(
        !managers.is_empty() && managers.iter().all(|m| m == "flotilla"),
        "the ReplicaSet (created, status written by the fleet) is managed by flotilla only: {managers:?}"
    );

    // What kube-controller-manager wrote for the same Deployment: one ScalingReplicaSet Event on it,
    // one SuccessfulCreate Event per pod on its ReplicaSet.
    let scaled = the_event(
        &events,
        "web",
        "ScalingReplicaSet",
        &format!("Scaled up replica set {rs_name} from 0 to 2"),
    )
    .await;
    assert_kcm_shape(&scaled, "Deployment", "deployment-controller");
    for pod in &pod_names {
        let created = the_event(
            &events,
            &rs_name,
            "SuccessfulCreate",
            &format!("Created pod: {pod}"),
        )
        .await;
        assert_kcm_shape(&created, "ReplicaSet", "replicaset-controller");
        assert_eq!(created.involved_object.uid, rs.metadata.uid);
    }

    // 2 → 3 → 2 → 3: the second "from 2 to 3" is a repeat, which patches the first Event's count.
    let scale = |replicas: i32| {
        let deployments = deployments.clone();
        async move {
            let body = json!({"spec": {"replicas": replicas}});
            deployments
                .patch("web", &PatchParams::default(), &Patch::Merge(&body))
                .await
                .unwrap();
        }
    };
    let up = format!("Scaled up replica set {rs_name} from 2 to 3");
    scale(3).await;
    let first_up = the_event(&events, "web", "ScalingReplicaSet", &up).await;
    scale(2).await;
    let down = format!("Scaled down replica set {rs_name} from 3 to 2");
    the_event(&events, "web", "ScalingReplicaSet", &down).await;
    scale(3).await;
    let repeated = wait_for(
        CONVERGE,
        "the repeated scale-up Event's count to reach 2",
        || {
            let events = events.clone();
            let up = up.clone();
            async move {
                let e = the_event(&events, "web", "ScalingReplicaSet", &up).await;
                (e.count == Some(2)).then_some(e)
            }
        },
    )
    .await;
    assert_eq!(
        repeated.name_any(),
        first_up.name_any(),
        "the same Event, patched"
    );
    assert_eq!(repeated.first_timestamp, first_up.first_timestamp);
    assert!(repeated.last_timestamp >= first_up.last_timestamp);
}
