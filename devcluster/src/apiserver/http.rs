//! The thin HTTP layer: path routing to discovery or to a resource verb, body limits, content types,
//! and rendering of results — no storage logic lives here.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::auth::UserInfo;
use super::discovery;
use super::managed_fields;
use super::objects::{self, DeleteOptions, Part, PatchKind, Target};
use super::protobuf;
use super::query::Query;
use super::registry::ResourceInfo;
use super::render::Render;
use super::state::ApiState;
use super::status::ApiError;

/// Request bodies above this are refused with 413, like upstream's default.
pub const MAX_BODY: usize = 3 * 1024 * 1024;

pub(super) fn json_response(code: StatusCode, v: &Value) -> Response {
    let body = serde_json::to_vec(v).unwrap_or_default();
    let mut r = (code, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-cache, private"),
    );
    r
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// Every API request enters here.
pub async fn dispatch(State(st): State<ApiState>, req: Request) -> Response {
    let req = match st.auth.admit(&st, req).await {
        Ok(super::auth::Admitted::Request(req)) => req,
        Ok(super::auth::Admitted::Answered(response)) => return response,
        Err(e) => return e.into_response(),
    };
    match route(&st, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn read_body(body: Body) -> Result<Vec<u8>, ApiError> {
    match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(b) => Ok(b.to_vec()),
        Err(_) => Err(ApiError::too_large(MAX_BODY)),
    }
}

/// The body of a POST or PUT of a whole object, as JSON: a JSON body as sent, a protobuf body of a
/// built-in kind decoded into the JSON it stands for (so both take the same path from here on).
///
/// # Errors
/// 415 for any other content type (and for protobuf aimed at a custom resource, which has no protobuf
/// form), 413 for a body above [`MAX_BODY`], 400 for a protobuf body that does not decode.
async fn object_body(
    info: &ResourceInfo,
    content_type: &str,
    body: Body,
) -> Result<Vec<u8>, ApiError> {
    if content_type == protobuf::MEDIA_TYPE && !info.custom {
        let bytes = read_body(body).await?;
        return protobuf::to_json(&bytes, &info.api_version(), &info.kind).map_err(|e| {
            ApiError::bad_request(format!(
                "the object provided is unrecognized (must be of type {}): {e}",
                info.kind
            ))
        });
    }
    if !is_json(content_type) {
        return Err(ApiError::unsupported_body(info.custom));
    }
    read_body(body).await
}

/// Whether a request body of `content_type` is read as JSON (no type, JSON, or anything).
fn is_json(content_type: &str) -> bool {
    content_type.is_empty() || content_type == "application/json" || content_type == "*/*"
}

/// The body of a DELETE (its `DeleteOptions`), as JSON: a JSON body as sent, a protobuf one decoded.
///
/// # Errors
/// 415 for any other content type, 413 above [`MAX_BODY`], 400 for a protobuf body that does not decode.
async fn delete_options_body(content_type: &str, body: Body) -> Result<Vec<u8>, ApiError> {
    let bytes = read_body(body).await?;
    if content_type == protobuf::MEDIA_TYPE {
        return protobuf::delete_options_to_json(&bytes)
            .map_err(|e| ApiError::bad_request(format!("error decoding DeleteOptions: {e}")));
    }
    if !is_json(content_type) {
        return Err(ApiError::unsupported_body(false));
    }
    Ok(bytes)
}

fn aggregated_wanted(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| {
        a.split(',')
            .next()
            .is_some_and(|first| first.contains("as=APIGroupDiscoveryList"))
            || (a.contains("as=APIGroupDiscoveryList")
                && !a.contains("application/json,")
                && !a.ends_with("application/json"))
    })
}

fn aggregated_response(v: &Value) -> Response {
    let body = serde_json::to_vec(v).unwrap_or_default();
    let etag = format!("\"{:X}\"", fxhash(&body));
    let mut r = (StatusCode::OK, body).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
        ),
    );
    h.insert(
        header::CACHE_CONTROL,
        http::HeaderValue::from_static("public"),
    );
    h.insert(header::VARY, http::HeaderValue::from_static("Accept"));
    if let Ok(v) = http::HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    r
}

fn fxhash(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf29ce484222325u64, |h, c| {
        (h ^ u64::from(*c)).wrapping_mul(0x100000001b3)
    })
}

