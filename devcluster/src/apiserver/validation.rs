//! Validation of names, labels and the built-in kinds' few invariants the controllers rely on (422 field causes).

use serde_json::{Value, json};

use super::registry::NameRule;
use super::selector::LabelSelector;
use super::status::Cause;

const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL1123_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const LABEL1035_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
const QUALIFIED_NAME_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

fn is_label_1123(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

fn is_subdomain(s: &str) -> bool {
    !s.is_empty() && s.split('.').all(is_label_1123)
}

fn is_label_1035(s: &str) -> bool {
    is_label_1123(s) && s.as_bytes()[0].is_ascii_lowercase()
}

fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

/// Problems with a DNS-1123 subdomain (empty: valid).
pub fn subdomain_errors(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 253 {
        out.push("must be no more than 253 characters".to_string());
    }
    if !is_subdomain(s) {
        out.push(SUBDOMAIN_MSG.to_string());
    }
    out
}

/// Problems with `metadata.name` under `rule`.
pub fn name_errors(rule: NameRule, name: &str) -> Vec<String> {
    match rule {
        NameRule::Subdomain => subdomain_errors(name),
        NameRule::Label1123 | NameRule::Label1035 => {
            let mut out = Vec::new();
            if name.len() > 63 {
                out.push("must be no more than 63 characters".to_string());
            }
            let (ok, msg) = if rule == NameRule::Label1123 {
                (is_label_1123(name), LABEL1123_MSG)
            } else {
                (is_label_1035(name), LABEL1035_MSG)
            };
            if !ok {
                out.push(msg.to_string());
            }
            out
        }
        NameRule::PathSegment => {
            if name == "." || name == ".." {
                vec![format!("may not be '{name}'")]
            } else if name.contains('/') || name.contains('%') {
                vec![format!(
                    "may not contain '{}'",
                    if name.contains('/') { "/" } else { "%" }
                )]
            } else {
                Vec::new()
            }
        }
    }
}

/// Problems with a label or annotation key (`prefix/name`).
pub fn qualified_name_errors(key: &str) -> Vec<String> {
    let mut out = Vec::new();
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        if p.is_empty() {
            out.push("prefix part must be non-empty".to_string());
        } else {
            out.extend(
                subdomain_errors(p)
                    .into_iter()
                    .map(|m| format!("prefix part {m}")),
            );
        }
    }
    if name.is_empty() {
        out.push("name part must be non-empty".to_string());
    } else {
        if name.len() > 63 {
            out.push("name part must be no more than 63 characters".to_string());
        }
        if !is_qualified_name_part(name) {
            out.push(QUALIFIED_NAME_MSG.to_string());
        }
    }
    out
}

/// Problems with a label value.
pub fn label_value_errors(v: &str) -> Vec<String> {
    let mut out = Vec::new();
    if v.len() > 63 {
        out.push("must be no more than 63 bytes".to_string());
    }
    if !v.is_empty() && !is_qualified_name_part(v) {
        out.push(LABEL_VALUE_MSG.to_string());
    }
    out
}

/// Upstream's `TotalAnnotationSizeLimitB`: the most bytes (keys plus values) the annotations of one
/// object, or of one embedded pod template, may hold.
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

/// Upstream's `ValidateLabels` of the map at `field`: keys are qualified names, values label values.
fn labels(field: &str, labels: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    for (k, v) in labels.as_object().into_iter().flatten() {
        for m in qualified_name_errors(k) {
            causes.push(Cause::invalid(field, &json!(k), &m));
        }
        match v.as_str() {
            Some(s) => {
                for m in label_value_errors(s) {
                    causes.push(Cause::invalid(field, v, &m));
                }
            }
            None => causes.push(Cause::invalid(field, v, "must be a string")),
        }
    }
    causes
}

/// Upstream's `ValidateAnnotations` of the map at `field`: keys are qualified names once lowercased
/// (annotation keys may carry capitals), and keys plus values stay within
/// [`TOTAL_ANNOTATION_SIZE_LIMIT`] bytes.
fn annotations(field: &str, annotations: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let mut total = 0usize;
    for (k, v) in annotations.as_object().into_iter().flatten() {
        for m in qualified_name_errors(&k.to_lowercase()) {
            causes.push(Cause::invalid(field, &json!(k), &m));
        }
        total += k.len() + v.as_str().map_or(0, str::len);
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        causes.push(Cause::too_long(field, TOTAL_ANNOTATION_SIZE_LIMIT));
    }
    causes
}

