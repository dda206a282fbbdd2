//! The generic verbs over the one storage path: create, get, list, update (main / status / finalize), patch,
//! delete and deletecollection — every kind goes through here; kind-specific behaviour comes from registry data.

use std::sync::Arc;

use serde_json::{Value, json};

use super::auth::UserInfo;
use super::continue_token;
use super::crd;
use super::managed_fields;
use super::meta;
use super::patch;
use super::query::Query;
use super::registry::{GcDefault, Generation, ResourceInfo};
use super::selector::{FieldSelector, LabelSelector};
use super::state::ApiState;
use super::status::{ApiError, Cause};
use super::storage::StorageError;
use super::validation;

/// One resolved request against a resource.
pub struct Target {
    /// The resource.
    pub info: Arc<ResourceInfo>,
    /// Namespace from the URL.
    pub namespace: Option<String>,
    /// Object name from the URL.
    pub name: Option<String>,
    /// Query parameters.
    pub query: Query,
    /// Field manager for writes.
    pub manager: String,
    /// Warnings for the response (`Warning: 299 - "..."` headers).
    pub warnings: parking_lot::Mutex<Vec<String>>,
    /// Who asked, when an HTTP request did (None for devcluster's own writes, which, like
    /// upstream's loopback client, may write any RBAC object).
    pub user: Option<UserInfo>,
}

impl Target {
    /// A target with no warnings yet.
    pub fn new(
        info: Arc<ResourceInfo>,
        namespace: Option<String>,
        name: Option<String>,
        query: Query,
        manager: String,
    ) -> Self {
        Target {
            info,
            namespace,
            name,
            query,
            manager,
            warnings: parking_lot::Mutex::new(Vec::new()),
            user: None,
        }
    }

    /// The same target, asked for by `user`.
    pub fn with_user(mut self, user: Option<UserInfo>) -> Self {
        self.user = user;
        self
    }
}

/// Which part of an object a write may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The main resource: status is kept from storage when the kind has a status subresource.
    Main,
    /// `/status`: only status changes.
    Status,
    /// `/finalize` (namespaces): only spec.finalizers changes.
    Finalize,
}

pub(crate) fn internal(e: StorageError) -> ApiError {
    match e {
        StorageError::Compacted => {
            ApiError::expired("The resourceVersion for the provided list is too old.")
        }
        other => ApiError::internal(other.to_string()),
    }
}

fn internal_group(group: &str) -> &str {
    if group.is_empty() {
        "core"
    } else {
        group.split('.').next().unwrap_or(group)
    }
}

/// Decodes a JSON body meant for `info`, checking kind/apiVersion like upstream's decoder.
///
/// # Errors
/// 400 BadRequest for unparsable JSON, a non-object, or the wrong kind/apiVersion.
pub fn decode_body(t: &Target, body: &[u8]) -> Result<Value, ApiError> {
    let info = &t.info;
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        let snippet: String = String::from_utf8_lossy(body).chars().take(30).collect();
        let why = if e.is_eof() { "unexpected end of JSON input".to_string() } else { e.to_string() };
        ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type {}): couldn't get version/kind; json parse error: {why} ({snippet} ...)",
            info.kind
        ))
    })?;
    let Some(m) = v.as_object() else {
        return Err(ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type {}): couldn't get version/kind; json parse error: json: cannot unmarshal {} into Go value of type struct {{ APIVersion string \"json:\\\"apiVersion,omitempty\\\"\"; Kind string \"json:\\\"kind,omitempty\\\"\" }}",
            info.kind,
            if v.is_array() { "array" } else { "value" }
        )));
    };
    let kind = m.get("kind").and_then(Value::as_str).unwrap_or("");
    let api_version = m.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let version = api_version.rsplit('/').next().unwrap_or("");
    let kind_ok = kind.is_empty() || kind == info.kind;
    let version_ok = api_version.is_empty() || api_version == info.api_version();
    if !kind_ok || !version_ok {
        let k = if kind.is_empty() { &info.kind } else { kind };
        return Err(ApiError::bad_request(format!(
            "{k} in version \"{version}\" cannot be handled as a {}: converting ({version}.{k}) to ({}.{}): unknown conversion",
            info.kind,
            internal_group(&info.group),
            info.kind
        )));
    }
    if let Err(e) = super::typed::check(info, &v) {
        return Err(ApiError::bad_request(format!(
            "{} in version \"{}\" cannot be handled as a {}: {e}",
            info.kind, info.version, info.kind
        )));
    }
    let mut v = v;
    let unknown = super::typed::drop_unknown(info, &mut v);
    if !unknown.is_empty() {
        let listed: Vec<String> = unknown
            .iter()
            .map(|f| format!("unknown field \"{f}\""))
            .collect();
        match t.query.get("fieldValidation") {
            Some("Strict") => {
                return Err(ApiError::bad_request(format!(
                    "{} in version \"{}\" cannot be handled as a {}: strict decoding error: {}",
                    info.kind,
                    info.version,
                    info.kind,
                    listed.join(", ")
                )));
            }
            Some("Ignore") => {}
            _ => t.warnings.lock().extend(listed),
        }
    }
    Ok(v)
}

fn stamp_type(info: &ResourceInfo, v: &mut Value) {
    if let Some(m) = v.as_object_mut() {
        let mut out = serde_json::Map::new();
        out.insert("kind".into(), json!(info.kind));
        out.insert("apiVersion".into(), json!(info.api_version()));
        for (k, val) in std::mem::take(m) {
            if k != "kind" && k != "apiVersion" {
                out.insert(k, val);
            }
        }
        *m = out;
    }
}

