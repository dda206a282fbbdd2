//! The writes of one reconcile, for read-your-writes: the runtime's recording client notes every
//! object the reconcile created, updated or deleted (kind, key, resourceVersion, operation) in a
//! [`WriteJournal`], and reports them when the item is done, so the coordinator holds the key back
//! until its cache has seen them.

use std::sync::Arc;

use flotilla_apimachinery::ResourceKind;
use parking_lot::Mutex;

/// What kind of write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOp {
    /// A POST that made an object.
    Create,
    /// A PUT or PATCH of an object or one of its subresources.
    Update,
    /// A DELETE (which may only have set a deletionTimestamp).
    Delete,
}

/// One object a reconcile wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// The object's kind; its kind name is never empty (the coordinator matches kinds by name too).
    pub kind: ResourceKind,
    /// The object's key: `namespace/name`, or `name` when cluster-scoped.
    pub key: String,
    /// The resourceVersion the API server answered with; empty when the answer did not carry one (a
    /// delete answered with a `Status`).
    pub resource_version: String,
    /// What the write did.
    pub op: WriteOp,
}

/// The writes of one reconcile, shared between its recording client and the runtime; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct WriteJournal {
    writes: Arc<Mutex<Vec<Write>>>,
}

impl WriteJournal {
    /// Notes `writes`, after those noted before. A recording client must call it only for writes the
    /// API server accepted.
    pub fn record(&self, writes: Vec<Write>) {
        if !writes.is_empty() {
            self.writes.lock().extend(writes);
        }
    }

    /// Every write so far, in the order noted, leaving the journal empty.
    pub fn take(&self) -> Vec<Write> {
        std::mem::take(&mut *self.writes.lock())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_journal_hands_out_its_writes_once_and_in_order() {
        let journal = WriteJournal::default();
        let write = |key: &str, op| Write {
            kind: ResourceKind::new("", "v1", "ConfigMap", "configmaps", true),
            key: key.into(),
            resource_version: "1".into(),
            op,
        };
        journal.record(vec![write("ns/a", WriteOp::Create)]);
        journal.clone().record(vec![write("ns/a", WriteOp::Delete)]);
        let ops: Vec<_> = journal.take().iter().map(|w| w.op).collect();
        assert_eq!(ops, [WriteOp::Create, WriteOp::Delete]);
        assert!(journal.take().is_empty());
    }
}