/// The metadata checks of upstream's `ValidatePodTemplateSpec` for the pod template at `field` (e.g.
/// `spec.template`): labels and annotations, reported as `<field>.labels` / `<field>.annotations` —
/// without `.metadata`, exactly as upstream names them.
pub fn pod_template(field: &str, template: &Value) -> Vec<Cause> {
    let meta = &template["metadata"];
    let mut causes = labels(&format!("{field}.labels"), &meta["labels"]);
    causes.extend(annotations(
        &format!("{field}.annotations"),
        &meta["annotations"],
    ));
    causes
}

/// Metadata checks common to all kinds: name, labels, annotations (keys and total size), finalizer
/// names.
pub fn metadata(rule: NameRule, obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let meta = &obj["metadata"];
    let name = meta["name"].as_str().unwrap_or("");
    if name.is_empty() {
        causes.push(Cause::required(
            "metadata.name",
            "name or generateName is required",
        ));
    } else {
        for m in name_errors(rule, name) {
            causes.push(Cause::invalid("metadata.name", &json!(name), &m));
        }
    }
    causes.extend(labels("metadata.labels", &meta["labels"]));
    causes.extend(annotations("metadata.annotations", &meta["annotations"]));
    if let Some(fins) = meta["finalizers"].as_array() {
        for (i, f) in fins.iter().enumerate() {
            let s = f.as_str().unwrap_or("");
            if s.is_empty() || !qualified_name_errors(s).is_empty() {
                causes.push(Cause::invalid(
                    &format!("metadata.finalizers[{i}]"),
                    f,
                    "name is neither a standard finalizer name nor is it fully qualified",
                ));
            }
        }
    }
    causes
}

/// Kinds with nothing beyond metadata to check.
pub fn nothing(_: &Value) -> Vec<Cause> {
    Vec::new()
}

/// Kinds with no update-only rules.
pub fn nothing_on_update(_: &Value, _: &Value) -> Vec<Cause> {
    Vec::new()
}

/// RoleBinding / ClusterRoleBinding updates: `roleRef` may not change (upstream's
/// `ValidateRoleBindingUpdate`), so a binding never silently starts granting another role. The value
/// is printed as Go's `%#v` of the internal `rbac.RoleRef`, as upstream's message shows it.
pub fn role_binding_update(new: &Value, old: &Value) -> Vec<Cause> {
    let part = |v: &Value, k: &str| v["roleRef"][k].as_str().unwrap_or("").to_owned();
    let fields = ["apiGroup", "kind", "name"];
    if fields.iter().all(|k| part(new, k) == part(old, k)) {
        return Vec::new();
    }
    let quoted = |k: &str| serde_json::to_string(&part(new, k)).unwrap_or_default();
    vec![Cause {
        reason: "FieldValueInvalid",
        message: format!(
            "Invalid value: rbac.RoleRef{{APIGroup:{}, Kind:{}, Name:{}}}: cannot change roleRef",
            quoted("apiGroup"),
            quoted("kind"),
            quoted("name")
        ),
        field: "roleRef".into(),
    }]
}

/// ConfigMap: data + binaryData must stay under 1 MiB.
pub fn configmap(obj: &Value) -> Vec<Cause> {
    let mut total = 0usize;
    for key in ["data", "binaryData"] {
        if let Some(m) = obj[key].as_object() {
            for (k, v) in m {
                total += k.len() + v.as_str().map_or(0, str::len);
            }
        }
    }
    if total > 1024 * 1024 {
        return vec![Cause::too_long("[]", 1024 * 1024)];
    }
    Vec::new()
}

/// HorizontalPodAutoscaler: a target to scale, and replica bounds that make sense (upstream's
/// `ValidateHorizontalPodAutoscalerSpec`, scale-to-zero off as by default).
pub fn horizontal_pod_autoscaler(obj: &Value) -> Vec<Cause> {
    let spec = &obj["spec"];
    let mut causes = Vec::new();
    for field in ["kind", "name"] {
        if spec["scaleTargetRef"][field]
            .as_str()
            .is_none_or(str::is_empty)
        {
            causes.push(Cause::required(&format!("spec.scaleTargetRef.{field}"), ""));
        }
    }
    let min = spec["minReplicas"].as_i64();
    if let Some(min) = min.filter(|m| *m < 1) {
        causes.push(Cause::invalid(
            "spec.minReplicas",
            &json!(min),
            "must be greater than or equal to 1",
        ));
    }
    let max = spec["maxReplicas"].as_i64().unwrap_or(0);
    if max < 1 {
        causes.push(Cause::invalid(
            "spec.maxReplicas",
            &json!(max),
            "must be greater than 0",
        ));
    }
    if min.is_some_and(|min| max < min) {
        causes.push(Cause::invalid(
            "spec.maxReplicas",
            &json!(max),
            "must be greater than or equal to `minReplicas`",
        ));
    }
    causes
}