fn invalid(info: &ResourceInfo, name: &str, causes: Vec<Cause>) -> ApiError {
    ApiError::invalid(&info.group, &info.kind, name, causes)
}

/// Validates `obj` (a create when `old` is None, else an update of `old`): metadata, the kind's rules,
/// its pod templates' metadata, update-only rules, a custom resource's schema.
fn validate(info: &ResourceInfo, obj: &Value, old: Option<&Value>) -> Result<(), ApiError> {
    let mut causes = validation::metadata(info.name_rule, obj);
    causes.extend((info.validate)(obj));
    for pointer in info.pod_templates {
        if let Some(template) = obj.pointer(pointer).filter(|t| t.is_object()) {
            let field = pointer.trim_start_matches('/').replace('/', ".");
            causes.extend(validation::pod_template(&field, template));
        }
    }
    if let Some(old) = old {
        causes.extend((info.validate_update)(obj, old));
    }
    if let Some(schema) = &info.schema {
        causes.extend(crd::validate(schema, obj));
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(invalid(info, meta::name(obj), causes))
    }
}

async fn check_namespace(
    st: &ApiState,
    info: &ResourceInfo,
    ns: &str,
    name: &str,
) -> Result<(), ApiError> {
    let key = format!("/registry/namespaces/{ns}");
    match st.storage.get(&key).await.map_err(internal)? {
        None => Err(ApiError::not_found(
            super::status::Gr {
                group: "",
                resource: "namespaces",
            },
            ns,
        )),
        Some(n) if meta::deleting(&n.value) || n.value["status"]["phase"] == "Terminating" => {
            Err(ApiError::forbidden(
                info.gr(),
                name,
                &format!(
                    "unable to create new content in namespace {ns} because it is being terminated"
                ),
                vec![Cause {
                    reason: "NamespaceTerminating",
                    message: format!("namespace {ns} is being terminated"),
                    field: "metadata.namespace".into(),
                }],
            ))
        }
        Some(_) => Ok(()),
    }
}

fn is_pod(info: &ResourceInfo) -> bool {
    info.group.is_empty() && info.resource == "pods"
}

fn strip_for_list(info: &ResourceInfo, mut v: Value) -> Value {
    if !info.custom
        && let Some(m) = v.as_object_mut()
    {
        m.remove("kind");
        m.remove("apiVersion");
    }
    v
}

/// Parses the selectors of a list or watch.
///
/// # Errors
/// 400 for malformed selectors.
pub fn selectors(t: &Target) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let labels = LabelSelector::parse(t.query.get("labelSelector").unwrap_or(""))
        .map_err(ApiError::bad_request)?;
    let fields = FieldSelector::parse(
        t.query.get("fieldSelector").unwrap_or(""),
        &t.info.field_labels,
    )
    .map_err(ApiError::bad_request)?;
    Ok((labels, fields))
}

/// POST on a collection.
///
/// # Errors
/// Upstream's create failures (400/403/404/409/422), 500 on etcd trouble.
pub async fn create(st: &ApiState, t: &Target, body: &[u8]) -> Result<Value, ApiError> {
    create_as(st, t, body, false).await
}

