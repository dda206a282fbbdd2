//! `--controllers` in kube-controller-manager's syntax: `*` enables every controller that is on by
//! default, `foo` enables foo, `-foo` disables foo; an unknown name is an error.

/// Errors of a controller selection.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SelectionError {
    /// A name is not a controller this binary has.
    #[error("unknown controller {name:?} in --controllers (known: {known})")]
    Unknown {
        /// The name given.
        name: String,
        /// The names this binary knows, comma-separated.
        known: String,
    },
    /// An empty entry, like `a,,b`.
    #[error("empty entry in --controllers")]
    Empty,
}

/// Picks the enabled controllers out of `known` (all of which are on by default) by the entries
/// of `--controllers`, keeping `known`'s order.
///
/// # Errors
/// [`SelectionError`] for an unknown name or an empty entry.
pub fn select_controllers<'a>(
    entries: &[String],
    known: &[&'a str],
) -> Result<Vec<&'a str>, SelectionError> {
    let mut star = false;
    let mut enabled = Vec::new();
    let mut disabled = Vec::new();
    for entry in entries {
        let entry = entry.trim();
        let (negated, name) = match entry.strip_prefix('-') {
            Some(name) => (true, name),
            None => (false, entry),
        };
        if name.is_empty() {
            return Err(SelectionError::Empty);
        }
        if name == "*" && !negated {
            star = true;
            continue;
        }
        if !known.contains(&name) {
            return Err(SelectionError::Unknown {
                name: name.to_owned(),
                known: known.join(","),
            });
        }
        if negated {
            disabled.push(name)
        } else {
            enabled.push(name)
        }
    }
    Ok(known
        .iter()
        .copied()
        .filter(|name| !disabled.contains(name) && (enabled.contains(name) || star))
        .collect())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn entries(s: &str) -> Vec<String> {
        s.split(',').map(str::to_owned).collect()
    }

    const KNOWN: &[&str] = &["journal", "one-child", "greeting"];

    #[test]
    fn star_enables_every_controller() {
        assert_eq!(select_controllers(&entries("*"), KNOWN).unwrap(), KNOWN);
    }

    #[test]
    fn a_minus_disables_a_controller_star_enabled() {
        assert_eq!(
            select_controllers(&entries("*,-one-child"), KNOWN).unwrap(),
            ["journal", "greeting"]
        );
    }

    #[test]
    fn named_controllers_alone_are_enabled_without_star() {
        assert_eq!(
            select_controllers(&entries("greeting,journal"), KNOWN).unwrap(),
            ["journal", "greeting"]
        );
    }

    #[test]
    fn an_unknown_name_is_a_clear_error() {
        let err = select_controllers(&entries("journal,replicaset"), KNOWN).unwrap_err();
        assert_eq!(
            err,
            SelectionError::Unknown {
                name: "replicaset".into(),
                known: "journal,one-child,greeting".into()
            }
        );
        assert!(
            err.to_string()
                .contains("unknown controller \"replicaset\"")
        );
        assert!(select_controllers(&entries("-nope"), KNOWN).is_err());
    }

    #[test]
    fn an_empty_entry_is_an_error() {
        assert_eq!(
            select_controllers(&entries("journal,,greeting"), KNOWN),
            Err(SelectionError::Empty)
        );
    }
}