async fn route(st: &ApiState, req: Request) -> Result<Response, ApiError> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().trim_end_matches('/').to_string();
    let mut query = Query::parse(parts.uri.query());
    let accept = header(&parts.headers, "accept").map(String::from);
    let method = parts.method.clone();
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let get_only = |v: Value| -> Result<Response, ApiError> {
        if method == Method::GET {
            Ok(json_response(StatusCode::OK, &v))
        } else {
            Err(ApiError::method_not_allowed())
        }
    };
    match segs.as_slice() {
        ["version"] => return get_only(discovery::version()),
        ["healthz"] | ["readyz"] | ["livez"] => return Ok((StatusCode::OK, "ok").into_response()),
        ["api"] => {
            if aggregated_wanted(accept.as_deref()) {
                return Ok(aggregated_response(&discovery::aggregated(
                    &st.registry,
                    true,
                )));
            }
            return get_only(discovery::api(&st.address));
        }
        ["apis"] => {
            if aggregated_wanted(accept.as_deref()) {
                return Ok(aggregated_response(&discovery::aggregated(
                    &st.registry,
                    false,
                )));
            }
            return get_only(discovery::apis(&st.registry));
        }
        ["openapi", "v3"] => return get_only(super::openapi::root(&st.registry)),
        ["openapi", "v3", "api", "v1"] => {
            return super::openapi::group_version(&st.registry, "", "v1")
                .ok_or_else(ApiError::page_not_found)
                .and_then(get_only);
        }
        ["openapi", "v3", "apis", g, v] => {
            return super::openapi::group_version(&st.registry, g, v)
                .ok_or_else(ApiError::page_not_found)
                .and_then(get_only);
        }
        ["api", "v1"] => return get_only(discovery::resource_list(&st.registry, "", "v1")),
        ["api", v, ..] if *v != "v1" => return Err(ApiError::page_not_found()),
        ["apis", g] => {
            return match discovery::group(&st.registry, g) {
                Some(doc) => get_only(doc),
                None => Err(ApiError::page_not_found()),
            };
        }
        ["apis", g, v] => {
            if !st.registry.has_group(g) {
                return Err(ApiError::page_not_found());
            }
            if !st.registry.has_group_version(g, v) {
                return Err(ApiError::resource_not_found());
            }
            return get_only(discovery::resource_list(&st.registry, g, v));
        }
        _ => {}
    }
    let (group, version, rest): (&str, &str, &[&str]) = match segs.as_slice() {
        ["api", "v1", rest @ ..] => ("", "v1", rest),
        ["apis", g, v, rest @ ..] => {
            if !st.registry.has_group(g) {
                return Err(ApiError::page_not_found());
            }
            if !st.registry.has_group_version(g, v) {
                return Err(ApiError::resource_not_found());
            }
            (g, v, rest)
        }
        _ => return Err(ApiError::page_not_found()),
    };
    let mut rest = rest.to_vec();
    if rest.first() == Some(&"watch") {
        rest.remove(0);
        query.set("watch", "true");
    }
    // Resolve namespace / resource / name / subresource.
    let (namespace, resource, name, sub): (Option<String>, &str, Option<String>, Option<String>) =
        match rest.as_slice() {
            ["namespaces", ns] if group.is_empty() => {
                (None, "namespaces", Some((*ns).to_string()), None)
            }
            ["namespaces", ns, s @ ("status" | "finalize")] if group.is_empty() => (
                None,
                "namespaces",
                Some((*ns).to_string()),
                Some((*s).to_string()),
            ),
            ["namespaces", ns, res] => (Some((*ns).to_string()), *res, None, None),
            ["namespaces", ns, res, n] => {
                (Some((*ns).to_string()), *res, Some((*n).to_string()), None)
            }
            ["namespaces", ns, res, n, s] => (
                Some((*ns).to_string()),
                *res,
                Some((*n).to_string()),
                Some((*s).to_string()),
            ),
            [res] => (None, *res, None, None),
            [res, n] => (None, *res, Some((*n).to_string()), None),
            [res, n, s] => (None, *res, Some((*n).to_string()), Some((*s).to_string())),
            _ => return Err(ApiError::resource_not_found()),
        };
    // Like upstream, the response format is settled before anything is done.
    if Render::only_protobuf(accept.as_deref()) {
        return Err(ApiError::not_acceptable());
    }
    if group.is_empty()
        && resource == "bindings"
        && namespace.is_some()
        && name.is_none()
        && method == Method::POST
    {
        let bytes = read_body(body).await?;
        let b: Value =
            serde_json::from_slice(&bytes).map_err(|e| ApiError::bad_request(e.to_string()))?;
        let info = st
            .registry
            .lookup("", "v1", "pods")
            .ok_or_else(ApiError::resource_not_found)?;
        let t = Target::new(
            info,
            namespace,
            b["metadata"]["name"].as_str().map(String::from),
            query,
            "unknown".into(),
        );
        let v = objects::bind(st, &t, &bytes).await?;
        return Ok(json_response(StatusCode::CREATED, &v));
    }
    let info = st
        .registry
        .lookup(group, version, resource)
        .ok_or_else(ApiError::resource_not_found)?;
    if info.namespaced != namespace.is_some()
        && !(info.namespaced && name.is_none() && sub.is_none())
    {
        return Err(ApiError::resource_not_found());
    }
    let manager = managed_fields::manager(
        query.get("fieldManager"),
        header(&parts.headers, "user-agent"),
    );
    let render = Render::from_accept(accept.as_deref());
    let content_type = header(&parts.headers, "content-type")
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    let user = parts.extensions.get::<UserInfo>().cloned();
    let t = Target::new(info.clone(), namespace, name, query, manager).with_user(user);
    let result = resource_op(st, &t, sub, method, &content_type, render, body).await;
    let warnings = t.warnings.lock().clone();
    result.map(|mut r| {
        for w in warnings {
            if let Ok(v) =
                http::HeaderValue::from_str(&format!("299 - {}", serde_json::Value::String(w)))
            {
                r.headers_mut().append(header::WARNING, v);
            }
        }
        r
    })
}