/// A pod spec's containers at `path` (e.g. `spec.template.spec`): at least one, each with a name
/// and an image.
pub(super) fn containers(path: &str, spec: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    match spec["containers"].as_array() {
        Some(cs) if !cs.is_empty() => {
            for (i, c) in cs.iter().enumerate() {
                if c["name"].as_str().is_none_or(str::is_empty) {
                    causes.push(Cause::required(&format!("{path}.containers[{i}].name"), ""));
                }
                if c["image"].as_str().is_none_or(str::is_empty) {
                    causes.push(Cause::required(
                        &format!("{path}.containers[{i}].image"),
                        "",
                    ));
                }
            }
        }
        _ => causes.push(Cause::required(&format!("{path}.containers"), "")),
    }
    causes
}

/// Pod: at least one container with a name and image.
pub fn pod(obj: &Value) -> Vec<Cause> {
    containers("spec", &obj["spec"])
}

/// Deployment / ReplicaSet / DaemonSet / StatefulSet: a selector that matches the template labels.
pub fn selector_workload(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let spec = &obj["spec"];
    let labels = &spec["template"]["metadata"]["labels"];
    match spec.get("selector").filter(|s| s.is_object()) {
        None => {
            causes.push(Cause::required("spec.selector", ""));
            causes.push(Cause::invalid(
                "spec.template.metadata.labels",
                labels,
                "`selector` does not match template `labels`",
            ));
        }
        Some(sel) => match LabelSelector::from_object(sel) {
            Ok(s) if s.is_empty() => causes.push(Cause::invalid(
                "spec.selector",
                sel,
                "empty selector is invalid for deployment",
            )),
            Ok(s) => {
                let map = labels.as_object().cloned().unwrap_or_default();
                if !s.matches_map(&map) {
                    causes.push(Cause::invalid(
                        "spec.template.metadata.labels",
                        labels,
                        "`selector` does not match template `labels`",
                    ));
                }
            }
            Err(e) => causes.push(Cause::invalid("spec.selector", sel, &e)),
        },
    }
    causes.extend(containers("spec.template.spec", &spec["template"]["spec"]));
    causes
}

/// Service: ports have a valid number.
pub fn service(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let ty = obj["spec"]["type"].as_str().unwrap_or("ClusterIP");
    if ty != "ExternalName"
        && obj["spec"]["clusterIP"] != "None"
        && obj["spec"]["ports"].as_array().is_none_or(Vec::is_empty)
    {
        causes.push(Cause::required("spec.ports", ""));
    }
    for (i, p) in obj["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        match p["port"].as_i64() {
            Some(n) if (1..=65535).contains(&n) => {}
            _ => causes.push(Cause::invalid(
                &format!("spec.ports[{i}].port"),
                &p["port"],
                "must be between 1 and 65535, inclusive",
            )),
        }
    }
    causes
}

