//! A reconcile's [`Write`] in both directions between the wire and the shared vocabulary's type: the
//! worker encodes what its recording client noted, the coordinator decodes what it holds keys for.

use flotilla_apimachinery::{Write, WriteOp};

/// Why a wire write does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// The operation is unset or one this build does not know (from a newer peer).
    #[error("unknown op {0}")]
    UnknownOp(i32),
    /// The write names no kind.
    #[error("missing field write.kind")]
    MissingKind,
}

impl From<WriteOp> for crate::WriteOp {
    fn from(op: WriteOp) -> Self {
        match op {
            WriteOp::Create => Self::Create,
            WriteOp::Update => Self::Update,
            WriteOp::Delete => Self::Delete,
        }
    }
}

impl From<&Write> for crate::Write {
    fn from(w: &Write) -> Self {
        Self {
            kind: Some((&w.kind).into()),
            key: w.key.clone(),
            resource_version: w.resource_version.clone(),
            op: crate::WriteOp::from(w.op).into(),
        }
    }
}

impl TryFrom<crate::Write> for Write {
    type Error = WriteError;

    /// Only the structure is checked (a known op, a kind); the key and the resourceVersion are as sent.
    ///
    /// # Errors
    /// [`WriteError`] for an unknown op (checked first) or an unset kind.
    fn try_from(w: crate::Write) -> Result<Self, WriteError> {
        let op = match crate::WriteOp::try_from(w.op) {
            Ok(crate::WriteOp::Create) => WriteOp::Create,
            Ok(crate::WriteOp::Update) => WriteOp::Update,
            Ok(crate::WriteOp::Delete) => WriteOp::Delete,
            Ok(crate::WriteOp::Unspecified) | Err(_) => return Err(WriteError::UnknownOp(w.op)),
        };
        Ok(Self {
            kind: w.kind.ok_or(WriteError::MissingKind)?.into(),
            key: w.key,
            resource_version: w.resource_version,
            op,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use flotilla_apimachinery::ResourceKind;

    use super::*;

    #[test]
    fn every_write_op_survives_the_round_trip_through_the_wire() {
        for op in [WriteOp::Create, WriteOp::Update, WriteOp::Delete] {
            let write = Write {
                kind: ResourceKind::new("", "v1", "ConfigMap", "configmaps", true),
                key: "ns/c".into(),
                resource_version: "7".into(),
                op,
            };
            assert_eq!(Write::try_from(crate::Write::from(&write)).unwrap(), write);
        }
    }

    #[test]
    fn an_unset_or_unknown_op_and_a_missing_kind_are_refused() {
        let kind = Some((&ResourceKind::new("", "v1", "Pod", "pods", true)).into());
        let wire = |op, kind| crate::Write {
            kind,
            op,
            ..Default::default()
        };
        assert_eq!(
            Write::try_from(wire(0, kind.clone())),
            Err(WriteError::UnknownOp(0))
        );
        assert_eq!(
            Write::try_from(wire(9, kind)),
            Err(WriteError::UnknownOp(9))
        );
        assert_eq!(Write::try_from(wire(1, None)), Err(WriteError::MissingKind));
    }
}
