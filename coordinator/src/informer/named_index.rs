//! Named indexes, as client-go's `AddIndexers`: a controller declares one for a kind — a name and a
//! dotted field path — and that kind's store keeps its objects by the string at the path, for the
//! Cache service to list by. Here: a declaration, every controller's declarations, and why a lookup
//! by name fails.

use std::collections::{BTreeMap, BTreeSet};

use flotilla_common::ResourceKind;

/// One declared index: the objects of `kind` by the non-empty string at `field_path`; the type the
/// controllers declare and the protocol carries.
pub use flotilla_proto::spec::IndexSpec;

/// Why a store could not answer a lookup by index name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexLookupError {
    /// No controller declared an index of this name for the kind.
    #[error("no index {0:?} is declared for the kind")]
    Unknown(String),
    /// Two controllers declared the name with different paths: which one a list means is unknown.
    #[error(
        "index {name:?} is declared with different paths by different controllers ({}); rename one",
        paths.join(", ")
    )]
    Ambiguous {
        /// The index name asked for.
        name: String,
        /// The paths declared under it.
        paths: Vec<String>,
    },
}

/// The named indexes every controller declared, by controller: a store keeps the union for its kind,
/// so one controller's retirement drops only what no other controller declared.
#[derive(Debug, Default)]
pub(crate) struct Declarations {
    by_controller: BTreeMap<String, Vec<IndexSpec>>,
}

impl Declarations {
    /// Replaces what `controller` declares (nothing: it retired); returns the kinds whose set of
    /// indexes may have changed.
    pub(crate) fn replace(
        &mut self,
        controller: &str,
        indexes: &[IndexSpec],
    ) -> BTreeSet<ResourceKind> {
        let old = if indexes.is_empty() {
            self.by_controller.remove(controller)
        } else {
            self.by_controller
                .insert(controller.to_owned(), indexes.to_vec())
        };
        old.into_iter()
            .flatten()
            .chain(indexes.iter().cloned())
            .map(|i| i.kind)
            .collect()
    }

    /// The (name, path) pairs declared for `kind` by any controller.
    pub(crate) fn of_kind(&self, kind: &ResourceKind) -> BTreeSet<(String, String)> {
        self.by_controller
            .values()
            .flatten()
            .filter(|i| &i.kind == kind)
            .map(|i| (i.name.clone(), i.field_path.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(kind: &ResourceKind, name: &str, path: &str) -> IndexSpec {
        IndexSpec {
            kind: kind.clone(),
            name: name.into(),
            field_path: path.into(),
        }
    }

    #[test]
    fn a_kind_keeps_the_union_of_every_controllers_indexes_until_each_retires() {
        let pvcs = ResourceKind::new(
            "",
            "v1",
            "PersistentVolumeClaim",
            "persistentvolumeclaims",
            true,
        );
        let pods = ResourceKind::new("", "v1", "Pod", "pods", true);
        let mut declared = Declarations::default();
        let changed = declared.replace("a", &[index(&pvcs, "by-volume", "spec.volumeName")]);
        assert_eq!(changed, [pvcs.clone()].into());
        declared.replace(
            "b",
            &[
                index(&pvcs, "by-volume", "spec.volumeName"),
                index(&pods, "by-node", "spec.nodeName"),
            ],
        );
        let by_volume = ("by-volume".to_owned(), "spec.volumeName".to_owned());
        assert_eq!(declared.of_kind(&pvcs), [by_volume.clone()].into());
        assert_eq!(declared.replace("a", &[]), [pvcs.clone()].into());
        assert_eq!(
            declared.of_kind(&pvcs),
            [by_volume].into(),
            "b still declares it"
        );
        assert_eq!(
            declared.replace("b", &[]),
            [pvcs.clone(), pods.clone()].into()
        );
        assert!(declared.of_kind(&pvcs).is_empty() && declared.of_kind(&pods).is_empty());
    }
}
