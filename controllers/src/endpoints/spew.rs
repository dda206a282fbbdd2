//! The text upstream hashes to order Endpoints ports and subsets: `hashutil.DeepHashObject`, which
//! prints a Go value with `go-spew`'s `%#v` (types in parentheses, struct fields by name, nil
//! pointers and slices as `<nil>`). Only the shapes of `EndpointSubset`, `EndpointAddress`,
//! `EndpointPort` and `ObjectReference` are rendered, field for field in Go's declaration order, so
//! the MD5 of the text is the hash kube-controller-manager sorted by, and our order is its order.
//!
//! An absent optional string is Go's empty `string`, an absent `*string` is `<nil>`; an absent or
//! empty list is a nil slice (upstream's repacked subsets never hold empty non-nil lists).

use std::fmt::Write;

use flotilla_sdk::k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, ObjectReference,
};

/// `(v1.EndpointPort){…}`: what a port of a subset is sorted by.
pub(crate) fn port(p: &EndpointPort) -> String {
    let mut out = String::from("(v1.EndpointPort)");
    port_body(&mut out, p);
    out
}

/// `(v1.EndpointSubset){…}`: what a subset of an Endpoints is sorted by.
pub(crate) fn subset(s: &EndpointSubset) -> String {
    let mut out = String::from("(v1.EndpointSubset){Addresses:");
    addresses(&mut out, s.addresses.as_deref());
    out.push_str(" NotReadyAddresses:");
    addresses(&mut out, s.not_ready_addresses.as_deref());
    out.push_str(" Ports:([]v1.EndpointPort)");
    match s.ports.as_deref() {
        None | Some([]) => out.push_str("<nil>"),
        Some(ports) => {
            out.push('[');
            for (i, p) in ports.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                port_body(&mut out, p);
            }
            out.push(']');
        }
    }
    out.push('}');
    out
}

fn port_body(out: &mut String, p: &EndpointPort) {
    let _ = write!(
        out,
        "{{Name:(string){} Port:(int32){} Protocol:(v1.Protocol){} AppProtocol:(*string){}}}",
        p.name.as_deref().unwrap_or_default(),
        p.port,
        p.protocol.as_deref().unwrap_or_default(),
        p.app_protocol.as_deref().unwrap_or("<nil>"),
    );
}

fn addresses(out: &mut String, list: Option<&[EndpointAddress]>) {
    out.push_str("([]v1.EndpointAddress)");
    match list {
        None | Some([]) => out.push_str("<nil>"),
        Some(list) => {
            out.push('[');
            for (i, a) in list.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                address(out, a);
            }
            out.push(']');
        }
    }
}

fn address(out: &mut String, a: &EndpointAddress) {
    let _ = write!(
        out,
        "{{IP:(string){} Hostname:(string){} NodeName:(*string){} TargetRef:(*v1.ObjectReference)",
        a.ip,
        a.hostname.as_deref().unwrap_or_default(),
        a.node_name.as_deref().unwrap_or("<nil>"),
    );
    match &a.target_ref {
        None => out.push_str("<nil>"),
        Some(r) => reference(out, r),
    }
    out.push('}');
}

fn reference(out: &mut String, r: &ObjectReference) {
    let s = |v: &Option<String>| v.clone().unwrap_or_default();
    let _ = write!(
        out,
        "{{Kind:(string){} Namespace:(string){} Name:(string){} UID:(types.UID){} APIVersion:(string){} ResourceVersion:(string){} FieldPath:(string){}}}",
        s(&r.kind),
        s(&r.namespace),
        s(&r.name),
        s(&r.uid),
        s(&r.api_version),
        s(&r.resource_version),
        s(&r.field_path),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_renders_as_spew_prints_a_go_endpoint_port() {
        let p = EndpointPort {
            name: Some("http".into()),
            port: 8080,
            protocol: Some("TCP".into()),
            app_protocol: None,
        };
        assert_eq!(
            port(&p),
            "(v1.EndpointPort){Name:(string)http Port:(int32)8080 Protocol:(v1.Protocol)TCP AppProtocol:(*string)<nil>}"
        );
    }

    #[test]
    fn a_subset_renders_nil_lists_and_pointers_as_nil() {
        let s = EndpointSubset {
            addresses: Some(vec![EndpointAddress {
                ip: "10.0.0.1".into(),
                node_name: Some("node-a".into()),
                target_ref: Some(ObjectReference {
                    kind: Some("Pod".into()),
                    namespace: Some("ns".into()),
                    name: Some("web-1".into()),
                    uid: Some("u1".into()),
                    ..ObjectReference::default()
                }),
                ..EndpointAddress::default()
            }]),
            not_ready_addresses: None,
            ports: None,
        };
        assert_eq!(
            subset(&s),
            "(v1.EndpointSubset){Addresses:([]v1.EndpointAddress)[{IP:(string)10.0.0.1 Hostname:(string) \
             NodeName:(*string)node-a TargetRef:(*v1.ObjectReference){Kind:(string)Pod Namespace:(string)ns \
             Name:(string)web-1 UID:(types.UID)u1 APIVersion:(string) ResourceVersion:(string) FieldPath:(string)}}] \
             NotReadyAddresses:([]v1.EndpointAddress)<nil> Ports:([]v1.EndpointPort)<nil>}"
        );
    }
}