async fn resource_op(
    st: &ApiState,
    t: &Target,
    sub: Option<String>,
    method: Method,
    content_type: &str,
    render: Render,
    body: Body,
) -> Result<Response, ApiError> {
    let info = t.info.clone();
    let content_type = content_type.to_string();
    match (t.name.is_some(), sub.as_deref(), &method) {
        (false, None, &Method::GET) => {
            if t.query.flag("watch") {
                return super::watch::watch(st, t, render).await;
            }
            let list = objects::list(st, t).await?;
            Ok(json_response(StatusCode::OK, &render.list(&info, list)))
        }
        (false, None, &Method::POST) => {
            let bytes = object_body(&info, &content_type, body).await?;
            if t.namespace.is_none() && info.namespaced {
                return Err(ApiError::method_not_allowed());
            }
            let v = objects::create(st, t, &bytes).await?;
            Ok(json_response(
                StatusCode::CREATED,
                &render.object(&info, &v),
            ))
        }
        (false, None, &Method::DELETE) if info.deletecollection => {
            let bytes = delete_options_body(&content_type, body).await?;
            let opts = DeleteOptions::parse(&t.query, &bytes)?;
            let v = objects::delete_collection(st, t, &opts).await?;
            Ok(json_response(StatusCode::OK, &v))
        }
        (false, None, _) => Err(ApiError::method_not_allowed()),
        (true, None, &Method::GET) => {
            if t.query.flag("watch") {
                return super::watch::watch(st, t, render).await;
            }
            let v = objects::get(st, t).await?;
            Ok(json_response(StatusCode::OK, &render.object(&info, &v)))
        }
        (true, None | Some("status") | Some("finalize"), &Method::PUT) => {
            let part = match sub.as_deref() {
                None => Part::Main,
                Some("status") if info.subresources.status => Part::Status,
                Some("finalize") if info.subresources.finalize => Part::Finalize,
                _ => return Err(ApiError::resource_not_found()),
            };
            let bytes = object_body(&info, &content_type, body).await?;
            let v = objects::update(st, t, part, &bytes).await?;
            Ok(json_response(StatusCode::OK, &render.object(&info, &v)))
        }
        (true, None | Some("status"), &Method::PATCH) => {
            let part = match sub.as_deref() {
                None => Part::Main,
                Some(_) if info.subresources.status => Part::Status,
                _ => return Err(ApiError::resource_not_found()),
            };
            let kind = patch_kind(&content_type)?;
            let bytes = read_body(body).await?;
            let (v, created) = objects::patch(st, t, part, kind, &bytes).await?;
            let code = if created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            Ok(json_response(code, &render.object(&info, &v)))
        }
        (true, None, &Method::DELETE) => {
            let bytes = delete_options_body(&content_type, body).await?;
            let opts = DeleteOptions::parse(&t.query, &bytes)?;
            let v = objects::delete(st, t, &opts).await?;
            let v = if v["kind"] == "Status" {
                v
            } else {
                render.object(&info, &v)
            };
            Ok(json_response(StatusCode::OK, &v))
        }
        (true, None, _) => Err(ApiError::method_not_allowed()),
        (true, Some("status"), &Method::GET) if info.subresources.status => {
            let v = objects::get(st, t).await?;
            Ok(json_response(StatusCode::OK, &v))
        }
        (true, Some("scale"), m) if info.subresources.scale.is_some() => {
            let current = objects::get(st, t).await?;
            match *m {
                Method::GET => Ok(json_response(
                    StatusCode::OK,
                    &objects::to_scale(&info, &current),
                )),
                Method::PUT => {
                    let bytes = read_body(body).await?;
                    let want: Value = serde_json::from_slice(&bytes)
                        .map_err(|e| ApiError::bad_request(e.to_string()))?;
                    let v = objects::update_scale(st, t, |_| Ok(want.clone())).await?;
                    Ok(json_response(StatusCode::OK, &v))
                }
                Method::PATCH => {
                    let kind = patch_kind(&content_type)?;
                    let bytes = read_body(body).await?;
                    let p: Value = serde_json::from_slice(&bytes)
                        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
                    let v = objects::update_scale(st, t, |mut scale| {
                        match kind {
                            PatchKind::Json => super::patch::json(&mut scale, &p)
                                .map_err(|_| ApiError::bad_request("invalid JSON patch"))?,
                            PatchKind::Strategic | PatchKind::Apply => {
                                super::patch::strategic(&mut scale, &p)
                            }
                            PatchKind::Merge => super::patch::merge(&mut scale, &p),
                        }
                        Ok(scale)
                    })
                    .await?;
                    Ok(json_response(StatusCode::OK, &v))
                }
                _ => Err(ApiError::method_not_allowed()),
            }
        }
        (true, Some("binding"), &Method::POST) if info.subresources.binding => {
            let bytes = read_body(body).await?;
            let v = objects::bind(st, t, &bytes).await?;
            Ok(json_response(StatusCode::CREATED, &v))
        }
        (true, Some("eviction"), &Method::POST) if info.subresources.eviction => {
            let bytes = read_body(body).await?;
            super::eviction::evict(st, t, &bytes).await
        }
        (true, Some(s), _) if known_sub(&info, s) => Err(ApiError::method_not_allowed()),
        _ => Err(ApiError::resource_not_found()),
    }
}

fn known_sub(info: &super::registry::ResourceInfo, s: &str) -> bool {
    match s {
        "status" => info.subresources.status,
        "scale" => info.subresources.scale.is_some(),
        "binding" => info.subresources.binding,
        "eviction" => info.subresources.eviction,
        "finalize" => info.subresources.finalize,
        _ => false,
    }
}

fn patch_kind(ct: &str) -> Result<PatchKind, ApiError> {
    match ct {
        "application/merge-patch+json" => Ok(PatchKind::Merge),
        "application/json-patch+json" => Ok(PatchKind::Json),
        "application/strategic-merge-patch+json" => Ok(PatchKind::Strategic),
        "application/apply-patch+yaml" | "application/apply-patch+json" => Ok(PatchKind::Apply),
        _ => Err(ApiError::unsupported_patch()),
    }
}

/// `POST /flotilla/v1/compact` (devcluster-only): compacts etcd at the current revision.
pub async fn compact(State(st): State<ApiState>) -> Response {
    match super::server::compact(&st).await {
        Ok(rev) => json_response(StatusCode::OK, &json!({"revision": rev})),
        Err(e) => ApiError::internal(e.to_string()).into_response(),
    }
}
