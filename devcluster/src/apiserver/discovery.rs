//! Discovery documents (`/version`, `/api`, `/apis`, group and group/version lists, aggregated v2) built from
//! the registry, shaped like the recorded kube-apiserver v1.36 documents.

use serde_json::{Value, json};

use super::registry::{Registry, ResourceInfo};

/// `/version`.
pub fn version() -> Value {
    json!({
        "major": "1", "minor": "36", "emulationMajor": "1", "emulationMinor": "36",
        "minCompatibilityMajor": "1", "minCompatibilityMinor": "35",
        "gitVersion": "v1.36.2-devcluster", "gitCommit": "", "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z", "goVersion": "n/a (flotilla devcluster)", "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, if cfg!(target_arch = "x86_64") { "amd64" } else { std::env::consts::ARCH }),
    })
}

/// `/api`.
pub fn api(server_address: &str) -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]})
}

fn group_doc(name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({"name": name, "versions": vs, "preferredVersion": vs.first().cloned().unwrap_or(Value::Null)})
}

/// `/apis`.
pub fn apis(reg: &Registry) -> Value {
    let groups: Vec<Value> = reg
        .groups()
        .iter()
        .map(|(g, vs)| group_doc(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/<group>`.
pub fn group(reg: &Registry, name: &str) -> Option<Value> {
    let (g, vs) = reg.groups().into_iter().find(|(g, _)| g == name)?;
    let mut doc = group_doc(&g, &vs);
    let m = doc.as_object_mut()?;
    let mut out = serde_json::Map::new();
    out.insert("kind".into(), json!("APIGroup"));
    out.insert("apiVersion".into(), json!("v1"));
    out.append(m);
    Some(Value::Object(out))
}

fn main_verbs(r: &ResourceInfo) -> Vec<&'static str> {
    let mut v = vec!["create", "delete"];
    if r.deletecollection {
        v.push("deletecollection");
    }
    v.extend(["get", "list", "patch", "update", "watch"]);
    v
}

/// (name, kind, group, version, verbs) of each subresource of `r`.
fn subresources(
    r: &ResourceInfo,
) -> Vec<(
    &'static str,
    String,
    &'static str,
    &'static str,
    Vec<&'static str>,
)> {
    let mut out = Vec::new();
    if r.subresources.binding {
        out.push(("binding", "Binding".to_string(), "", "", vec!["create"]));
    }
    if r.subresources.eviction {
        out.push((
            "eviction",
            "Eviction".to_string(),
            "policy",
            "v1",
            vec!["create"],
        ));
    }
    if r.subresources.finalize {
        out.push(("finalize", r.kind.clone(), "", "", vec!["update"]));
    }
    if r.subresources.scale.is_some() {
        out.push((
            "scale",
            "Scale".to_string(),
            "autoscaling",
            "v1",
            vec!["get", "patch", "update"],
        ));
    }
    if r.subresources.status {
        out.push((
            "status",
            r.kind.clone(),
            "",
            "",
            vec!["get", "patch", "update"],
        ));
    }
    out
}

/// `/api/v1` or `/apis/<group>/<version>`.
pub fn resource_list(reg: &Registry, group: &str, version: &str) -> Value {
    let mut resources = Vec::new();
    let mut all = reg.resources_of(group, version);
    all.sort_by(|a, b| a.resource.cmp(&b.resource));
    for r in all {
        let mut main = json!({"name": r.resource, "singularName": r.singular, "namespaced": r.namespaced, "kind": r.kind, "verbs": main_verbs(&r)});
        if !r.short_names.is_empty() {
            main["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            main["categories"] = json!(r.categories);
        }
        resources.push(main);
        for (sub, kind, g, v, verbs) in subresources(&r) {
            let mut s = json!({"name": format!("{}/{sub}", r.resource), "singularName": "", "namespaced": r.namespaced});
            if !g.is_empty() {
                s["group"] = json!(g);
                s["version"] = json!(v);
            }
            s["kind"] = json!(kind);
            s["verbs"] = json!(verbs);
            resources.push(s);
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources})
}

fn aggregated_group(reg: &Registry, group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| {
            let mut rs = reg.resources_of(group, v);
            rs.sort_by(|a, b| a.resource.cmp(&b.resource));
            let resources: Vec<Value> = rs
                .iter()
                .map(|r| {
                    let mut e = json!({
                        "resource": r.resource,
                        "responseKind": {"group": "", "version": "", "kind": r.kind},
                        "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
                        "singularResource": r.singular,
                        "verbs": main_verbs(r),
                    });
                    if !r.short_names.is_empty() {
                        e["shortNames"] = json!(r.short_names);
                    }
                    if !r.categories.is_empty() {
                        e["categories"] = json!(r.categories);
                    }
                    let subs: Vec<Value> = subresources(r)
                        .into_iter()
                        .map(|(sub, kind, g, ver, verbs)| json!({"subresource": sub, "responseKind": {"group": g, "version": ver, "kind": kind}, "verbs": verbs}))
                        .collect();
                    if !subs.is_empty() {
                        e["subresources"] = json!(subs);
                    }
                    e
                })
                .collect();
            json!({"version": v, "resources": resources, "freshness": "Current"})
        })
        .collect();
    let mut item = json!({"metadata": {}, "versions": vs});
    if !group.is_empty() {
        item["metadata"] = json!({"name": group});
    }
    item
}

/// Aggregated discovery (apidiscovery.k8s.io/v2) for `/api` (`legacy`) or `/apis`.
pub fn aggregated(reg: &Registry, legacy: bool) -> Value {
    let items: Vec<Value> = if legacy {
        vec![aggregated_group(reg, "", &["v1".to_string()])]
    } else {
        reg.groups()
            .iter()
            .map(|(g, vs)| aggregated_group(reg, g, vs))
            .collect()
    };
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::builtins::builtins;

    fn fixture(name: &str) -> Option<Value> {
        let path = format!(
            "{}/../../shared/kube-fixtures/discovery/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
    }

    fn check_list(file: &str, group: &str) {
        let Some(f) = fixture(file) else { return };
        let reg = Registry::new(builtins());
        let ours = resource_list(&reg, group, "v1");
        for r in ours["resources"].as_array().unwrap() {
            let want = f["response"]["body"]["resources"]
                .as_array()
                .unwrap()
                .iter()
                .find(|w| w["name"] == r["name"]);
            let Some(want) = want else {
                panic!("{} is not served upstream", r["name"])
            };
            let mut want = want.clone();
            want.as_object_mut().unwrap().remove("storageVersionHash");
            assert_eq!(r, &want, "{file}");
        }
    }

    #[test]
    fn resource_lists_match_the_recorded_documents_for_what_we_serve() {
        check_list("api-v1.json", "");
        check_list("apis-apps-v1.json", "apps");
        check_list("apis-batch-v1.json", "batch");
        check_list("apis-coordination.k8s.io-v1.json", "coordination.k8s.io");
        check_list("apis-discovery.k8s.io-v1.json", "discovery.k8s.io");
        check_list("apis-events.k8s.io-v1.json", "events.k8s.io");
        check_list("apis-apiextensions.k8s.io-v1.json", "apiextensions.k8s.io");
    }
}
