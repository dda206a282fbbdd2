//! Response shapes chosen by the Accept header: the object itself, PartialObjectMetadata(List), or a
//! server-side-printed Table (Name, Age and a few kind-specific columns) for kubectl.

use serde_json::{Value, json};

use super::meta;
use super::registry::ResourceInfo;

/// How to render objects for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Render {
    /// As stored.
    Full,
    /// `as=PartialObjectMetadata` / `PartialObjectMetadataList`.
    Metadata,
    /// `as=Table`.
    Table,
}

impl Render {
    /// Picks the first supported alternative of an Accept header (JSON always works; protobuf is answered
    /// with JSON when JSON is acceptable too, see [`Render::only_protobuf`]).
    pub fn from_accept(accept: Option<&str>) -> Self {
        for alt in accept.unwrap_or("").split(',') {
            let alt = alt.replace(' ', "");
            if alt.contains("as=Table") {
                return Render::Table;
            }
            if alt.contains("as=PartialObjectMetadata") {
                return Render::Metadata;
            }
            if alt.starts_with("application/json")
                || alt.starts_with("*/*")
                || alt.starts_with("application/vnd.kubernetes.protobuf")
            {
                return Render::Full;
            }
        }
        Render::Full
    }

    /// True when every alternative of the Accept header is protobuf (with or without parameters such
    /// as `;stream=watch` or `;as=Table`): devcluster writes JSON only, so such a request gets 406.
    /// No header, `*/*`, or any JSON alternative (kubectl sends
    /// `application/vnd.kubernetes.protobuf,application/json`) is answered in JSON.
    pub fn only_protobuf(accept: Option<&str>) -> bool {
        let mut alternatives = accept
            .unwrap_or("")
            .split(',')
            .map(|alt| alt.split(';').next().unwrap_or("").trim())
            .filter(|media| !media.is_empty())
            .peekable();
        alternatives.peek().is_some()
            && alternatives.all(|media| media.eq_ignore_ascii_case(super::protobuf::MEDIA_TYPE))
    }

    /// Renders one object (GET, watch events).
    pub fn object(&self, info: &ResourceInfo, obj: &Value) -> Value {
        match self {
            Render::Full => obj.clone(),
            Render::Metadata => {
                json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]})
            }
            Render::Table => table(
                info,
                std::slice::from_ref(obj),
                json!({"resourceVersion": obj["metadata"]["resourceVersion"]}),
            ),
        }
    }

    /// Renders a list response.
    pub fn list(&self, info: &ResourceInfo, list: Value) -> Value {
        match self {
            Render::Full => list,
            Render::Metadata => {
                let items: Vec<Value> = list["items"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|o| json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]}))
                    .collect();
                json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": list["metadata"], "items": items})
            }
            Render::Table => {
                let items = list["items"].as_array().cloned().unwrap_or_default();
                table(info, &items, list["metadata"].clone())
            }
        }
    }
}

