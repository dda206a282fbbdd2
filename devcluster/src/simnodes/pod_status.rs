//! The pod statuses a kubelet would report: Running and Ready, crash-looping, Failed, or Succeeded.

use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{Container, Pod};
use serde_json::{Value, json};

/// The image suffix that makes a simulated container fail.
const FAIL_SUFFIX: &str = ":fail";

/// How a simulated pod ends up once it has "started".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Running and Ready; a pod of a Job (restartPolicy Never/OnFailure) later succeeds.
    Run,
    /// One of its images ends in `:fail` and the kubelet restarts it (restartPolicy Always or
    /// OnFailure): Running but not Ready, the container waiting in `CrashLoopBackOff`.
    CrashLoop,
    /// One of its images ends in `:fail` and restartPolicy is Never: Failed.
    Fail,
}

/// What starting `pod` leads to.
pub(crate) fn outcome(pod: &Pod) -> Outcome {
    if !containers(pod).any(image_fails) {
        Outcome::Run
    } else if restart_policy(pod) == Some("Never") {
        Outcome::Fail
    } else {
        Outcome::CrashLoop
    }
}

fn restart_policy(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref())
}

/// Whether the pod runs to completion (restartPolicy Never or OnFailure, and no failing image) rather
/// than forever.
pub(crate) fn runs_to_completion(pod: &Pod) -> bool {
    matches!(restart_policy(pod), Some("Never" | "OnFailure")) && outcome(pod) == Outcome::Run
}

fn image_fails(container: &Container) -> bool {
    container
        .image
        .as_deref()
        .is_some_and(|image| image.ends_with(FAIL_SUFFIX))
}

fn containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    pod.spec.iter().flat_map(|spec| spec.containers.iter())
}

fn init_containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    pod.spec
        .iter()
        .flat_map(|spec| spec.init_containers.iter().flatten())
}

fn condition(kind: &str, ok: bool, reason: Option<&str>, now: &Value) -> Value {
    let mut c = json!({
        "type": kind,
        "status": if ok { "True" } else { "False" },
        "lastProbeTime": null,
        "lastTransitionTime": now,
    });
    if let Some(reason) = reason {
        c["reason"] = json!(reason);
    }
    c
}

fn container_id(pod: &Pod, container: &Container) -> String {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    format!("containerd://sim-{uid}-{}", container.name)
}

fn terminated(
    pod: &Pod,
    container: &Container,
    exit_code: i32,
    reason: &str,
    started: &Value,
    now: &Value,
) -> Value {
    let id = container_id(pod, container);
    json!({
        "name": container.name,
        "image": container.image,
        "imageID": format!("{}@sha256:simulated", container.image.as_deref().unwrap_or_default()),
        "containerID": id,
        "ready": false,
        "started": false,
        "restartCount": 0,
        "state": {"terminated": {"exitCode": exit_code, "reason": reason, "startedAt": started,
                                 "finishedAt": now, "containerID": id}},
    })
}

fn addresses(pod_ip: &str, host_ip: Ipv4Addr) -> Value {
    json!({
        "hostIP": host_ip.to_string(),
        "hostIPs": [{"ip": host_ip.to_string()}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
    })
}

fn merged(mut status: Value, extra: Value) -> Value {
    if let (Some(status), Value::Object(extra)) = (status.as_object_mut(), extra) {
        status.extend(extra);
    }
    json!({ "status": status })
}

/// A Running pod's status: every container running and ready, or, with `not_ready` (the condition
/// reason), those whose image ends in `:fail` waiting in `CrashLoopBackOff` after one failed run.
fn running(pod: &Pod, now: &Value, not_ready: Option<&str>) -> Value {
    let statuses: Vec<Value> = containers(pod)
        .map(|c| {
            let failing = not_ready.is_some() && image_fails(c);
            let mut status = json!({
                "name": c.name,
                "image": c.image,
                "imageID": format!("{}@sha256:simulated", c.image.as_deref().unwrap_or_default()),
                "containerID": container_id(pod, c),
                "ready": !failing,
                "started": !failing,
                "restartCount": u8::from(failing),
                "state": {"running": {"startedAt": now}},
            });
            if failing {
                status["state"] = json!({"waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": format!("back-off 10s restarting failed container={} pod={}",
                        c.name, pod.metadata.name.as_deref().unwrap_or_default()),
                }});
                status["lastState"] = terminated(pod, c, 1, "Error", now, now)["state"].clone();
            }
            status
        })
        .collect();
    json!({
        "phase": "Running",
        "conditions": [
            condition("PodReadyToStartContainers", true, None, now),
            condition("Initialized", true, None, now),
            condition("Ready", not_ready.is_none(), not_ready, now),
            condition("ContainersReady", not_ready.is_none(), not_ready, now),
            condition("PodScheduled", true, None, now),
        ],
        "containerStatuses": statuses,
        "startTime": now,
    })
}

