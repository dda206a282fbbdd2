//! Minimal OpenAPI v3 documents: one per group/version listing each resource's paths with the
//! `x-kubernetes-group-version-kind` extension and the `fieldValidation` parameter, which is what kubectl
//! reads to choose server-side field validation. No schemas (kubectl then uses its built-in types).

use serde_json::{Map, Value, json};

use super::registry::Registry;

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: the root listing every group/version document.
pub fn root(reg: &Registry) -> Value {
    let mut paths = Map::new();
    let mut gvs = vec![(String::new(), "v1".to_string())];
    for (g, vs) in reg.groups() {
        for v in vs {
            gvs.push((g.clone(), v));
        }
    }
    for (g, v) in gvs {
        let p = gv_path(&g, &v);
        paths.insert(
            p.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{p}")}),
        );
    }
    json!({"paths": paths})
}

/// `/openapi/v3/api/v1` or `/openapi/v3/apis/<g>/<v>`; None for an unknown group/version.
pub fn group_version(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let resources = reg.resources_of(group, version);
    if resources.is_empty() {
        return None;
    }
    let base = format!("/{}", gv_path(group, version));
    let param = json!([
        {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}}
    ]);
    let mut paths = Map::new();
    for r in resources {
        let gvk = json!({"group": r.group, "version": r.version, "kind": r.kind});
        let op = |action: &str| json!({"x-kubernetes-action": action, "x-kubernetes-group-version-kind": gvk, "parameters": param, "responses": {}});
        let coll = if r.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}", r.resource)
        } else {
            format!("{base}/{}", r.resource)
        };
        paths.insert(coll.clone(), json!({"get": op("list"), "post": op("post")}));
        paths.insert(format!("{coll}/{{name}}"), json!({"get": op("get"), "put": op("put"), "patch": op("patch"), "delete": op("delete")}));
    }
    Some(
        json!({"openapi": "3.0.0", "info": {"title": "Kubernetes (flotilla devcluster)", "version": "v1.36.2"}, "paths": paths, "components": {"schemas": {}}}),
    )
}
