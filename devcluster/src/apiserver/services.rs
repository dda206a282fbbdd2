//! Service clusterIP (10.0.0.0/24) and nodePort (30000-32767) allocation. Each allocation is a key under
//! `/registry/ranges/...` claimed with a create-if-absent transaction, so concurrent creates never share one.

use rand::Rng;
use serde_json::{Value, json};

use super::objects::internal;
use super::state::ApiState;
use super::status::{ApiError, Cause};

const IP_PREFIX: &str = "/registry/ranges/serviceips/";
const PORT_PREFIX: &str = "/registry/ranges/servicenodeports/";

fn owner(obj: &Value) -> String {
    format!("{}/{}", super::meta::namespace(obj), super::meta::name(obj))
}

/// Allocates the clusterIP(s) and node ports a new Service needs; returns the claimed keys (release them if
/// the create fails).
///
/// # Errors
/// 422 when a requested IP or port is taken or the range is full.
pub async fn allocate(st: &ApiState, obj: &mut Value) -> Result<Vec<String>, ApiError> {
    let mut claims = Vec::new();
    let ty = obj["spec"]["type"]
        .as_str()
        .unwrap_or("ClusterIP")
        .to_string();
    let who = owner(obj);
    if ty != "ExternalName" {
        let requested = obj["spec"]["clusterIP"].as_str().unwrap_or("").to_string();
        if requested == "None" {
            obj["spec"]["clusterIPs"] = json!(["None"]);
        } else if !requested.is_empty() {
            let key = format!("{IP_PREFIX}{requested}");
            if !st.storage.claim(&key, &who).await.map_err(internal)? {
                return Err(ApiError::invalid(
                    "",
                    "Service",
                    super::meta::name(obj),
                    vec![Cause::invalid(
                        "spec.clusterIPs",
                        &json!([requested]),
                        "failed to allocate IP: provided IP is already allocated",
                    )],
                ));
            }
            claims.push(key);
            obj["spec"]["clusterIPs"] = json!([requested]);
        } else {
            let start = rand::rng().random_range(1..255u32);
            let mut got = None;
            for i in 0..254u32 {
                let host = (start + i - 1) % 254 + 1;
                let ip = format!("10.0.0.{host}");
                // .1 is the kubernetes Service upstream; keep it free.
                if host == 1 {
                    continue;
                }
                let key = format!("{IP_PREFIX}{ip}");
                if st.storage.claim(&key, &who).await.map_err(internal)? {
                    claims.push(key);
                    got = Some(ip);
                    break;
                }
            }
            let Some(ip) = got else {
                release(st, &claims).await;
                return Err(ApiError::internal(
                    "failed to allocate a serviceIP: range is full",
                ));
            };
            obj["spec"]["clusterIP"] = json!(ip);
            obj["spec"]["clusterIPs"] = json!([ip]);
        }
    }
    if ty == "NodePort" || ty == "LoadBalancer" {
        let n = obj["spec"]["ports"].as_array().map_or(0, Vec::len);
        for i in 0..n {
            if let Some(p) = obj["spec"]["ports"][i]["nodePort"].as_i64() {
                let key = format!("{PORT_PREFIX}{p}");
                if !st.storage.claim(&key, &who).await.map_err(internal)? {
                    release(st, &claims).await;
                    return Err(ApiError::invalid(
                        "",
                        "Service",
                        super::meta::name(obj),
                        vec![Cause::invalid(
                            &format!("spec.ports[{i}].nodePort"),
                            &json!(p),
                            "provided port is already allocated",
                        )],
                    ));
                }
                claims.push(key);
                continue;
            }
            let start = rand::rng().random_range(30000..32768i64);
            let mut got = None;
            for j in 0..2768 {
                let port = 30000 + (start - 30000 + j) % 2768;
                let key = format!("{PORT_PREFIX}{port}");
                if st.storage.claim(&key, &who).await.map_err(internal)? {
                    claims.push(key);
                    got = Some(port);
                    break;
                }
            }
            let Some(port) = got else {
                release(st, &claims).await;
                return Err(ApiError::internal(
                    "failed to allocate a nodePort: range is full",
                ));
            };
            obj["spec"]["ports"][i]["nodePort"] = json!(port);
        }
    }
    Ok(claims)
}

/// Releases claimed keys (best effort: a leaked claim only shrinks the range).
pub async fn release(st: &ApiState, claims: &[String]) {
    for c in claims {
        if let Err(e) = st.storage.release(c).await {
            tracing::warn!(key = %c, error = %e, "could not release a service allocation");
        }
    }
}

/// Releases what a removed Service held.
pub async fn release_of(st: &ApiState, obj: &Value) {
    let mut keys = Vec::new();
    for ip in obj["spec"]["clusterIPs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if ip != "None" {
            keys.push(format!("{IP_PREFIX}{ip}"));
        }
    }
    for p in obj["spec"]["ports"].as_array().into_iter().flatten() {
        if let Some(n) = p["nodePort"].as_i64() {
            keys.push(format!("{PORT_PREFIX}{n}"));
        }
    }
    release(st, &keys).await;
}

/// An update keeps the allocated clusterIP(s) and node ports when the body omits them.
pub fn keep_allocations(old: &Value, new: &mut Value) {
    for k in ["clusterIP", "clusterIPs"] {
        if new["spec"].get(k).is_none_or(Value::is_null) && old["spec"].get(k).is_some() {
            new["spec"][k] = old["spec"][k].clone();
        }
    }
    let n = new["spec"]["ports"].as_array().map_or(0, Vec::len);
    for i in 0..n {
        if new["spec"]["ports"][i].get("nodePort").is_none() {
            let port = new["spec"]["ports"][i]["port"].clone();
            if let Some(np) = old["spec"]["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|p| p["port"] == port)
                .and_then(|p| p.get("nodePort"))
            {
                new["spec"]["ports"][i]["nodePort"] = np.clone();
            }
        }
    }
}
