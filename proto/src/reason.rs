//! The protocol's `Reason` mapped to and from the shared vocabulary's, at the edge.

use flotilla_apimachinery::Reason;

use crate::ReasonKind;

impl From<&Reason> for crate::Reason {
    fn from(r: &Reason) -> Self {
        let kind = match r {
            Reason::ObjectChanged { kind, key } => {
                return Self {
                    kind: ReasonKind::ObjectChanged.into(),
                    object_kind: kind.clone(),
                    object_key: key.clone(),
                };
            }
            Reason::RequeueAfter => ReasonKind::RequeueAfter,
            Reason::Retry => ReasonKind::Retry,
            Reason::Resync => ReasonKind::Resync,
            Reason::InitialList => ReasonKind::InitialList,
            Reason::Handover => ReasonKind::Handover,
            Reason::Requested => ReasonKind::Requested,
            Reason::Unknown => ReasonKind::Unspecified,
        };
        Self {
            kind: kind.into(),
            object_kind: String::new(),
            object_key: String::new(),
        }
    }
}

impl From<crate::Reason> for Reason {
    /// An unknown kind (from a newer peer) is [`Reason::Unknown`], not an error: the reason informs,
    /// it never decides whether an item runs.
    fn from(r: crate::Reason) -> Self {
        match ReasonKind::try_from(r.kind).unwrap_or(ReasonKind::Unspecified) {
            ReasonKind::ObjectChanged => Self::ObjectChanged {
                kind: r.object_kind,
                key: r.object_key,
            },
            ReasonKind::RequeueAfter => Self::RequeueAfter,
            ReasonKind::Retry => Self::Retry,
            ReasonKind::Resync => Self::Resync,
            ReasonKind::InitialList => Self::InitialList,
            ReasonKind::Handover => Self::Handover,
            ReasonKind::Requested => Self::Requested,
            ReasonKind::Unspecified => Self::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_survives_the_wire_and_an_unknown_kind_is_unknown() {
        let reasons = [
            Reason::ObjectChanged {
                kind: "apps/v1/replicasets".into(),
                key: "ns/web".into(),
            },
            Reason::RequeueAfter,
            Reason::Retry,
            Reason::Resync,
            Reason::InitialList,
            Reason::Handover,
            Reason::Requested,
            Reason::Unknown,
        ];
        for reason in reasons {
            assert_eq!(Reason::from(crate::Reason::from(&reason)), reason);
        }
        let newer = crate::Reason {
            kind: 99,
            ..Default::default()
        };
        assert_eq!(Reason::from(newer), Reason::Unknown);
    }
}
