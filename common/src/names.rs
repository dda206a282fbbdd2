//! Kubernetes' name rules (DNS-1123 labels and subdomains) for the names peers send: worker ids and
//! controller names become etcd keys, metric labels and log fields, so both roles check them alike.

/// Checks that `s` is a DNS-1123 subdomain: at most 253 characters, dot-separated labels of lowercase
/// alphanumerics and `-`, each starting and ending with an alphanumeric.
///
/// # Errors
/// A message saying what is wrong (without echoing the value, which may be huge).
pub fn validate_subdomain(s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > 253 {
        return Err(format!(
            "must be 1 to 253 characters, not {} (a DNS-1123 subdomain)",
            s.len()
        ));
    }
    if !s.split('.').all(is_label) {
        return Err(
            "must be a DNS-1123 subdomain: lowercase alphanumerics, '-' and '.', starting and ending with an alphanumeric".into(),
        );
    }
    Ok(())
}

/// Checks that `s` is a DNS-1123 label: at most 63 lowercase alphanumerics and `-`, starting and
/// ending with an alphanumeric.
///
/// # Errors
/// A message saying what is wrong (without echoing the value).
pub fn validate_label(s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > 63 {
        return Err(format!(
            "must be 1 to 63 characters, not {} (a DNS-1123 label)",
            s.len()
        ));
    }
    if !is_label(s) {
        return Err(
            "must be a DNS-1123 label: lowercase alphanumerics and '-', starting and ending with an alphanumeric".into(),
        );
    }
    Ok(())
}

fn is_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn worker_ids_as_the_runtime_makes_them_are_subdomains() {
        for ok in ["w0", "worker-7f3a2c", "flotilla-worker-5d9c.example", "a"] {
            assert_eq!(validate_subdomain(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn uppercase_slashes_edges_and_oversize_are_refused() {
        let long = "a".repeat(254);
        for bad in ["", "W0", "a/b", "-a", "a-", "a..b", "a_b", long.as_str()] {
            assert!(validate_subdomain(bad).is_err(), "{bad:?}");
        }
        assert!(validate_label("a.b").is_err());
        assert!(validate_label(&"a".repeat(64)).is_err());
        assert_eq!(validate_label("replicaset"), Ok(()));
    }

    proptest! {
        #[test]
        fn a_valid_subdomain_is_short_lowercase_and_never_has_a_slash(s in "\\PC{0,300}") {
            if validate_subdomain(&s).is_ok() {
                prop_assert!(s.len() <= 253);
                prop_assert!(!s.contains('/'));
                prop_assert!(s.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'.'));
            }
        }
    }
}