fn age(obj: &Value) -> String {
    let Some(secs) = obj["metadata"]["creationTimestamp"]
        .as_str()
        .and_then(meta::age_secs)
    else {
        return "<unknown>".into();
    };
    let s = secs.max(0);
    match s {
        s if s < 120 => format!("{s}s"),
        s if s < 600 => format!("{}m{}s", s / 60, s % 60),
        s if s < 3 * 3600 => format!("{}m", s / 60),
        s if s < 8 * 3600 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        s if s < 2 * 86400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or(0)
}

/// (column name, type, cell fn) for a kind, between Name and Age.
/// A column: name, OpenAPI type, cell function.
type Column = (String, &'static str, Box<dyn Fn(&Value) -> Value>);

fn columns(info: &ResourceInfo) -> Vec<Column> {
    let col = |n: &str, ty: &'static str, f: Box<dyn Fn(&Value) -> Value>| (n.to_string(), ty, f);
    if info.custom {
        return info
            .printer_columns
            .iter()
            .map(|c| {
                let path = c["jsonPath"].as_str().unwrap_or("").to_string();
                let ptr: String = path
                    .trim_start_matches('.')
                    .split('.')
                    .map(|s| format!("/{s}"))
                    .collect();
                let ty: &'static str = match c["type"].as_str() {
                    Some("integer") => "integer",
                    Some("number") => "number",
                    Some("boolean") => "boolean",
                    Some("date") => "date",
                    _ => "string",
                };
                (
                    c["name"].as_str().unwrap_or("").to_string(),
                    ty,
                    Box::new(move |o: &Value| o.pointer(&ptr).cloned().unwrap_or(Value::Null))
                        as Box<dyn Fn(&Value) -> Value>,
                )
            })
            .collect();
    }
    match info.kind.as_str() {
        "Deployment" => vec![
            col(
                "Ready",
                "string",
                Box::new(|o| {
                    json!(format!(
                        "{}/{}",
                        int(&o["status"]["readyReplicas"]),
                        int(&o["spec"]["replicas"])
                    ))
                }),
            ),
            col(
                "Up-to-date",
                "integer",
                Box::new(|o| json!(int(&o["status"]["updatedReplicas"]))),
            ),
            col(
                "Available",
                "integer",
                Box::new(|o| json!(int(&o["status"]["availableReplicas"]))),
            ),
        ],
        "ReplicaSet" | "ReplicationController" => vec![
            col(
                "Desired",
                "integer",
                Box::new(|o| json!(int(&o["spec"]["replicas"]))),
            ),
            col(
                "Current",
                "integer",
                Box::new(|o| json!(int(&o["status"]["replicas"]))),
            ),
            col(
                "Ready",
                "integer",
                Box::new(|o| json!(int(&o["status"]["readyReplicas"]))),
            ),
        ],
        "Pod" => vec![
            col(
                "Ready",
                "string",
                Box::new(|o| {
                    let total = o["spec"]["containers"].as_array().map_or(0, Vec::len);
                    let ready = o["status"]["containerStatuses"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter(|c| c["ready"] == json!(true))
                        .count();
                    json!(format!("{ready}/{total}"))
                }),
            ),
            col(
                "Status",
                "string",
                Box::new(|o| {
                    if meta::deleting(o) {
                        json!("Terminating")
                    } else {
                        o["status"]["phase"].clone()
                    }
                }),
            ),
            col(
                "Restarts",
                "string",
                Box::new(|o| {
                    json!(
                        o["status"]["containerStatuses"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .map(|c| int(&c["restartCount"]))
                            .sum::<i64>()
                            .to_string()
                    )
                }),
            ),
        ],
        "Namespace" => vec![col(
            "Status",
            "string",
            Box::new(|o| o["status"]["phase"].clone()),
        )],
        "Node" => vec![col(
            "Status",
            "string",
            Box::new(|o| {
                let ready = o["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True");
                json!(if ready { "Ready" } else { "NotReady" })
            }),
        )],
        "ConfigMap" => vec![col(
            "Data",
            "string",
            Box::new(|o| {
                json!(
                    o["data"].as_object().map_or(0, |m| m.len())
                        + o["binaryData"].as_object().map_or(0, |m| m.len())
                )
            }),
        )],
        "Service" => vec![
            col("Type", "string", Box::new(|o| o["spec"]["type"].clone())),
            col(
                "Cluster-IP",
                "string",
                Box::new(|o| o["spec"]["clusterIP"].clone()),
            ),
        ],
        "Job" => vec![col(
            "Status",
            "string",
            Box::new(|o| {
                json!(
                    if int(&o["status"]["succeeded"]) >= int(&o["spec"]["completions"]).max(1) {
                        "Complete"
                    } else {
                        "Running"
                    }
                )
            }),
        )],
        _ => Vec::new(),
    }
}

fn table(info: &ResourceInfo, items: &[Value], metadata: Value) -> Value {
    let cols = columns(info);
    let mut defs = vec![
        json!({"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace.", "priority": 0}),
    ];
    for (n, ty, _) in &cols {
        defs.push(json!({"name": n, "type": ty, "format": "", "description": "", "priority": 0}));
    }
    defs.push(json!({"name": "Age", "type": "string", "format": "", "description": "CreationTimestamp is a timestamp representing the server time when this object was created.", "priority": 0}));
    let rows: Vec<Value> = items
        .iter()
        .map(|o| {
            let mut cells = vec![json!(meta::name(o))];
            cells.extend(cols.iter().map(|(_, _, f)| f(o)));
            cells.push(json!(age(o)));
            json!({"cells": cells, "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]}})
        })
        .collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "columnDefinitions": defs, "rows": rows})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_accept_header_without_any_json_alternative_is_protobuf_only() {
        let p = "application/vnd.kubernetes.protobuf";
        assert!(Render::only_protobuf(Some(p)));
        assert!(Render::only_protobuf(Some(
            "application/vnd.kubernetes.protobuf;stream=watch"
        )));
        assert!(!Render::only_protobuf(Some(
            "application/vnd.kubernetes.protobuf,application/json"
        )));
        assert!(!Render::only_protobuf(Some(
            "application/vnd.kubernetes.protobuf, */*"
        )));
        assert!(!Render::only_protobuf(Some("application/json")));
        assert!(!Render::only_protobuf(None));
        assert!(!Render::only_protobuf(Some("")));
    }
}