/// CRD: group, names and at least one served storage version.
pub fn crd(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let spec = &obj["spec"];
    let group = spec["group"].as_str().unwrap_or("");
    let plural = spec["names"]["plural"].as_str().unwrap_or("");
    if group.is_empty() {
        causes.push(Cause::required("spec.group", ""));
    }
    if plural.is_empty() {
        causes.push(Cause::required("spec.names.plural", ""));
    }
    if spec["names"]["kind"].as_str().is_none_or(str::is_empty) {
        causes.push(Cause::required("spec.names.kind", ""));
    }
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        causes.push(Cause::invalid(
            "metadata.name",
            &json!(name),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    match spec["scope"].as_str() {
        Some("Namespaced" | "Cluster") => {}
        _ => causes.push(Cause::not_supported(
            "spec.scope",
            &spec["scope"],
            &["Cluster", "Namespaced"],
        )),
    }
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    if versions.is_empty() {
        causes.push(Cause::required(
            "spec.versions",
            "must have exactly one version marked as storage version",
        ));
    } else if versions
        .iter()
        .filter(|v| v["storage"] == json!(true))
        .count()
        != 1
    {
        causes.push(Cause::invalid(
            "spec.versions",
            &json!(versions.len()),
            "must have exactly one version marked as storage version",
        ));
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_254_character_name_is_too_long_for_a_subdomain() {
        let name = "a".repeat(254);
        assert_eq!(
            name_errors(NameRule::Subdomain, &name),
            vec!["must be no more than 253 characters".to_string()]
        );
        assert!(name_errors(NameRule::Subdomain, &"a".repeat(253)).is_empty());
    }

    #[test]
    fn uppercase_and_underscores_are_not_allowed_in_names() {
        assert_eq!(
            name_errors(NameRule::Subdomain, "BadName"),
            vec![SUBDOMAIN_MSG.to_string()]
        );
        assert_eq!(name_errors(NameRule::Subdomain, "a.b_c").len(), 1);
        assert!(name_errors(NameRule::Subdomain, "web-1.example").is_empty());
    }

    #[test]
    fn service_names_must_be_dns_1035_labels() {
        assert_eq!(
            name_errors(NameRule::Label1035, &"s".repeat(64)),
            vec!["must be no more than 63 characters".to_string()]
        );
        assert_eq!(name_errors(NameRule::Label1035, "1abc").len(), 1);
        assert!(name_errors(NameRule::Label1035, "abc-1").is_empty());
    }

    #[test]
    fn label_keys_check_prefix_and_name_part() {
        assert_eq!(
            qualified_name_errors("bad key"),
            vec![QUALIFIED_NAME_MSG.to_string()]
        );
        assert_eq!(
            qualified_name_errors("UPPER.example.com/x"),
            vec![format!("prefix part {SUBDOMAIN_MSG}")]
        );
        assert!(qualified_name_errors("app.kubernetes.io/name").is_empty());
    }

    #[test]
    fn label_values_may_be_empty_but_not_too_long() {
        assert!(label_value_errors("").is_empty());
        assert_eq!(
            label_value_errors(&"x".repeat(64)),
            vec!["must be no more than 63 bytes".to_string()]
        );
        assert_eq!(
            label_value_errors("not valid!"),
            vec![LABEL_VALUE_MSG.to_string()]
        );
    }

    #[test]
    fn annotations_may_total_256_kib_and_not_one_byte_more() {
        let with = |value_len: usize| json!({"metadata": {"name": "a", "annotations": {"k": "x".repeat(value_len)}}});
        assert!(metadata(NameRule::Subdomain, &with(TOTAL_ANNOTATION_SIZE_LIMIT - 1)).is_empty());
        let causes = metadata(NameRule::Subdomain, &with(TOTAL_ANNOTATION_SIZE_LIMIT));
        assert_eq!(
            causes,
            vec![Cause::too_long(
                "metadata.annotations",
                TOTAL_ANNOTATION_SIZE_LIMIT
            )]
        );
        assert_eq!(
            causes[0].message,
            "Too long: may not be more than 262144 bytes"
        );
    }

    #[test]
    fn annotation_keys_are_checked_in_lowercase_like_upstream() {
        let obj = json!({"metadata": {"name": "a", "annotations": {"Example.COM/Key": "v"}}});
        assert!(metadata(NameRule::Subdomain, &obj).is_empty());
    }

    #[test]
    fn a_pod_templates_annotations_are_reported_without_metadata_in_the_path() {
        let template = json!({"metadata": {"annotations": {"k": "x".repeat(1 << 20)}}});
        let causes = pod_template("spec.template", &template);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "spec.template.annotations");
    }

    #[test]
    fn a_binding_may_not_change_its_role_ref() {
        let old = json!({"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "a"}});
        assert!(role_binding_update(&old, &old).is_empty());
        let new = json!({"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "b"}});
        let causes = role_binding_update(&new, &old);
        assert_eq!(causes[0].field, "roleRef");
        assert_eq!(
            causes[0].message,
            "Invalid value: rbac.RoleRef{APIGroup:\"rbac.authorization.k8s.io\", Kind:\"ClusterRole\", Name:\"b\"}: cannot change roleRef"
        );
    }

    #[test]
    fn a_deployment_without_selector_gets_both_upstream_causes() {
        let d = json!({"spec": {"template": {"metadata": {"labels": {"app": "b"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}});
        let causes = selector_workload(&d);
        assert_eq!(causes.len(), 2);
        assert_eq!(causes[0].field, "spec.selector");
    }
}