/// The merge patch reporting `pod` started: Running and Ready or, when an image ends in `:fail`,
/// crash-looping (Running, not Ready) or Failed by its restart policy.
pub(crate) fn started(pod: &Pod, pod_ip: Ipv4Addr, host_ip: Ipv4Addr, now: &Value) -> Value {
    let init_statuses: Vec<Value> = init_containers(pod)
        .map(|c| terminated(pod, c, 0, "Completed", now, now))
        .collect();
    let status = match outcome(pod) {
        Outcome::Run => running(pod, now, None),
        Outcome::CrashLoop => running(pod, now, Some("ContainersNotReady")),
        Outcome::Fail => {
            let statuses: Vec<Value> = containers(pod)
                .map(|c| {
                    if image_fails(c) {
                        terminated(pod, c, 1, "Error", now, now)
                    } else {
                        terminated(pod, c, 0, "Completed", now, now)
                    }
                })
                .collect();
            json!({
                "phase": "Failed",
                "conditions": [
                    condition("PodReadyToStartContainers", true, None, now),
                    condition("Initialized", true, None, now),
                    condition("Ready", false, Some("PodFailed"), now),
                    condition("ContainersReady", false, Some("PodFailed"), now),
                    condition("PodScheduled", true, None, now),
                ],
                "containerStatuses": statuses,
                "startTime": now,
            })
        }
    };
    let mut patch = merged(status, addresses(&pod_ip.to_string(), host_ip));
    if !init_statuses.is_empty() {
        patch["status"]["initContainerStatuses"] = json!(init_statuses);
    }
    patch
}

/// The merge patch reporting a running `pod` Succeeded: every container exited 0.
pub(crate) fn succeeded(pod: &Pod, now: &Value) -> Value {
    let started = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .and_then(|t| serde_json::to_value(t).ok())
        .unwrap_or_else(|| now.clone());
    let statuses: Vec<Value> = containers(pod)
        .map(|c| terminated(pod, c, 0, "Completed", &started, now))
        .collect();
    json!({"status": {
        "phase": "Succeeded",
        "conditions": [
            condition("PodReadyToStartContainers", false, None, now),
            condition("Initialized", true, Some("PodCompleted"), now),
            condition("Ready", false, Some("PodCompleted"), now),
            condition("ContainersReady", false, Some("PodCompleted"), now),
            condition("PodScheduled", true, None, now),
        ],
        "containerStatuses": statuses,
    }})
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn pod(images: &[&str], restart: &str) -> Pod {
        let containers: Vec<Value> = images
            .iter()
            .enumerate()
            .map(|(i, image)| json!({"name": format!("c{i}"), "image": image}))
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": "p", "uid": "u1"},
            "spec": {"containers": containers, "restartPolicy": restart},
        }))
        .unwrap()
    }

    const NOW: &str = "2026-01-01T00:00:00Z";

    #[test]
    fn a_normal_pod_is_reported_running_and_ready_with_addresses() {
        let p = pod(&["nginx", "busybox:1"], "Always");
        assert_eq!(outcome(&p), Outcome::Run);
        assert!(!runs_to_completion(&p));
        let patch = started(
            &p,
            Ipv4Addr::new(10, 128, 0, 5),
            Ipv4Addr::new(172, 16, 0, 2),
            &json!(NOW),
        );
        let status = &patch["status"];
        assert_eq!(status["phase"], "Running");
        assert_eq!(status["podIP"], "10.128.0.5");
        assert_eq!(status["hostIP"], "172.16.0.2");
        assert_eq!(status["startTime"], NOW);
        let ready = status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap();
        assert_eq!(ready["status"], "True");
        assert_eq!(status["containerStatuses"].as_array().unwrap().len(), 2);
        assert_eq!(status["containerStatuses"][1]["ready"], true);
    }

    #[test]
    fn an_image_ending_in_fail_crash_loops_where_the_kubelet_restarts_it() {
        for restart in ["Always", "OnFailure"] {
            let p = pod(&["nginx", "app:fail"], restart);
            assert_eq!(outcome(&p), Outcome::CrashLoop);
            assert!(
                !runs_to_completion(&p),
                "a crash-looping pod never completes"
            );
            let patch = started(&p, Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST, &json!(NOW));
            let status = &patch["status"];
            assert_eq!(status["phase"], "Running");
            let ready = status["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == "Ready")
                .unwrap();
            assert_eq!(ready["status"], "False");
            assert_eq!(status["containerStatuses"][0]["ready"], true);
            let failing = &status["containerStatuses"][1];
            assert_eq!(failing["state"]["waiting"]["reason"], "CrashLoopBackOff");
            assert_eq!(failing["lastState"]["terminated"]["exitCode"], 1);
            assert_eq!(failing["restartCount"], 1);
        }
    }

    #[test]
    fn an_image_ending_in_fail_makes_a_pod_that_never_restarts_failed() {
        let p = pod(&["nginx", "app:fail"], "Never");
        assert_eq!(outcome(&p), Outcome::Fail);
        let patch = started(&p, Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST, &json!(NOW));
        assert_eq!(patch["status"]["phase"], "Failed");
        assert_eq!(
            patch["status"]["containerStatuses"][1]["state"]["terminated"]["exitCode"],
            1
        );
    }

    #[test]
    fn job_pods_run_to_completion_and_succeed() {
        let p = pod(&["busybox"], "Never");
        assert!(runs_to_completion(&p));
        assert!(runs_to_completion(&pod(&["busybox"], "OnFailure")));
        let patch = succeeded(&p, &json!(NOW));
        assert_eq!(patch["status"]["phase"], "Succeeded");
        assert_eq!(
            patch["status"]["containerStatuses"][0]["state"]["terminated"]["reason"],
            "Completed"
        );
    }
}
