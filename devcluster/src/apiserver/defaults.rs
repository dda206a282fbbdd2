//! Defaulting and create-time preparation of the built-in kinds, matching kube-apiserver v1.36's recorded objects.

use serde_json::{Map, Value, json};

fn obj(v: &mut Value) -> Option<&mut Map<String, Value>> {
    v.as_object_mut()
}

/// Sets `key` to `value` unless present.
pub(super) fn dflt(m: &mut Map<String, Value>, key: &str, value: Value) {
    if !m.contains_key(key) || m.get(key) == Some(&Value::Null) {
        m.insert(key.to_string(), value);
    }
}

/// The child object at `key`, created empty when missing (or not an object).
fn child<'a>(m: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let entry = m.entry(key.to_string()).or_insert_with(|| json!({}));
    if !entry.is_object() {
        *entry = json!({});
    }
    entry.as_object_mut().expect("just made an object")
}

fn child_if<'a>(m: &'a mut Map<String, Value>, key: &str) -> Option<&'a mut Map<String, Value>> {
    m.get_mut(key).and_then(Value::as_object_mut)
}

/// A nested ObjectMeta (pod template, job template, claim template): drops `creationTimestamp: null`,
/// which Go clients such as kubectl 1.32 write for a zero time and kube-apiserver v1.36 does not keep,
/// so a template stores the same whether it came as JSON or as protobuf (which has no null).
fn nested_meta(parent: &mut Map<String, Value>) {
    if let Some(meta) = child_if(parent, "metadata")
        && meta.get("creationTimestamp") == Some(&Value::Null)
    {
        meta.remove("creationTimestamp");
    }
}

/// Kinds with nothing to default.
pub fn nothing(_: &mut Value) {}

fn image_pull_policy(image: &str) -> &'static str {
    // Upstream: ":latest" or no tag (digest counts as a tag) -> Always.
    let last = image.rsplit('/').next().unwrap_or(image);
    if image.contains('@') {
        return "IfNotPresent";
    }
    match last.split_once(':') {
        Some((_, tag)) if tag != "latest" => "IfNotPresent",
        _ => "Always",
    }
}

fn container(c: &mut Value) {
    let Some(c) = obj(c) else { return };
    dflt(c, "resources", json!({}));
    dflt(c, "terminationMessagePath", json!("/dev/termination-log"));
    dflt(c, "terminationMessagePolicy", json!("File"));
    let image = c
        .get("image")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    dflt(c, "imagePullPolicy", json!(image_pull_policy(&image)));
    if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            dflt(p, "protocol", json!("TCP"));
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = child_if(c, probe) {
            dflt(p, "timeoutSeconds", json!(1));
            dflt(p, "periodSeconds", json!(10));
            dflt(p, "successThreshold", json!(1));
            dflt(p, "failureThreshold", json!(3));
        }
    }
}

/// PodSpec defaults shared by Pods and pod templates.
fn pod_spec(spec: &mut Map<String, Value>) {
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
            cs.iter_mut().for_each(container);
        }
    }
    dflt(spec, "restartPolicy", json!("Always"));
    dflt(spec, "terminationGracePeriodSeconds", json!(30));
    dflt(spec, "dnsPolicy", json!("ClusterFirst"));
    dflt(spec, "securityContext", json!({}));
    dflt(spec, "schedulerName", json!("default-scheduler"));
    if let Some(vols) = spec.get_mut("volumes").and_then(Value::as_array_mut) {
        for v in vols.iter_mut().filter_map(Value::as_object_mut) {
            if let Some(claim) =
                child_if(v, "ephemeral").and_then(|e| child_if(e, "volumeClaimTemplate"))
            {
                nested_meta(claim);
            }
            for (kind, mode_key) in [
                ("configMap", "defaultMode"),
                ("secret", "defaultMode"),
                ("projected", "defaultMode"),
            ] {
                if let Some(src) = child_if(v, kind) {
                    dflt(src, mode_key, json!(420));
                }
            }
        }
    }
}

fn template(spec: &mut Map<String, Value>) {
    let t = child(spec, "template");
    nested_meta(t);
    if let Some(ps) = child_if(t, "spec") {
        pod_spec(ps);
    }
}

