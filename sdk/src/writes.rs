//! The writes of one reconcile, for read-your-writes: the runtime's recording client notes every
//! object the reconcile created, updated or deleted (kind, key, resourceVersion, operation) in a
//! [`WriteJournal`], and reports them when the item is done, so the coordinator holds the key back
//! until its cache has seen them. [`Write`] itself is the shared vocabulary's (`flotilla-apimachinery`),
//! the same type the coordinator holds keys by.

use std::sync::Arc;

pub use flotilla_apimachinery::{Write, WriteOp};
use parking_lot::Mutex;

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
    use flotilla_apimachinery::ResourceKind;

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