/// POST, or an apply patch that creates (`apply`: managedFields records operation Apply with exactly the
/// applied fields).
///
/// # Errors
/// See [`create`].
pub async fn create_as(
    st: &ApiState,
    t: &Target,
    body: &[u8],
    apply: bool,
) -> Result<Value, ApiError> {
    let info = &t.info;
    let mut obj = decode_body(t, body)?;
    let url_ns = t.namespace.clone().unwrap_or_default();
    if info.namespaced {
        let body_ns = meta::namespace(&obj).to_string();
        if !body_ns.is_empty() && body_ns != url_ns {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        meta::set(&mut obj, "namespace", json!(url_ns));
    } else {
        meta::remove(&mut obj, "namespace");
    }
    stamp_type(info, &mut obj);
    let generate = obj["metadata"]["generateName"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let explicit_name = meta::name(&obj).to_string();
    for attempt in 0..8 {
        let mut o = obj.clone();
        if explicit_name.is_empty() && !generate.is_empty() {
            meta::set(&mut o, "name", json!(meta::generated_name(&generate)));
        }
        match create_one(st, t, o, apply).await {
            Err(e)
                if e.code == 409
                    && explicit_name.is_empty()
                    && !generate.is_empty()
                    && attempt < 7 =>
            {
                continue;
            }
            other => return other,
        }
    }
    Err(ApiError::internal("could not generate a unique name"))
}

async fn create_one(
    st: &ApiState,
    t: &Target,
    mut obj: Value,
    apply: bool,
) -> Result<Value, ApiError> {
    let info = &t.info;
    let name = meta::name(&obj).to_string();
    let applied = apply
        .then(|| managed_fields::fieldset(&obj, !info.subresources.status, false))
        .flatten();
    (info.defaulter)(&mut obj);
    if let Some(schema) = &info.schema {
        crd::prune(schema, &mut obj, "", &mut Vec::new());
    }
    let set = if apply {
        applied
    } else {
        managed_fields::fieldset(&obj, !info.subresources.status, false)
    };
    for k in [
        "uid",
        "resourceVersion",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "generation",
        "selfLink",
    ] {
        meta::remove(&mut obj, k);
    }
    meta::set(&mut obj, "uid", json!(meta::uid()));
    meta::set(&mut obj, "creationTimestamp", json!(meta::now()));
    if info.generation != Generation::None {
        meta::set(&mut obj, "generation", json!(1));
    }
    (info.prepare_create)(&mut obj);
    if info.custom && info.subresources.status {
        super::defaults::drop_status(&mut obj);
    }
    super::auth::admit_rbac_write(st, t, None, &obj).await?;
    validate(info, &obj, None)?;
    if info.namespaced {
        check_namespace(st, info, t.namespace.as_deref().unwrap_or(""), &name).await?;
    }
    // Held until the pod is stored (or the create fails), so no other pod create of the namespace
    // counts against a quota in between.
    let _admitted = if is_pod(info) {
        super::quota::admit_pod(st, t.namespace.as_deref().unwrap_or(""), &name).await?
    } else {
        None
    };
    let mut claims = Vec::new();
    if info.allocates_service_ips {
        claims = super::services::allocate(st, &mut obj).await?;
    }
    managed_fields::record(
        &mut obj,
        &t.manager,
        if apply { "Apply" } else { "Update" },
        &info.api_version(),
        set,
        None,
    );
    reorder_metadata(&mut obj);
    let key = info.key(t.namespace.as_deref(), &name);
    if t.query.get("dryRun") == Some("All") {
        super::services::release(st, &claims).await;
        return Ok(obj);
    }
    match st.storage.create(&key, &obj).await.map_err(internal)? {
        Some(rev) => {
            meta::set(&mut obj, "resourceVersion", json!(rev.to_string()));
            reorder_metadata(&mut obj);
            if info.group == "apiextensions.k8s.io" {
                crd::serve(&st.registry, &obj);
            }
            Ok(obj)
        }
        None => {
            super::services::release(st, &claims).await;
            Err(ApiError::already_exists(info.gr(), &name))
        }
    }
}

/// Puts metadata keys in upstream's order (name, generateName, namespace, uid, resourceVersion, generation,
/// creationTimestamp, deletion*, labels, annotations, ownerReferences, finalizers, managedFields).
pub fn reorder_metadata(obj: &mut Value) {
    const ORDER: &[&str] = &[
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    ];
    let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let mut old = std::mem::take(m);
    for k in ORDER {
        if let Some(v) = old.remove(*k) {
            m.insert((*k).to_string(), v);
        }
    }
    m.append(&mut old);
}

/// GET of one object.
///
/// # Errors
/// 404 when absent.
pub async fn get(st: &ApiState, t: &Target) -> Result<Value, ApiError> {
    let name = t.name.as_deref().unwrap_or("");
    let key = t.info.key(t.namespace.as_deref(), name);
    match st.storage.get(&key).await.map_err(internal)? {
        Some(s) => Ok(s.value),
        None => Err(ApiError::not_found(t.info.gr(), name)),
    }
}

fn parse_limit(q: &Query) -> Result<Option<i64>, ApiError> {
    match q.get("limit") {
        None | Some("") => Ok(None),
        Some(s) => match s.parse::<i64>() {
            Ok(n) if n > 0 => Ok(Some(n)),
            Ok(_) => Ok(None),
            Err(_) => Err(ApiError::bad_request(format!(
                "strconv.ParseInt: parsing \"{s}\": invalid syntax"
            ))),
        },
    }
}

/// Parses a resourceVersion parameter.
///
/// # Errors
/// 400 for a non-numeric value.
pub fn parse_rv(s: &str) -> Result<i64, ApiError> {
    s.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| {
        ApiError::bad_request(format!(
            "resourceVersion: Invalid value: \"{s}\": strconv.ParseUint: parsing \"{s}\": invalid syntax"
        ))
    })
}

/// LIST of a collection: selectors, limit/continue on a consistent etcd snapshot, resourceVersion semantics.
///
/// # Errors
/// 400 for bad parameters, 410 for a compacted continue/exact revision.
pub async fn list(st: &ApiState, t: &Target) -> Result<Value, ApiError> {
    let info = &t.info;
    let (labels, fields) = selectors(t)?;
    let mut limit = parse_limit(&t.query)?;
    let prefix = info.collection_prefix(t.namespace.as_deref());
    let prefix_base = prefix.trim_end_matches('/').to_string();
    let rv_param = t.query.get("resourceVersion").unwrap_or("");
    let mut at: Option<i64> = None;
    let mut start: Option<String> = None;
    if let Some(c) = t.query.get("continue").filter(|c| !c.is_empty()) {
        let tok = continue_token::decode(c).map_err(ApiError::bad_request)?;
        let rel = if tok.start.starts_with('/') {
            tok.start.clone()
        } else {
            format!("/{}", tok.start)
        };
        start = Some(format!("{prefix_base}{rel}"));
        if tok.rv > 0 {
            at = Some(tok.rv);
        }
    } else if rv_param == "0" {
        limit = None;
    } else if !rv_param.is_empty() {
        let rv = parse_rv(rv_param)?;
        if t.query.get("resourceVersionMatch") == Some("Exact") {
            at = Some(rv);
        }
    }
    let filtered = !labels.is_empty() || !fields.is_empty();
    let keep = |v: &Value| labels.matches(v) && fields.matches(v);
    let want = limit.map(|l| usize::try_from(l).unwrap_or(usize::MAX));
    let page = match st
        .storage
        .list_page(&prefix, start.as_deref(), at, want, keep)
        .await
    {
        Ok(p) => p,
        Err(StorageError::Compacted) if t.query.get("continue").is_some() => {
            let rel = start
                .as_deref()
                .unwrap_or("")
                .strip_prefix(&prefix_base)
                .unwrap_or("")
                .trim_start_matches('/');
            let token = continue_token::encode(-1, rel);
            return Err(ApiError::expired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.").with_metadata(json!({"continue": token})));
        }
        Err(e) => return Err(internal(e)),
    };
    let items: Vec<Value> = page
        .items
        .into_iter()
        .map(|s| strip_for_list(info, s.value))
        .collect();
    let next = page.more.as_ref().map(|m| m.last_key.clone());
    let remaining = page.more.as_ref().map_or(0, |m| m.remaining);
    let mut md = json!({"resourceVersion": page.rev.to_string()});
    if let Some(k) = next {
        let rel = k.strip_prefix(&prefix_base).unwrap_or(&k).to_string();
        md["continue"] = json!(continue_token::encode(page.rev, &format!("{rel}\u{0}")));
        if !filtered {
            md["remainingItemCount"] = json!(remaining);
        }
    }
    Ok(
        json!({"kind": info.list_kind(), "apiVersion": info.api_version(), "metadata": md, "items": items}),
    )
}

fn without_volatile(v: &Value) -> Value {
    let mut v = v.clone();
    meta::remove(&mut v, "managedFields");
    meta::remove(&mut v, "resourceVersion");
    v
}

fn changed(a: &Value, b: &Value, key: &str) -> bool {
    a.get(key) != b.get(key)
}

fn bump_generation(info: &ResourceInfo, old: &Value, new: &mut Value) {
    let bump = match info.generation {
        Generation::None => false,
        Generation::Spec => changed(old, new, "spec"),
        Generation::SpecAndAnnotations => {
            changed(old, new, "spec") || changed(&old["metadata"], &new["metadata"], "annotations")
        }
        Generation::AllButMetadataAndStatus => {
            let strip = |v: &Value| {
                let mut v = v.clone();
                if let Some(m) = v.as_object_mut() {
                    m.remove("metadata");
                    m.remove("status");
                }
                v
            };
            strip(old) != strip(new)
        }
    };
    let deleting_now = meta::deleting(new) && !meta::deleting(old);
    if info.generation != Generation::None && (bump || deleting_now) {
        let g = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
        meta::set(new, "generation", json!(g));
    }
}

/// The shared update pipeline: `mutate` builds the candidate from the current object; preconditions,
/// subresource field resets, immutable metadata, finalizer rules, generation, validation, no-op detection,
/// managedFields and the compare-and-swap write happen here. Retries when the candidate carries no
/// resourceVersion of its own.
///
/// # Errors
/// 404/409/422 like upstream, 500 on etcd trouble.
pub async fn guaranteed_update<F>(
    st: &ApiState,
    t: &Target,
    part: Part,
    operation: &str,
    fields: Option<&Value>,
    mut mutate: F,
) -> Result<Value, ApiError>
where
    F: FnMut(&Value) -> Result<Value, ApiError>,
{
    let info = &t.info;
    let name = t.name.clone().unwrap_or_default();
    let key = info.key(t.namespace.as_deref(), &name);
    for _ in 0..16 {
        let Some(cur) = st.storage.get(&key).await.map_err(internal)? else {
            return Err(ApiError::not_found(info.gr(), &name));
        };
        let current = cur.value;
        let mut new = mutate(&current)?;
        if !new.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request must be an object",
            ));
        }
        let body_name = meta::name(&new).to_string();
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        if info.namespaced {
            let body_ns = meta::namespace(&new).to_string();
            if !body_ns.is_empty() && Some(body_ns.as_str()) != t.namespace.as_deref() {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
        }
        let requested_rv = new["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let current_rv = cur.rev.to_string();
        if !requested_rv.is_empty() && requested_rv != current_rv {
            return Err(ApiError::stale(info.gr(), &name));
        }
        let body_for_fields = new.clone();
        stamp_type(info, &mut new);
        match part {
            Part::Main => {
                (info.defaulter)(&mut new);
                if let Some(schema) = &info.schema {
                    crd::prune(schema, &mut new, "", &mut Vec::new());
                }
                if info.subresources.status {
                    match current.get("status") {
                        Some(s) => new["status"] = s.clone(),
                        None => {
                            if let Some(m) = new.as_object_mut() {
                                m.remove("status");
                            }
                        }
                    }
                }
                if info.namespace_lifecycle {
                    new["spec"] = current["spec"].clone();
                }
            }
            Part::Status => {
                // Upstream's status strategies reset the spec (and, for workloads, the labels) of
                // built-in kinds but keep other metadata edits, so controllers write annotations with
                // their status (the deployment controller's revision) without bumping the generation.
                // A custom resource's status subresource ignores everything but the status.
                let status = new.get("status").cloned();
                let annotations =
                    (!info.custom).then(|| new["metadata"].get("annotations").cloned());
                new = current.clone();
                match annotations {
                    Some(Some(a)) => meta::set(&mut new, "annotations", a),
                    Some(None) => meta::remove(&mut new, "annotations"),
                    None => {}
                }
                match status {
                    Some(s) => new["status"] = s,
                    None => {
                        if let Some(m) = new.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
            }
            Part::Finalize => {
                let fins = new["spec"]["finalizers"].clone();
                new = current.clone();
                match fins.as_array() {
                    Some(list) if !list.is_empty() => new["spec"]["finalizers"] = fins.clone(),
                    _ => {
                        if let Some(spec) = new["spec"].as_object_mut() {
                            spec.remove("finalizers");
                        }
                    }
                }
            }
        }
        for k in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "namespace",
            "name",
        ] {
            match current["metadata"].get(k) {
                Some(v) => meta::set(&mut new, k, v.clone()),
                None => meta::remove(&mut new, k),
            }
        }
        if new["metadata"].get("managedFields").is_none()
            && let Some(mf) = current["metadata"].get("managedFields")
        {
            meta::set(&mut new, "managedFields", mf.clone());
        }
        if meta::deleting(&current) {
            let old = meta::finalizers(&current);
            let added: Vec<String> = meta::finalizers(&new)
                .into_iter()
                .filter(|f| !old.contains(f))
                .collect();
            if !added.is_empty() {
                let cause = Cause::forbidden(
                    "metadata.finalizers",
                    &format!(
                        "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                        added
                            .iter()
                            .map(|f| format!("\"{f}\""))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                );
                return Err(invalid(info, &name, vec![cause]));
            }
        }
        // Status writes never bump the generation, whatever metadata they carry along.
        if part != Part::Status {
            if part == Part::Main {
                (info.prepare_update)(&mut new, &current);
            }
            bump_generation(info, &current, &mut new);
        }
        super::auth::admit_rbac_write(st, t, Some(&current), &new).await?;
        validate(info, &new, Some(&current))?;
        if info.allocates_service_ips && part == Part::Main {
            super::services::keep_allocations(&current, &mut new);
        }
        if without_volatile(&new) == without_volatile(&current) {
            return Ok(current);
        }
        let subresource = match part {
            Part::Main => None,
            Part::Status => Some("status"),
            Part::Finalize => Some("finalize"),
        };
        let set = managed_fields::fieldset(
            fields.unwrap_or(&body_for_fields),
            !info.subresources.status,
            part == Part::Status,
        );
        managed_fields::record(
            &mut new,
            &t.manager,
            operation,
            &info.api_version(),
            set,
            subresource,
        );
        meta::set(&mut new, "resourceVersion", json!(current_rv));
        reorder_metadata(&mut new);
        if t.query.get("dryRun") == Some("All") {
            return Ok(new);
        }
        let finished = meta::deleting(&new)
            && meta::finalizers(&new).is_empty()
            && !(info.namespace_lifecycle && namespace_spec_finalizers(&new));
        if finished {
            // Upstream answers with the final state at the old resourceVersion; watchers see only DELETED.
            match st.storage.delete(&key, cur.rev).await.map_err(internal)? {
                Some(_) => {
                    after_removal(st, info, &new).await;
                    return Ok(new);
                }
                None => continue,
            }
        }
        match st
            .storage
            .update(&key, &new, cur.rev)
            .await
            .map_err(internal)?
        {
            Some(rev) => {
                meta::set(&mut new, "resourceVersion", json!(rev.to_string()));
                if info.group == "apiextensions.k8s.io" {
                    crd::serve(&st.registry, &new);
                }
                return Ok(new);
            }
            None if requested_rv.is_empty() => continue,
            None => return Err(ApiError::stale(info.gr(), &name)),
        }
    }
    Err(ApiError::conflict(
        info.gr(),
        &name,
        "too many concurrent writes; please retry",
    ))
}

fn namespace_spec_finalizers(ns: &Value) -> bool {
    ns["spec"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty())
}

async fn after_removal(st: &ApiState, info: &ResourceInfo, obj: &Value) {
    if info.allocates_service_ips {
        super::services::release_of(st, obj).await;
    }
}

/// PUT on an object (main resource, `/status` or `/finalize`).
///
/// # Errors
/// See [`guaranteed_update`].
pub async fn update(st: &ApiState, t: &Target, part: Part, body: &[u8]) -> Result<Value, ApiError> {
    let obj = decode_body(t, body)?;
    guaranteed_update(st, t, part, "Update", None, |_| Ok(obj.clone())).await
}

/// The PATCH flavours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    /// application/merge-patch+json
    Merge,
    /// application/json-patch+json
    Json,
    /// application/strategic-merge-patch+json
    Strategic,
    /// application/apply-patch+yaml
    Apply,
}

/// PATCH on an object (main resource or `/status`).
///
/// # Errors
/// 400 for a malformed patch, 422 when a JSON patch operation fails, plus [`guaranteed_update`]'s.
pub async fn patch(
    st: &ApiState,
    t: &Target,
    part: Part,
    kind: PatchKind,
    body: &[u8],
) -> Result<(Value, bool), ApiError> {
    let info = &t.info;
    let p: Value = if kind == PatchKind::Apply {
        super::yaml::parse(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?
    };
    if kind == PatchKind::Apply {
        if t.query.get("fieldManager").is_none_or(str::is_empty) {
            return Err(ApiError::invalid(
                "meta.k8s.io",
                "PatchOptions",
                "",
                vec![Cause::required(
                    "fieldManager",
                    "is required for apply patch",
                )],
            ));
        }
        let key = info.key(t.namespace.as_deref(), t.name.as_deref().unwrap_or(""));
        if part == Part::Main && st.storage.get(&key).await.map_err(internal)?.is_none() {
            let mut body = p.clone();
            if meta::name(&body).is_empty() {
                meta::set(&mut body, "name", json!(t.name.clone().unwrap_or_default()));
            }
            let bytes = serde_json::to_vec(&body).unwrap_or_default();
            let created = create_as(st, t, &bytes, true).await?;
            return Ok((created, true));
        }
    }
    if kind == PatchKind::Json && !p.is_array() {
        return Err(ApiError::bad_request(
            "error decoding patch: json: cannot unmarshal object into Go value of type []handlers.jsonPatchOp",
        ));
    }
    if kind != PatchKind::Json && !p.is_object() {
        return Err(ApiError::bad_request(
            "error decoding patch: json: cannot unmarshal into Go value of type map[string]interface {}",
        ));
    }
    let operation = if kind == PatchKind::Apply {
        "Apply"
    } else {
        "Update"
    };
    let custom = info.custom;
    let updated = guaranteed_update(st, t, part, operation, p.is_object().then_some(&p), |cur| {
        // The patch applies to the current object; a resourceVersion only counts as a precondition when the
        // patch itself sets one.
        let mut doc = cur.clone();
        meta::remove(&mut doc, "resourceVersion");
        match kind {
            PatchKind::Merge => patch::merge(&mut doc, &p),
            PatchKind::Strategic if custom => {
                return Err(ApiError::unsupported_patch());
            }
            PatchKind::Strategic => patch::strategic(&mut doc, &p),
            PatchKind::Apply if custom => patch::merge(&mut doc, &p),
            PatchKind::Apply => patch::strategic(&mut doc, &p),
            PatchKind::Json => {
                if let Err(not_array) = patch::json(&mut doc, &p) {
                    return Err(if not_array {
                        ApiError::bad_request("error decoding patch: json: cannot unmarshal object into Go value of type []handlers.jsonPatchOp")
                    } else {
                        ApiError::invalid_plain("the server rejected our request due to an error in our request")
                    });
                }
            }
        }
        Ok(doc)
    })
    .await?;
    Ok((updated, false))
}

/// DELETE options from the query and the optional DeleteOptions body.
#[derive(Debug, Clone)]
pub struct DeleteOptions {
    propagation: Option<String>,
    grace: Option<i64>,
    uid: Option<String>,
    rv: Option<String>,
}

impl DeleteOptions {
    /// Reads options from the query and body (body wins for preconditions, query for the rest when both).
    ///
    /// # Errors
    /// 400 for an unparsable body.
    pub fn parse(q: &Query, body: &[u8]) -> Result<Self, ApiError> {
        let b: Value = if body.iter().all(u8::is_ascii_whitespace) {
            json!({})
        } else {
            serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding DeleteOptions: {e}")))?
        };
        let mut propagation = q
            .get("propagationPolicy")
            .map(String::from)
            .or_else(|| b["propagationPolicy"].as_str().map(String::from));
        let orphan = q
            .get("orphanDependents")
            .map(|v| v == "true")
            .or_else(|| b["orphanDependents"].as_bool());
        if propagation.is_none() {
            propagation = orphan.map(|o| {
                if o {
                    "Orphan".to_string()
                } else {
                    "Background".to_string()
                }
            });
        }
        if let Some(p) = &propagation
            && !matches!(p.as_str(), "Orphan" | "Background" | "Foreground")
        {
            return Err(ApiError::invalid(
                "meta.k8s.io",
                "DeleteOptions",
                "",
                vec![Cause::not_supported(
                    "propagationPolicy",
                    &json!(p),
                    &["Foreground", "Background", "Orphan", "nil"],
                )],
            ));
        }
        let grace = q
            .get("gracePeriodSeconds")
            .and_then(|g| g.parse().ok())
            .or_else(|| b["gracePeriodSeconds"].as_i64());
        Ok(DeleteOptions {
            propagation,
            grace,
            uid: b["preconditions"]["uid"].as_str().map(String::from),
            rv: b["preconditions"]["resourceVersion"]
                .as_str()
                .map(String::from),
        })
    }
}

impl DeleteOptions {
    /// The `preconditions.resourceVersion`, if any.
    pub fn resource_version(&self) -> Option<&str> {
        self.rv.as_deref()
    }

    /// The same options with `preconditions.resourceVersion` set to `rv` (the eviction subresource
    /// pins the pod it checked this way).
    pub fn with_resource_version(mut self, rv: String) -> Self {
        self.rv = Some(rv);
        self
    }

    /// The `preconditions.uid`, if any.
    pub fn uid(&self) -> Option<&str> {
        self.uid.as_deref()
    }
}

fn success_status(info: &ResourceInfo, obj: &Value) -> Value {
    let mut details = json!({"name": meta::name(obj)});
    if !info.group.is_empty() {
        details["group"] = json!(info.group);
    }
    details["kind"] = json!(info.resource);
    details["uid"] = obj["metadata"]["uid"].clone();
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
}

/// DELETE of one object: preconditions, finalizers, propagation policy, graceful pods, namespace lifecycle.
/// Returns the body to send (the object when it is only marked or graceful, else a Success Status).
///
/// # Errors
/// 404 when absent, 409 on failed preconditions.
pub async fn delete(st: &ApiState, t: &Target, opts: &DeleteOptions) -> Result<Value, ApiError> {
    let info = &t.info;
    let name = t.name.clone().unwrap_or_default();
    let key = info.key(t.namespace.as_deref(), &name);
    for _ in 0..16 {
        let Some(cur) = st.storage.get(&key).await.map_err(internal)? else {
            return Err(ApiError::not_found(info.gr(), &name));
        };
        let current = cur.value;
        if let Some(uid) = &opts.uid
            && current["metadata"]["uid"].as_str() != Some(uid)
        {
            let have = current["metadata"]["uid"].as_str().unwrap_or("");
            return Err(ApiError::conflict(
                info.gr(),
                &name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {have}"
                ),
            ));
        }
        if let Some(rv) = &opts.rv
            && *rv != cur.rev.to_string()
        {
            return Err(ApiError::conflict(
                info.gr(),
                &name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    cur.rev
                ),
            ));
        }
        let mut new = current.clone();
        let removable;
        if info.namespace_lifecycle {
            if !meta::deleting(&current) {
                meta::set(&mut new, "deletionTimestamp", json!(meta::now()));
                meta::set(&mut new, "deletionGracePeriodSeconds", json!(0));
                new["status"]["phase"] = json!("Terminating");
                removable = false;
            } else {
                removable =
                    !namespace_spec_finalizers(&current) && meta::finalizers(&current).is_empty();
                if !removable {
                    return Ok(current);
                }
            }
        } else if info.group == "apiextensions.k8s.io"
            && info.resource == "customresourcedefinitions"
        {
            return crd::delete(st, t, &key, current, cur.rev).await;
        } else {
            let graceful = info.graceful_delete
                && current["spec"]["nodeName"]
                    .as_str()
                    .is_some_and(|n| !n.is_empty());
            let grace = if graceful {
                opts.grace
                    .unwrap_or_else(|| {
                        current["spec"]["terminationGracePeriodSeconds"]
                            .as_i64()
                            .unwrap_or(30)
                    })
                    .max(0)
            } else {
                0
            };
            let mut fins = meta::finalizers(&current);
            let policy = opts
                .propagation
                .clone()
                .unwrap_or_else(|| match info.gc_default {
                    GcDefault::Orphan => "Orphan".to_string(),
                    GcDefault::Background => "Background".to_string(),
                });
            let wanted = match policy.as_str() {
                "Foreground" => Some("foregroundDeletion"),
                "Orphan" => Some("orphan"),
                _ => None,
            };
            if let Some(f) = wanted {
                if !fins.iter().any(|x| x == f) {
                    fins.push(f.to_string());
                }
                // Switching policy replaces the other propagation finalizer, as upstream does.
                fins.retain(|x| x == f || (x != "foregroundDeletion" && x != "orphan"));
            }
            if grace > 0 {
                let already = meta::deleting(&current)
                    && current["metadata"]["deletionGracePeriodSeconds"]
                        .as_i64()
                        .is_some_and(|g| g <= grace);
                if already {
                    return Ok(current);
                }
                meta::set(&mut new, "deletionTimestamp", json!(meta::now_plus(grace)));
                meta::set(&mut new, "deletionGracePeriodSeconds", json!(grace));
                if !fins.is_empty() {
                    meta::set(&mut new, "finalizers", json!(fins));
                }
                removable = false;
            } else if !fins.is_empty() {
                if meta::deleting(&current)
                    && meta::finalizers(&current) == fins
                    && current["metadata"]["deletionGracePeriodSeconds"] == json!(0)
                {
                    return Ok(current);
                }
                if !meta::deleting(&current) {
                    meta::set(&mut new, "deletionTimestamp", json!(meta::now()));
                }
                meta::set(&mut new, "deletionGracePeriodSeconds", json!(0));
                meta::set(&mut new, "finalizers", json!(fins));
                removable = false;
            } else {
                removable = true;
                if info.graceful_delete {
                    // Pods: upstream writes the grace-0 mark first (watchers see MODIFIED, then DELETED).
                    if !meta::deleting(&current) {
                        meta::set(&mut new, "deletionTimestamp", json!(meta::now()));
                    }
                    meta::set(&mut new, "deletionGracePeriodSeconds", json!(0));
                    if t.query.get("dryRun") != Some("All") {
                        match st
                            .storage
                            .update(&key, &new, cur.rev)
                            .await
                            .map_err(internal)?
                        {
                            Some(rev) => {
                                match st.storage.delete(&key, rev).await.map_err(internal)? {
                                    // The answer carries the deletion's revision, as upstream's does
                                    // (fixtures kcm/40, 44): a client waiting for its delete to be
                                    // seen waits for the DELETED event, not the grace-0 mark.
                                    Some(deleted) => {
                                        meta::set(
                                            &mut new,
                                            "resourceVersion",
                                            json!(deleted.to_string()),
                                        );
                                        reorder_metadata(&mut new);
                                        return Ok(new);
                                    }
                                    None => continue,
                                }
                            }
                            None => continue,
                        }
                    }
                    return Ok(new);
                }
            }
        }
        if t.query.get("dryRun") == Some("All") {
            return Ok(if removable {
                success_status(info, &current)
            } else {
                new
            });
        }
        if removable {
            match st.storage.delete(&key, cur.rev).await.map_err(internal)? {
                Some(_) => {
                    after_removal(st, info, &current).await;
                    return Ok(if info.namespace_lifecycle {
                        current
                    } else {
                        success_status(info, &current)
                    });
                }
                None => continue,
            }
        }
        bump_generation(info, &current, &mut new);
        reorder_metadata(&mut new);
        match st
            .storage
            .update(&key, &new, cur.rev)
            .await
            .map_err(internal)?
        {
            Some(rev) => {
                meta::set(&mut new, "resourceVersion", json!(rev.to_string()));
                return Ok(new);
            }
            None => continue,
        }
    }
    Err(ApiError::conflict(
        info.gr(),
        &name,
        "too many concurrent writes; please retry",
    ))
}

/// DELETE on a collection: deletes every object matching the selectors (each like a single DELETE).
///
/// # Errors
/// 400 for bad selectors, 500 on etcd trouble.
pub async fn delete_collection(
    st: &ApiState,
    t: &Target,
    opts: &DeleteOptions,
) -> Result<Value, ApiError> {
    let info = &t.info;
    let (labels, fields) = selectors(t)?;
    let page = st
        .storage
        .list(&info.collection_prefix(t.namespace.as_deref()), None, None)
        .await
        .map_err(internal)?;
    let mut items = Vec::new();
    for s in page
        .items
        .into_iter()
        .filter(|s| labels.matches(&s.value) && fields.matches(&s.value))
    {
        let one = Target::new(
            info.clone(),
            Some(meta::namespace(&s.value).to_string()).filter(|n| !n.is_empty()),
            Some(meta::name(&s.value).to_string()),
            t.query.clone(),
            t.manager.clone(),
        );
        match delete(st, &one, opts).await {
            Ok(_) => items.push(strip_for_list(info, s.value)),
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(
        json!({"kind": info.list_kind(), "apiVersion": info.api_version(), "metadata": {"resourceVersion": page.rev.to_string()}, "items": items}),
    )
}

/// The autoscaling/v1 Scale view of a scalable object.
pub fn to_scale(info: &ResourceInfo, obj: &Value) -> Value {
    let Some(paths) = &info.subresources.scale else {
        return Value::Null;
    };
    let selector = paths
        .label_selector
        .as_deref()
        .and_then(|p| obj.pointer(p))
        .and_then(|s| LabelSelector::from_object(s).ok())
        .map(|s| s.to_query())
        .unwrap_or_default();
    let mut md = json!({
        "name": meta::name(obj),
        "namespace": meta::namespace(obj),
        "uid": obj["metadata"]["uid"],
        "resourceVersion": obj["metadata"]["resourceVersion"],
        "creationTimestamp": obj["metadata"]["creationTimestamp"],
    });
    if !info.namespaced
        && let Some(m) = md.as_object_mut()
    {
        m.remove("namespace");
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": md,
        "spec": {"replicas": meta::pointer_i64(obj, &paths.spec_replicas).unwrap_or(0)},
        "status": {"replicas": meta::pointer_i64(obj, &paths.status_replicas).unwrap_or(0), "selector": selector},
    })
}

/// PUT/PATCH of `/scale`: `scale_of` turns the current Scale into the desired one.
///
/// # Errors
/// [`guaranteed_update`]'s.
pub async fn update_scale<F>(st: &ApiState, t: &Target, mut scale_of: F) -> Result<Value, ApiError>
where
    F: FnMut(Value) -> Result<Value, ApiError>,
{
    let info = t.info.clone();
    let Some(paths) = info.subresources.scale.clone() else {
        return Err(ApiError::resource_not_found());
    };
    let obj = guaranteed_update(st, t, Part::Main, "Update", None, |cur| {
        let want = scale_of(to_scale(&info, cur))?;
        let replicas = want["spec"]["replicas"].as_i64().unwrap_or(0);
        let rv = want["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let mut new = cur.clone();
        meta::set(
            &mut new,
            "resourceVersion",
            json!(
                if rv == cur["metadata"]["resourceVersion"].as_str().unwrap_or("") {
                    String::new()
                } else {
                    rv
                }
            ),
        );
        if let Some(slot) = new.pointer_mut(&paths.spec_replicas) {
            *slot = json!(replicas);
        } else {
            new["spec"]["replicas"] = json!(replicas);
        }
        Ok(new)
    })
    .await?;
    Ok(to_scale(&info, &obj))
}

/// POST `pods/<name>/binding` (or `bindings`): sets spec.nodeName once.
///
/// # Errors
/// 409 when already bound, 404 when the pod is gone.
pub async fn bind(st: &ApiState, t: &Target, body: &[u8]) -> Result<Value, ApiError> {
    let b: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding Binding: {e}")))?;
    let node = b["target"]["name"].as_str().unwrap_or("").to_string();
    if node.is_empty() {
        return Err(ApiError::invalid(
            "",
            "Binding",
            meta::name(&b),
            vec![Cause::required("target.name", "")],
        ));
    }
    let name = t.name.clone().unwrap_or_default();
    guaranteed_update(st, t, Part::Main, "Update", None, |cur| {
        if cur["spec"]["nodeName"]
            .as_str()
            .is_some_and(|n| !n.is_empty())
        {
            return Err(ApiError::conflict(
                t.info.gr(),
                &name,
                &format!(
                    "pod {name} is already assigned to node \"{}\"",
                    cur["spec"]["nodeName"].as_str().unwrap_or("")
                ),
            ));
        }
        let mut new = cur.clone();
        meta::remove(&mut new, "resourceVersion");
        new["spec"]["nodeName"] = json!(node);
        Ok(new)
    })
    .await?;
    Ok(
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    )
}