/// Pod defaults (every write).
pub fn pod(v: &mut Value) {
    let Some(m) = obj(v) else { return };
    let spec = child(m, "spec");
    pod_spec(spec);
    let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
    if let Some(list) = tolerations.as_array_mut() {
        for key in [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
        ] {
            let present = list
                .iter()
                .any(|t| t["key"] == key && t["effect"] == "NoExecute");
            if !present {
                list.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
            }
        }
    }
    dflt(spec, "priority", json!(0));
    dflt(spec, "enableServiceLinks", json!(true));
    dflt(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
}

fn qos_class(spec: &Value) -> &'static str {
    let mut any = false;
    let mut guaranteed = true;
    for c in spec["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(spec["initContainers"].as_array().into_iter().flatten())
    {
        let req = c["resources"]["requests"].as_object();
        let lim = c["resources"]["limits"].as_object();
        if req.is_some_and(|r| !r.is_empty()) || lim.is_some_and(|l| !l.is_empty()) {
            any = true;
        }
        for res in ["cpu", "memory"] {
            let l = c["resources"]["limits"].get(res);
            let r = c["resources"]["requests"].get(res).or(l);
            if l.is_none() || r != l {
                guaranteed = false;
            }
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

/// Pod create: status Pending with its QoS class.
pub fn pod_create(v: &mut Value) {
    let qos = qos_class(&v["spec"]);
    if let Some(m) = obj(v) {
        m.insert(
            "status".into(),
            json!({"phase": "Pending", "qosClass": qos}),
        );
    }
}

/// Namespace defaults.
pub fn namespace(v: &mut Value) {
    let name = v["metadata"]["name"].as_str().unwrap_or("").to_string();
    let Some(m) = obj(v) else { return };
    if !name.is_empty() {
        let labels = child(child(m, "metadata"), "labels");
        labels.insert("kubernetes.io/metadata.name".into(), json!(name));
    }
    let status = child(m, "status");
    dflt(status, "phase", json!("Active"));
}

/// Namespace create: the `kubernetes` finalizer.
pub fn namespace_create(v: &mut Value) {
    let Some(m) = obj(v) else { return };
    let spec = child(m, "spec");
    dflt(spec, "finalizers", json!(["kubernetes"]));
    m.insert("status".into(), json!({"phase": "Active"}));
}

/// Node create: the not-ready taint and zero-valued status blocks.
pub fn node_create(v: &mut Value) {
    let Some(m) = obj(v) else { return };
    let spec = child(m, "spec");
    let taints = spec.entry("taints").or_insert_with(|| json!([]));
    if let Some(list) = taints.as_array_mut()
        && !list
            .iter()
            .any(|t| t["key"] == "node.kubernetes.io/not-ready")
    {
        list.push(json!({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}));
    }
    let status = child(m, "status");
    dflt(
        status,
        "daemonEndpoints",
        json!({"kubeletEndpoint": {"Port": 0}}),
    );
    dflt(
        status,
        "nodeInfo",
        json!({"machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "", "osImage": "",
               "containerRuntimeVersion": "", "kubeletVersion": "", "kubeProxyVersion": "",
               "operatingSystem": "", "architecture": ""}),
    );
}

/// PVC defaults.
pub fn pvc(v: &mut Value) {
    let Some(m) = obj(v) else { return };
    dflt(child(m, "spec"), "volumeMode", json!("Filesystem"));
}

/// PVC create: protection finalizer and phase Pending.
pub fn pvc_create(v: &mut Value) {
    let Some(m) = obj(v) else { return };
    let meta = child(m, "metadata");
    let fins = meta.entry("finalizers").or_insert_with(|| json!([]));
    if let Some(list) = fins.as_array_mut()
        && !list.iter().any(|f| f == "kubernetes.io/pvc-protection")
    {
        list.push(json!("kubernetes.io/pvc-protection"));
    }
    m.insert("status".into(), json!({"phase": "Pending"}));
}

/// Lease defaults: the spec struct is always present.
pub fn lease(v: &mut Value) {
    if let Some(m) = obj(v) {
        dflt(m, "spec", json!({}));
    }
}

/// Secret defaults.
pub fn secret(v: &mut Value) {
    if let Some(m) = obj(v) {
        dflt(m, "type", json!("Opaque"));
    }
}

/// Service defaults.
pub fn service(v: &mut Value) {
    let Some(m) = obj(v) else { return };
    let spec = child(m, "spec");
    dflt(spec, "type", json!("ClusterIP"));
    let ty = spec["type"].as_str().unwrap_or("ClusterIP").to_string();
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            dflt(p, "protocol", json!("TCP"));
            let port = p.get("port").cloned().unwrap_or(Value::Null);
            dflt(p, "targetPort", port);
        }
    }
    if ty != "ExternalName" {
        dflt(spec, "sessionAffinity", json!("None"));
        dflt(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    if ty == "NodePort" || ty == "LoadBalancer" {
        dflt(spec, "externalTrafficPolicy", json!("Cluster"));
    }
    if ty == "LoadBalancer" {
        dflt(spec, "allocateLoadBalancerNodePorts", json!(true));
    }
    if ty != "ExternalName" {
        dflt(spec, "ipFamilies", json!(["IPv4"]));
        dflt(spec, "ipFamilyPolicy", json!("SingleStack"));
    }
}

/// Service create: status reset (clusterIP allocation happens in the create path, it needs etcd).
pub fn service_create(v: &mut Value) {
    if let Some(m) = obj(v) {
        m.insert("status".into(), json!({"loadBalancer": {}}));
    }
}

/// ReplicationController defaults: selector and labels from the template.
pub fn replication_controller(v: &mut Value) {
    let tmpl_labels = v["spec"]["template"]["metadata"]["labels"].clone();
    let Some(m) = obj(v) else { return };
    if tmpl_labels.as_object().is_some_and(|l| !l.is_empty()) {
        let spec = child(m, "spec");
        if spec
            .get("selector")
            .and_then(Value::as_object)
            .is_none_or(|s| s.is_empty())
        {
            spec.insert("selector".into(), tmpl_labels.clone());
        }
        let meta = child(m, "metadata");
        if meta
            .get("labels")
            .and_then(Value::as_object)
            .is_none_or(|l| l.is_empty())
        {
            meta.insert("labels".into(), tmpl_labels);
        }
    }
    let spec = child(m, "spec");
    dflt(spec, "replicas", json!(1));
    template(spec);
}

/// Create-time status `{"replicas":0}` (ReplicaSet, ReplicationController).
pub fn replicas_status_create(v: &mut Value) {
    if let Some(m) = obj(v) {
        m.insert("status".into(), json!({"replicas": 0}));
    }
}

/// Create-time empty status (Deployment, CronJob).
pub fn empty_status_create(v: &mut Value) {
    if let Some(m) = obj(v) {
        m.insert("status".into(), json!({}));
    }
}

/// Deployment defaults.
pub fn deployment(v: &mut Value) {
    let Some(m) = obj(v) else { return };
    let spec = child(m, "spec");
    dflt(spec, "replicas", json!(1));
    template(spec);
    let strategy = child(spec, "strategy");
    dflt(strategy, "type", json!("RollingUpdate"));
    if strategy["type"] == "RollingUpdate" {
        let ru = child(strategy, "rollingUpdate");
        dflt(ru, "maxUnavailable", json!("25%"));
        dflt(ru, "maxSurge", json!("25%"));
    }
    dflt(spec, "revisionHistoryLimit", json!(10));
    dflt(spec, "progressDeadlineSeconds", json!(600));
}

/// ReplicaSet defaults.
pub fn replicaset(v: &mut Value) {
    let Some(m) = obj(v) else { return };
    let spec = child(m, "spec");
    dflt(spec, "replicas", json!(1));
    template(spec);
}

/// DaemonSet defaults.
pub fn daemonset(v: &mut Value) {
    let Some(m) = obj(v) else { return };
    let spec = child(m, "spec");
    template(spec);
    let strategy = child(spec, "updateStrategy");
    dflt(strategy, "type", json!("RollingUpdate"));
    if strategy["type"] == "RollingUpdate" {
        let ru = child(strategy, "rollingUpdate");
        dflt(ru, "maxUnavailable", json!(1));
        dflt(ru, "maxSurge", json!(0));
    }
    dflt(spec, "revisionHistoryLimit", json!(10));
}

/// The annotation apps/v1 carries a DaemonSet's template generation in (upstream's internal
/// `spec.templateGeneration`).
const TEMPLATE_GENERATION: &str = "deprecated.daemonset.template.generation";

/// DaemonSet update: a changed pod template bumps the template generation, as upstream's strategy
/// does; the daemonset controller labels pods with it (`pod-template-generation`).
pub fn daemonset_update(new: &mut Value, old: &Value) {
    if new["spec"]["template"] == old["spec"]["template"] {
        return;
    }
    let previous = old["metadata"]["annotations"][TEMPLATE_GENERATION]
        .as_str()
        .and_then(|g| g.parse::<i64>().ok())
        .unwrap_or(0);
    let Some(m) = obj(new) else { return };
    child(child(m, "metadata"), "annotations").insert(
        TEMPLATE_GENERATION.into(),
        json!((previous + 1).to_string()),
    );
}

/// No update preparation.
pub fn nothing_on_update(_: &mut Value, _: &Value) {}

/// DaemonSet create: template generation annotation and zeroed status.
pub fn daemonset_create(v: &mut Value) {
    let Some(m) = obj(v) else { return };
    let annotations = child(child(m, "metadata"), "annotations");
    annotations.insert(TEMPLATE_GENERATION.into(), json!("1"));
    m.insert(
        "status".into(),
        json!({"currentNumberScheduled": 0, "numberMisscheduled": 0, "desiredNumberScheduled": 0, "numberReady": 0}),
    );
}

/// StatefulSet defaults.
pub fn statefulset(v: &mut Value) {
    let Some(m) = obj(v) else { return };
    let spec = child(m, "spec");
    dflt(spec, "replicas", json!(1));
    template(spec);
    dflt(spec, "serviceName", json!(""));
    dflt(spec, "podManagementPolicy", json!("OrderedReady"));
    let strategy = child(spec, "updateStrategy");
    dflt(strategy, "type", json!("RollingUpdate"));
    if strategy["type"] == "RollingUpdate" {
        dflt(child(strategy, "rollingUpdate"), "partition", json!(0));
    }
    dflt(spec, "revisionHistoryLimit", json!(10));
    if let Some(claims) = spec
        .get_mut("volumeClaimTemplates")
        .and_then(Value::as_array_mut)
    {
        claims
            .iter_mut()
            .filter_map(Value::as_object_mut)
            .for_each(nested_meta);
    }
    let retention = child(spec, "persistentVolumeClaimRetentionPolicy");
    dflt(retention, "whenDeleted", json!("Retain"));
    dflt(retention, "whenScaled", json!("Retain"));
}

/// StatefulSet create status.
pub fn statefulset_create(v: &mut Value) {
    if let Some(m) = obj(v) {
        m.insert(
            "status".into(),
            json!({"replicas": 0, "availableReplicas": 0}),
        );
    }
}

fn job_spec(spec: &mut Map<String, Value>) {
    // Upstream `SetDefaults_Job`: completions default to 1 only when parallelism is unset too; a Job
    // with parallelism and no completions is a work queue.
    let unset = |spec: &Map<String, Value>, key: &str| spec.get(key).is_none_or(Value::is_null);
    if unset(spec, "completions") && unset(spec, "parallelism") {
        spec.insert("completions".into(), json!(1));
    }
    dflt(spec, "parallelism", json!(1));
    // A per-index backoff limit makes the global one effectively unlimited, whatever the mode.
    let backoff = if unset(spec, "backoffLimitPerIndex") {
        6
    } else {
        i32::MAX
    };
    dflt(spec, "backoffLimit", json!(backoff));
    dflt(spec, "completionMode", json!("NonIndexed"));
    dflt(spec, "suspend", json!(false));
    dflt(spec, "manualSelector", json!(false));
    let with_failure_policy = !unset(spec, "podFailurePolicy");
    if let Some(rules) = spec
        .get_mut("podFailurePolicy")
        .and_then(|p| p.get_mut("rules"))
        .and_then(Value::as_array_mut)
    {
        let patterns = rules
            .iter_mut()
            .filter_map(|r| r.get_mut("onPodConditions"))
            .filter_map(Value::as_array_mut)
            .flatten()
            .filter_map(Value::as_object_mut);
        for pattern in patterns {
            if pattern
                .get("status")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                pattern.insert("status".into(), json!("True"));
            }
        }
    }
    let replacement = if with_failure_policy {
        "Failed"
    } else {
        "TerminatingOrFailed"
    };
    dflt(spec, "podReplacementPolicy", json!(replacement));
    template(spec);
}

/// Job defaults (every write), including upstream's copy of the template labels onto a Job that
/// has none.
pub fn job(v: &mut Value) {
    let Some(m) = obj(v) else { return };
    let spec = child(m, "spec");
    job_spec(spec);
    let template_labels = template_labels(spec);
    copy_labels_if_none(m, template_labels);
}

fn template_labels(spec: &Map<String, Value>) -> Value {
    spec.get("template")
        .map_or(Value::Null, |t| t["metadata"]["labels"].clone())
}

fn copy_labels_if_none(m: &mut Map<String, Value>, labels: Value) {
    if !labels.is_object() {
        return;
    }
    let meta = child(m, "metadata");
    if meta
        .get("labels")
        .and_then(Value::as_object)
        .is_none_or(|l| l.is_empty())
    {
        meta.insert("labels".into(), labels);
    }
}

/// Job create: unless the selector is manual, upstream's `generateSelector` — the job-name and
/// controller-uid labels (legacy and prefixed) on the template where not set, and the prefixed
/// controller-uid in the selector's matchLabels where not set; a conflicting value the user chose
/// is kept for validation to refuse. Then the labels copy and an empty status.
pub fn job_create(v: &mut Value) {
    let uid = v["metadata"]["uid"].as_str().unwrap_or("").to_string();
    let name = v["metadata"]["name"].as_str().unwrap_or("").to_string();
    let Some(m) = obj(v) else { return };
    let spec = child(m, "spec");
    if spec.get("manualSelector") != Some(&json!(true)) {
        let labels = child(child(child(spec, "template"), "metadata"), "labels");
        for (key, value) in [
            ("batch.kubernetes.io/controller-uid", &uid),
            ("batch.kubernetes.io/job-name", &name),
            ("controller-uid", &uid),
            ("job-name", &name),
        ] {
            dflt(labels, key, json!(value));
        }
        let selector = child(spec, "selector");
        dflt(
            child(selector, "matchLabels"),
            "batch.kubernetes.io/controller-uid",
            json!(uid),
        );
    }
    let labels_to_copy = template_labels(spec);
    copy_labels_if_none(m, labels_to_copy);
    m.insert("status".into(), json!({}));
}

/// CronJob defaults.
pub fn cronjob(v: &mut Value) {
    let Some(m) = obj(v) else { return };
    let spec = child(m, "spec");
    dflt(spec, "concurrencyPolicy", json!("Allow"));
    dflt(spec, "suspend", json!(false));
    dflt(spec, "successfulJobsHistoryLimit", json!(3));
    dflt(spec, "failedJobsHistoryLimit", json!(1));
    let jt = child(spec, "jobTemplate");
    nested_meta(jt);
    dflt(jt, "metadata", json!({}));
    let js = child(jt, "spec");
    let t = child(js, "template");
    nested_meta(t);
    dflt(t, "metadata", json!({}));
    if let Some(ps) = child_if(t, "spec") {
        pod_spec(ps);
    }
}

/// EndpointSlice defaults: port protocol/name, endpoint conditions, null lists.
pub fn endpointslice(v: &mut Value) {
    let Some(m) = obj(v) else { return };
    dflt(m, "endpoints", Value::Null);
    dflt(m, "ports", Value::Null);
    if let Some(eps) = m.get_mut("endpoints").and_then(Value::as_array_mut) {
        for e in eps.iter_mut().filter_map(Value::as_object_mut) {
            dflt(e, "conditions", json!({}));
        }
    }
    if let Some(ports) = m.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            dflt(p, "name", json!(""));
            dflt(p, "protocol", json!("TCP"));
        }
    }
}

/// CRD defaults.
pub fn crd(v: &mut Value) {
    let Some(m) = obj(v) else { return };
    let spec = child(m, "spec");
    let names = child(spec, "names");
    if let Some(kind) = names.get("kind").and_then(Value::as_str) {
        let list_kind = format!("{kind}List");
        dflt(names, "listKind", json!(list_kind));
    }
    if let Some(plural) = names.get("plural").and_then(Value::as_str) {
        let singular = names
            .get("kind")
            .and_then(Value::as_str)
            .map(str::to_lowercase)
            .unwrap_or_else(|| plural.to_string());
        dflt(names, "singular", json!(singular));
    }
    dflt(spec, "conversion", json!({"strategy": "None"}));
}

/// CRD create: the status the apiextensions controllers write at once (NamesAccepted, Established).
pub fn crd_create(v: &mut Value) {
    let names = v["spec"]["names"].clone();
    let versions: Vec<Value> = v["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|ver| ver["storage"] == json!(true))
        .map(|ver| ver["name"].clone())
        .collect();
    let now = super::meta::now();
    if let Some(m) = obj(v) {
        m.insert(
            "status".into(),
            json!({
                "conditions": [
                    {"type": "NamesAccepted", "status": "True", "lastTransitionTime": now, "reason": "NoConflicts", "message": "no conflicts found"},
                    {"type": "Established", "status": "True", "lastTransitionTime": now, "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"}
                ],
                "acceptedNames": names,
                "storedVersions": versions,
            }),
        );
    }
}

/// PriorityClass defaults (the `NonPreemptingPriority` behaviour, on by default upstream).
pub fn priority_class(v: &mut Value) {
    if let Some(m) = obj(v) {
        dflt(m, "preemptionPolicy", json!("PreemptLowerPriority"));
    }
}

/// RoleBinding / ClusterRoleBinding defaults: users and groups belong to the RBAC API group, service
/// accounts to the core group.
pub fn role_binding(v: &mut Value) {
    let Some(m) = obj(v) else { return };
    if let Some(role_ref) = child_if(m, "roleRef") {
        dflt(role_ref, "apiGroup", json!("rbac.authorization.k8s.io"));
    }
    if let Some(subjects) = m.get_mut("subjects").and_then(Value::as_array_mut) {
        for s in subjects.iter_mut().filter_map(Value::as_object_mut) {
            let group = match s.get("kind").and_then(Value::as_str) {
                Some("User" | "Group") => "rbac.authorization.k8s.io",
                _ => "",
            };
            if s.get("apiGroup")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
                && !group.is_empty()
            {
                s.insert("apiGroup".into(), json!(group));
            }
        }
    }
}

/// PodDisruptionBudget create: the zero status (its counters are not `omitempty` upstream).
pub fn pdb_create(v: &mut Value) {
    if let Some(m) = obj(v) {
        m.insert(
            "status".into(),
            json!({"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}),
        );
    }
}

/// Custom resources with a status subresource: status is dropped on create.
pub fn drop_status(v: &mut Value) {
    if let Some(m) = obj(v) {
        m.remove("status");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_s_null_creation_timestamp_is_dropped_as_upstream_does() {
        let mut d = json!({"spec": {"template": {"metadata": {"creationTimestamp": null, "labels": {"a": "b"}},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}});
        deployment(&mut d);
        assert_eq!(
            d["spec"]["template"]["metadata"],
            json!({"labels": {"a": "b"}})
        );
        let mut cj = json!({"spec": {"jobTemplate": {"metadata": {"creationTimestamp": null},
            "spec": {"template": {"metadata": {"creationTimestamp": null}}}}}});
        cronjob(&mut cj);
        assert_eq!(cj["spec"]["jobTemplate"]["metadata"], json!({}));
        assert_eq!(
            cj["spec"]["jobTemplate"]["spec"]["template"]["metadata"],
            json!({})
        );
    }

    #[test]
    fn a_job_with_parallelism_but_no_completions_stays_a_work_queue_as_upstream_defaults_it() {
        let spec = |v: Value| {
            let mut object = json!({"spec": v});
            job(&mut object);
            object["spec"].clone()
        };
        let both_unset = spec(json!({"template": {}}));
        assert_eq!(both_unset["parallelism"], json!(1));
        assert_eq!(both_unset["completions"], json!(1));
        let work_queue = spec(json!({"parallelism": 1, "template": {}}));
        assert_eq!(work_queue.get("completions"), None);
        let fixed = spec(json!({"completions": 3, "template": {}}));
        assert_eq!(fixed["parallelism"], json!(1));
        assert_eq!(fixed["backoffLimit"], json!(6));
        assert_eq!(fixed["completionMode"], json!("NonIndexed"));
        assert_eq!(fixed["podReplacementPolicy"], json!("TerminatingOrFailed"));
    }

    #[test]
    fn binding_subjects_get_the_rbac_group_for_users_and_groups_only() {
        let mut rb = json!({"roleRef": {"kind": "Role", "name": "r"}, "subjects": [
            {"kind": "User", "name": "alice"},
            {"kind": "Group", "name": "devs", "apiGroup": ""},
            {"kind": "ServiceAccount", "name": "robot", "namespace": "ns"},
        ]});
        role_binding(&mut rb);
        assert_eq!(rb["roleRef"]["apiGroup"], "rbac.authorization.k8s.io");
        assert_eq!(rb["subjects"][0]["apiGroup"], "rbac.authorization.k8s.io");
        assert_eq!(rb["subjects"][1]["apiGroup"], "rbac.authorization.k8s.io");
        assert!(rb["subjects"][2].get("apiGroup").is_none());
    }
    use crate::apiserver::builtins::builtins;

    fn fixture(name: &str) -> Option<Value> {
        let path = format!(
            "{}/../../shared/kube-fixtures/defaulting/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(path).ok()?;
        serde_json::from_str(&text).ok()
    }

    fn check(file: &str, resource: &str) {
        let Some(f) = fixture(file) else { return };
        let info = builtins()
            .into_iter()
            .find(|r| r.resource == resource)
            .expect("known resource");
        let mut body = f["request"]["body"].clone();
        body["metadata"]["uid"] = f["response"]["body"]["metadata"]["uid"].clone();
        (info.defaulter)(&mut body);
        (info.prepare_create)(&mut body);
        let want = &f["response"]["body"];
        for key in ["spec", "status"] {
            if key == "spec" && resource == "services" {
                let mut got = body["spec"].clone();
                got["clusterIP"] = want["spec"]["clusterIP"].clone();
                got["clusterIPs"] = want["spec"]["clusterIPs"].clone();
                if let Some(np) = want["spec"]["ports"][0].get("nodePort") {
                    got["ports"][0]["nodePort"] = np.clone();
                }
                assert_eq!(got, want["spec"], "{file} spec");
                continue;
            }
            assert_eq!(body.get(key), want.get(key), "{file} {key}");
        }
        assert_eq!(
            body["metadata"].get("labels"),
            want["metadata"].get("labels"),
            "{file} labels"
        );
        assert_eq!(
            body["metadata"].get("finalizers"),
            want["metadata"].get("finalizers"),
            "{file} finalizers"
        );
    }

    #[test]
    fn defaulted_workloads_match_the_recorded_upstream_objects() {
        check("deployment.json", "deployments");
        check("replicaset.json", "replicasets");
        check("daemonset.json", "daemonsets");
        check("statefulset.json", "statefulsets");
        check("job.json", "jobs");
        check("cronjob.json", "cronjobs");
        check("replicationcontroller.json", "replicationcontrollers");
    }

    #[test]
    fn defaulted_core_objects_match_the_recorded_upstream_objects() {
        check("pod.json", "pods");
        check("pod-generatename.json", "pods");
        check("namespace.json", "namespaces");
        check("node.json", "nodes");
        check("persistentvolumeclaim.json", "persistentvolumeclaims");
        check("service-clusterip.json", "services");
        check("service-nodeport.json", "services");
        check("service-headless.json", "services");
        check("service-named-targetport.json", "services");
        check("endpointslice.json", "endpointslices");
        check("endpointslice-no-endpoints-field.json", "endpointslices");
        check("lease.json", "leases");
        check("configmap.json", "configmaps");
    }

    #[test]
    fn a_tagged_image_is_pulled_if_not_present_and_an_untagged_one_always() {
        assert_eq!(image_pull_policy("nginx"), "Always");
        assert_eq!(image_pull_policy("nginx:latest"), "Always");
        assert_eq!(image_pull_policy("nginx:1.27"), "IfNotPresent");
        assert_eq!(image_pull_policy("localhost:5000/nginx"), "Always");
        assert_eq!(image_pull_policy("repo/nginx@sha256:abc"), "IfNotPresent");
    }

    #[test]
    fn a_daemonsets_template_generation_follows_its_template_only() {
        let old = json!({
            "metadata": {"annotations": {TEMPLATE_GENERATION: "3"}},
            "spec": {"minReadySeconds": 0, "template": {"spec": {"containers": [{"image": "a"}]}}},
        });
        let mut same_template = old.clone();
        same_template["spec"]["minReadySeconds"] = json!(5);
        daemonset_update(&mut same_template, &old);
        assert_eq!(
            same_template["metadata"]["annotations"][TEMPLATE_GENERATION],
            "3"
        );
        let mut new_image = old.clone();
        new_image["spec"]["template"]["spec"]["containers"][0]["image"] = json!("b");
        daemonset_update(&mut new_image, &old);
        assert_eq!(
            new_image["metadata"]["annotations"][TEMPLATE_GENERATION],
            "4"
        );
    }
}
