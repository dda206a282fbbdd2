//! CustomResourceDefinitions: turning a CRD into served registry entries, keeping the registry in step with
//! etcd, deleting a CRD with its objects, and basic openAPIV3Schema validation of custom resources.

use std::sync::Arc;

use serde_json::{Value, json};

use super::defaults;
use super::meta;
use super::objects::{Target, internal};
use super::registry::{
    GcDefault, Generation, NameRule, Registry, ResourceInfo, ScalePaths, Subresources,
};
use super::state::ApiState;
use super::status::{ApiError, Cause};
use super::validation;
use super::watch_cache::EventKind;

const CRD_PREFIX: &str = "/registry/apiextensions.k8s.io/customresourcedefinitions/";

/// The registry entries a CRD object defines (one per served version).
pub fn entries(crd: &Value) -> Vec<ResourceInfo> {
    let spec = &crd["spec"];
    let group = spec["group"].as_str().unwrap_or("").to_string();
    let names = &spec["names"];
    let plural = names["plural"].as_str().unwrap_or("").to_string();
    let kind = names["kind"].as_str().unwrap_or("").to_string();
    if group.is_empty() || plural.is_empty() || kind.is_empty() {
        return Vec::new();
    }
    let namespaced = spec["scope"] != "Cluster";
    let strs = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|x| x.as_str().map(String::from))
            .collect()
    };
    spec["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["served"] != json!(false))
        .map(|v| {
            let subs = &v["subresources"];
            let scale = subs
                .get("scale")
                .filter(|s| s.is_object())
                .map(|s| ScalePaths {
                    spec_replicas: json_path_to_pointer(
                        s["specReplicasPath"].as_str().unwrap_or(".spec.replicas"),
                    ),
                    status_replicas: json_path_to_pointer(
                        s["statusReplicasPath"]
                            .as_str()
                            .unwrap_or(".status.replicas"),
                    ),
                    label_selector: s["labelSelectorPath"].as_str().map(json_path_to_pointer),
                });
            ResourceInfo {
                group: group.clone(),
                version: v["name"].as_str().unwrap_or("v1").to_string(),
                resource: plural.clone(),
                singular: names["singular"]
                    .as_str()
                    .map(String::from)
                    .unwrap_or_else(|| kind.to_lowercase()),
                kind: kind.clone(),
                namespaced,
                short_names: strs(&names["shortNames"]),
                categories: strs(&names["categories"]),
                storage_prefix: format!("/registry/{group}/{plural}"),
                subresources: Subresources {
                    status: subs.get("status").is_some(),
                    scale,
                    binding: false,
                    eviction: false,
                    finalize: false,
                },
                defaulter: defaults::nothing,
                prepare_create: defaults::nothing,
                prepare_update: defaults::nothing_on_update,
                validate: validation::nothing,
                validate_update: validation::nothing_on_update,
                pod_templates: &[],
                name_rule: NameRule::Subdomain,
                field_labels: Vec::new(),
                generation: Generation::AllButMetadataAndStatus,
                gc_default: GcDefault::Background,
                graceful_delete: false,
                namespace_lifecycle: false,
                allocates_service_ips: false,
                deletecollection: true,
                schema: v["schema"].get("openAPIV3Schema").cloned(),
                printer_columns: v["additionalPrinterColumns"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default(),
                custom: true,
            }
        })
        .collect()
}

fn json_path_to_pointer(p: &str) -> String {
    p.trim_start_matches('.')
        .split('.')
        .fold(String::new(), |acc, seg| format!("{acc}/{seg}"))
}

/// Serves (or re-serves) what a stored CRD defines; a CRD being deleted stops being served.
pub fn serve(registry: &Registry, crd: &Value) {
    let name = meta::name(crd);
    if meta::deleting(crd) {
        registry.set_custom(name, Vec::new());
    } else {
        registry.set_custom(name, entries(crd));
    }
}

/// Loads every stored CRD into the registry (start-up).
///
/// # Errors
/// etcd failures.
pub async fn load_all(st: &ApiState) -> Result<(), ApiError> {
    let page = st
        .storage
        .list(CRD_PREFIX, None, None)
        .await
        .map_err(internal)?;
    for s in page.items {
        serve(&st.registry, &s.value);
    }
    Ok(())
}

/// Keeps the registry in step with CRD changes made through any server sharing this etcd.
pub async fn sync(
    registry: Arc<Registry>,
    mut rx: tokio::sync::broadcast::Receiver<Arc<super::watch_cache::Event>>,
    cancel: tokio_util::sync::CancellationToken,
) {
    loop {
        let ev = tokio::select! {
            biased;
            _ = cancel.cancelled() => return,
            ev = rx.recv() => ev,
        };
        match ev {
            Ok(e) if e.key.starts_with(CRD_PREFIX) => match e.kind {
                EventKind::Deleted => {
                    registry.set_custom(e.key.trim_start_matches(CRD_PREFIX), Vec::new())
                }
                _ => serve(&registry, &e.object),
            },
            Ok(_) => {}
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// DELETE of a CRD: marks it (cleanup finalizer, Terminating condition), removes every object of the kind,
/// then removes the CRD. Answers with the marked CRD like upstream.
///
/// # Errors
/// etcd failures.
pub async fn delete(
    st: &ApiState,
    t: &Target,
    key: &str,
    current: Value,
    rev: i64,
) -> Result<Value, ApiError> {
    let mut marked = current.clone();
    if !meta::deleting(&current) {
        meta::set(&mut marked, "deletionTimestamp", json!(meta::now()));
        meta::set(&mut marked, "deletionGracePeriodSeconds", json!(0));
    }
    let mut fins = meta::finalizers(&marked);
    if !fins
        .iter()
        .any(|f| f == "customresourcecleanup.apiextensions.k8s.io")
    {
        fins.push("customresourcecleanup.apiextensions.k8s.io".into());
    }
    meta::set(&mut marked, "finalizers", json!(fins));
    let mut conds: Vec<Value> = marked["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    conds.retain(|c| c["type"] != "Terminating");
    conds.push(json!({"type": "Terminating", "status": "True", "lastTransitionTime": meta::now(), "reason": "InstanceDeletionPending", "message": "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon"}));
    marked["status"]["conditions"] = json!(conds);
    let generation = current["metadata"]["generation"].as_i64().unwrap_or(1);
    if !meta::deleting(&current) {
        meta::set(&mut marked, "generation", json!(generation + 1));
    }
    super::objects::reorder_metadata(&mut marked);
    let Some(new_rev) = st
        .storage
        .update(key, &marked, rev)
        .await
        .map_err(internal)?
    else {
        return Err(ApiError::stale(t.info.gr(), meta::name(&current)));
    };
    meta::set(&mut marked, "resourceVersion", json!(new_rev.to_string()));
    st.registry.set_custom(meta::name(&current), Vec::new());
    let group = current["spec"]["group"].as_str().unwrap_or("");
    let plural = current["spec"]["names"]["plural"].as_str().unwrap_or("");
    if !group.is_empty() && !plural.is_empty() {
        st.storage
            .delete_prefix(&format!("/registry/{group}/{plural}/"))
            .await
            .map_err(internal)?;
    }
    if let Some(latest) = st.storage.get(key).await.map_err(internal)?
        && let Err(e) = st.storage.delete(key, latest.rev).await
    {
        tracing::warn!(error = %e, "could not remove a deleted CRD");
    }
    Ok(marked)
}

fn type_ok(ty: &str, v: &Value) -> bool {
    match ty {
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        _ => true,
    }
}

fn walk(schema: &Value, v: &Value, path: &str, causes: &mut Vec<Cause>) {
    if v.is_null() {
        if schema["nullable"] != json!(true)
            && !path.is_empty()
            && let Some(ty) = schema["type"].as_str()
        {
            causes.push(Cause::invalid(
                path,
                v,
                &format!("{path} in body must be of type {ty}: \"null\""),
            ));
        }
        return;
    }
    if schema["x-kubernetes-int-or-string"] == json!(true) {
        if !(v.is_string() || v.is_i64() || v.is_u64()) {
            causes.push(Cause::type_invalid(path, v, "integer or string"));
        }
        return;
    }
    if let Some(ty) = schema["type"].as_str()
        && !type_ok(ty, v)
    {
        causes.push(Cause::type_invalid(path, v, ty));
        return;
    }
    if let Some(values) = schema["enum"].as_array()
        && !values.contains(v)
    {
        let supported: Vec<String> = values
            .iter()
            .map(|x| {
                x.as_str()
                    .map(String::from)
                    .unwrap_or_else(|| x.to_string())
            })
            .collect();
        let refs: Vec<&str> = supported.iter().map(String::as_str).collect();
        causes.push(Cause::not_supported(path, v, &refs));
    }
    let child = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    if let Some(obj) = v.as_object() {
        for r in schema["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !obj.contains_key(r) {
                causes.push(Cause::required(&child(r), ""));
            }
        }
        if let Some(props) = schema["properties"].as_object() {
            for (k, sub) in props {
                if let Some(val) = obj.get(k)
                    && !(path.is_empty() && (k == "metadata" || k == "apiVersion" || k == "kind"))
                {
                    walk(sub, val, &child(k), causes);
                }
            }
        }
        if let Some(extra) = schema.get("additionalProperties").filter(|a| a.is_object()) {
            for (k, val) in obj {
                walk(extra, val, &child(k), causes);
            }
        }
    }
    if let Some(items) = v.as_array()
        && let Some(item_schema) = schema.get("items")
    {
        for (i, it) in items.iter().enumerate() {
            walk(item_schema, it, &format!("{path}[{i}]"), causes);
        }
    }
}

/// Validates a custom resource against its version's openAPIV3Schema: types, required fields, enums.
pub fn validate(schema: &Value, obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    walk(schema, obj, "", &mut causes);
    causes
}

/// Removes fields the schema does not declare (structural pruning) unless preserved; returns their paths.
pub fn prune(schema: &Value, v: &mut Value, path: &str, dropped: &mut Vec<String>) {
    if schema["x-kubernetes-preserve-unknown-fields"] == json!(true) {
        return;
    }
    if let Some(obj) = v.as_object_mut() {
        let props = schema["properties"].as_object();
        let extra = schema
            .get("additionalProperties")
            .filter(|a| a.is_object() || **a == json!(true));
        let keys: Vec<String> = obj.keys().cloned().collect();
        for k in keys {
            let at_root_meta =
                path.is_empty() && matches!(k.as_str(), "apiVersion" | "kind" | "metadata");
            let p = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            match (props.and_then(|m| m.get(&k)), extra) {
                _ if at_root_meta => {}
                (Some(sub), _) => {
                    if let Some(child) = obj.get_mut(&k) {
                        prune(sub, child, &p, dropped);
                    }
                }
                (None, Some(e)) if e.is_object() => {
                    if let Some(child) = obj.get_mut(&k) {
                        prune(e, child, &p, dropped);
                    }
                }
                (None, Some(_)) => {}
                (None, None) if props.is_some() || schema["type"] == "object" => {
                    obj.remove(&k);
                    dropped.push(p);
                }
                (None, None) => {}
            }
        }
    } else if let (Some(items), Some(s)) = (v.as_array_mut(), schema.get("items")) {
        for (i, it) in items.iter_mut().enumerate() {
            prune(s, it, &format!("{path}[{i}]"), dropped);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Value {
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}}})
    }

    #[test]
    fn a_wrongly_typed_field_is_reported_like_upstream() {
        let causes = validate(&schema(), &json!({"spec": {"message": 5}}));
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "spec.message");
        assert_eq!(
            causes[0].message,
            "Invalid value: \"integer\": spec.message in body must be of type string: \"integer\""
        );
    }

    #[test]
    fn a_missing_required_field_is_reported() {
        let causes = validate(&schema(), &json!({"spec": {}}));
        assert_eq!(causes, vec![Cause::required("spec.message", "")]);
    }

    #[test]
    fn unknown_fields_are_pruned() {
        let mut v = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "a"}, "spec": {"message": "hi", "extra": 1}});
        let mut dropped = Vec::new();
        prune(&schema(), &mut v, "", &mut dropped);
        assert_eq!(dropped, vec!["spec.extra".to_string()]);
        assert!(v["spec"].get("extra").is_none());
    }

    #[test]
    fn a_crd_defines_one_entry_per_served_version() {
        let crd = json!({"metadata": {"name": "greetings.example.dev"}, "spec": {"group": "example.dev", "scope": "Namespaced",
            "names": {"plural": "greetings", "kind": "Greeting", "shortNames": ["gr"]},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}}}, {"name": "v0", "served": false}]}});
        let e = entries(&crd);
        assert_eq!(e.len(), 1);
        assert!(e[0].subresources.status);
        assert_eq!(e[0].storage_prefix, "/registry/example.dev/greetings");
        assert_eq!(e[0].singular, "greeting");
    }
}
