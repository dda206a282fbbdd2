//! Validation of `networking.k8s.io` ServiceCIDRs and IPAddresses (upstream
//! `pkg/apis/networking/validation`): a ServiceCIDR holds one or two CIDRs, one per IP family, that
//! never change; an IPAddress is named by an IP in canonical form and names the object it belongs to.

use std::net::IpAddr;

use serde_json::Value;

use super::status::Cause;

const IMMUTABLE: &str = "field is immutable";
const CIDR_MSG: &str = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)";

/// The address and prefix length of `s` (`10.0.0.0/24`), if it is a CIDR: an IP, a slash, a
/// prefix length no longer than the family's.
pub fn parse_cidr(s: &str) -> Option<(IpAddr, u8)> {
    let (ip, len) = s.split_once('/')?;
    let ip: IpAddr = ip.parse().ok()?;
    if len.is_empty() || !len.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let len: u8 = len.parse().ok()?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    (len <= max).then_some((ip, len))
}

/// ServiceCIDR create (upstream `ValidateServiceCIDR`): at least one CIDR, at most two, each valid,
/// and two only when they are of different families.
pub fn service_cidr(obj: &Value) -> Vec<Cause> {
    let field = "spec.cidrs";
    let cidrs = &obj["spec"]["cidrs"];
    let list = cidrs.as_array().map(Vec::as_slice).unwrap_or_default();
    if list.is_empty() {
        return vec![Cause::required(field, "at least one CIDR required")];
    }
    if list.len() > 2 {
        return vec![Cause::invalid(
            field,
            &obj["spec"],
            "may only hold up to 2 values",
        )];
    }
    let mut causes = Vec::new();
    let mut families = Vec::new();
    for (i, cidr) in list.iter().enumerate() {
        match cidr.as_str().and_then(parse_cidr) {
            Some((ip, _)) => families.push(ip.is_ipv4()),
            None => causes.push(Cause::invalid(&format!("{field}[{i}]"), cidr, CIDR_MSG)),
        }
    }
    if causes.is_empty() && families.len() == 2 && families[0] == families[1] {
        causes.push(Cause::invalid(
            field,
            &obj["spec"],
            "may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64",
        ));
    }
    causes
}

/// ServiceCIDR update (upstream `ValidateServiceCIDRUpdate` of v1.32): the CIDRs never change.
pub fn service_cidr_update(new: &Value, old: &Value) -> Vec<Cause> {
    let (cidrs, old_cidrs) = (&new["spec"]["cidrs"], &old["spec"]["cidrs"]);
    if cidrs != old_cidrs {
        return vec![Cause::invalid("spec.cidrs", cidrs, IMMUTABLE)];
    }
    Vec::new()
}

/// IPAddress create (upstream `ValidateIPAddress`): the name is an IP in canonical form and
/// `spec.parentRef` names a resource and an object.
pub fn ip_address(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    match name.parse::<IpAddr>() {
        Ok(ip) if ip.to_string() == name => {}
        Ok(ip) => causes.push(Cause::invalid(
            "metadata.name",
            &obj["metadata"]["name"],
            &format!("must be in canonical form (\"{ip}\")"),
        )),
        Err(_) => causes.push(Cause::invalid(
            "metadata.name",
            &obj["metadata"]["name"],
            "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
        )),
    }
    let parent = &obj["spec"]["parentRef"];
    if !parent.is_object() {
        causes.push(Cause::required("spec.parentRef", ""));
        return causes;
    }
    for key in ["resource", "name"] {
        if parent[key].as_str().unwrap_or("").is_empty() {
            causes.push(Cause::required(&format!("spec.parentRef.{key}"), ""));
        }
    }
    causes
}

/// IPAddress update (upstream `ValidateIPAddressUpdate`): the parent never changes.
pub fn ip_address_update(new: &Value, old: &Value) -> Vec<Cause> {
    let (parent, old_parent) = (&new["spec"]["parentRef"], &old["spec"]["parentRef"]);
    if parent != old_parent {
        return vec![Cause::invalid("spec.parentRef", parent, IMMUTABLE)];
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn cidrs(list: Value) -> Value {
        json!({"metadata": {"name": "x"}, "spec": {"cidrs": list}})
    }

    #[test]
    fn one_cidr_or_one_per_family_is_valid() {
        assert!(service_cidr(&cidrs(json!(["10.0.0.0/24"]))).is_empty());
        assert!(service_cidr(&cidrs(json!(["10.0.0.0/24", "fd00::/108"]))).is_empty());
    }

    #[test]
    fn no_cidr_three_cidrs_a_bad_cidr_and_two_of_a_family_are_refused() {
        let none = service_cidr(&cidrs(json!([])));
        assert_eq!(none[0].reason, "FieldValueRequired");
        let three = service_cidr(&cidrs(json!(["10.0.0.0/24", "fd00::/108", "10.1.0.0/24"])));
        assert!(three[0].message.contains("up to 2 values"));
        let bad = service_cidr(&cidrs(json!(["10.0.0.0/33"])));
        assert_eq!(bad[0].field, "spec.cidrs[0]");
        let same = service_cidr(&cidrs(json!(["10.0.0.0/24", "10.1.0.0/24"])));
        assert!(same[0].message.contains("one IP for each IP family"));
    }

    #[test]
    fn the_cidrs_of_a_service_cidr_never_change() {
        let old = cidrs(json!(["10.0.0.0/24"]));
        assert!(service_cidr_update(&old, &old).is_empty());
        let new = cidrs(json!(["10.0.0.0/16"]));
        assert_eq!(service_cidr_update(&new, &old)[0].field, "spec.cidrs");
    }

    #[test]
    fn an_ip_address_is_named_by_a_canonical_ip_and_names_its_parent() {
        let ip = |name: &str| {
            json!({"metadata": {"name": name},
                   "spec": {"parentRef": {"group": "", "resource": "services", "namespace": "a", "name": "b"}}})
        };
        assert!(ip_address(&ip("10.0.0.7")).is_empty());
        assert!(ip_address(&ip("2001:db8::1")).is_empty());
        assert_eq!(ip_address(&ip("2001:db8:0::1"))[0].field, "metadata.name");
        assert_eq!(ip_address(&ip("ten"))[0].field, "metadata.name");
        let orphan = json!({"metadata": {"name": "10.0.0.7"}, "spec": {}});
        assert_eq!(ip_address(&orphan)[0].field, "spec.parentRef");
        let moved = ip("10.0.0.7");
        let mut other = moved.clone();
        other["spec"]["parentRef"]["name"] = json!("c");
        assert_eq!(ip_address_update(&other, &moved).len(), 1);
    }
}
