//! An Endpoints holds at most 1000 addresses (upstream `maxCapacity`): beyond that the controller
//! truncates it (`truncateEndpoints`) and says so with `endpoints.kubernetes.io/over-capacity:
//! truncated`. Ready addresses are kept before not-ready ones, and each subset keeps a share
//! proportional to its size, rounded up, the last ones taking what is left.

use std::collections::BTreeMap;

use flotilla_sdk::k8s_openapi::api::core::v1::{EndpointAddress, EndpointSubset};

/// The most addresses (ready and not) one Endpoints holds.
pub(crate) const MAX_CAPACITY: usize = 1000;

/// The annotation marking a truncated Endpoints.
pub(crate) const OVER_CAPACITY: &str = "endpoints.kubernetes.io/over-capacity";

/// Its only value.
pub(crate) const TRUNCATED: &str = "truncated";

fn count(list: &Option<Vec<EndpointAddress>>) -> usize {
    list.as_ref().map_or(0, Vec::len)
}

/// Upstream's `capacityAnnotationSetCorrectly`: false when the subsets are over capacity (they must
/// be truncated), else whether the annotation is absent.
pub(crate) fn annotation_set_correctly(
    annotations: Option<&BTreeMap<String, String>>,
    subsets: &[EndpointSubset],
) -> bool {
    let total: usize = subsets
        .iter()
        .map(|s| count(&s.addresses) + count(&s.not_ready_addresses))
        .sum();
    total <= MAX_CAPACITY && annotations.is_none_or(|a| !a.contains_key(OVER_CAPACITY))
}

/// Truncates `subsets` to [`MAX_CAPACITY`] addresses as upstream's `truncateEndpoints`; returns
/// whether it had to.
pub(crate) fn truncate(subsets: &mut [EndpointSubset]) -> bool {
    let total_ready: usize = subsets.iter().map(|s| count(&s.addresses)).sum();
    let total_not_ready: usize = subsets.iter().map(|s| count(&s.not_ready_addresses)).sum();
    if total_ready + total_not_ready <= MAX_CAPACITY {
        return false;
    }
    let truncate_ready = total_ready > MAX_CAPACITY;
    let (max, num_total) = if truncate_ready {
        (MAX_CAPACITY, total_ready)
    } else {
        (MAX_CAPACITY - total_ready, total_not_ready)
    };
    let mut can_be_added = max;
    for subset in subsets.iter_mut() {
        let in_subset = if truncate_ready {
            count(&subset.addresses)
        } else {
            count(&subset.not_ready_addresses)
        };
        // ceil(in_subset / num_total * max), in integers; num_total > 0 here.
        let share = (in_subset * max).div_ceil(num_total);
        let to_add = share.min(can_be_added);
        if truncate_ready {
            if let Some(list) = subset.addresses.as_mut() {
                list.truncate(to_add);
            }
            // Upstream leaves an empty (not nil) list, which JSON omits all the same.
            subset.not_ready_addresses = None;
            can_be_added -= count(&subset.addresses);
        } else {
            if let Some(list) = subset.not_ready_addresses.as_mut() {
                list.truncate(to_add);
            }
            can_be_added -= count(&subset.not_ready_addresses);
        }
    }
    true
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn addrs(prefix: &str, n: usize) -> Option<Vec<EndpointAddress>> {
        (n > 0).then(|| {
            (0..n)
                .map(|i| EndpointAddress {
                    ip: format!("{prefix}.{}.{}", i / 250, i % 250),
                    ..EndpointAddress::default()
                })
                .collect()
        })
    }

    fn subset(ready: usize, not_ready: usize) -> EndpointSubset {
        EndpointSubset {
            addresses: addrs("10.0", ready),
            not_ready_addresses: addrs("10.1", not_ready),
            ports: None,
        }
    }

    fn sizes(subsets: &[EndpointSubset]) -> Vec<(usize, usize)> {
        subsets
            .iter()
            .map(|s| (count(&s.addresses), count(&s.not_ready_addresses)))
            .collect()
    }

    #[test]
    fn a_thousand_addresses_are_not_truncated_and_need_no_annotation() {
        let mut subsets = vec![subset(600, 400)];
        assert!(!truncate(&mut subsets));
        assert!(annotation_set_correctly(None, &subsets));
        let marked = BTreeMap::from([(OVER_CAPACITY.to_owned(), TRUNCATED.to_owned())]);
        assert!(!annotation_set_correctly(Some(&marked), &subsets));
    }

    #[test]
    fn over_capacity_not_ready_addresses_go_first_proportionally() {
        let mut subsets = vec![subset(500, 300), subset(100, 300)];
        assert!(!annotation_set_correctly(None, &subsets));
        assert!(truncate(&mut subsets));
        // 400 not-ready slots, shared 300:300.
        assert_eq!(sizes(&subsets), [(500, 200), (100, 200)]);
    }

    #[test]
    fn over_capacity_ready_addresses_keep_proportional_shares_and_drop_every_not_ready_one() {
        let mut subsets = vec![subset(900, 10), subset(300, 0), subset(1, 5)];
        assert!(truncate(&mut subsets));
        // ceil(900/1201*1000)=750, ceil(300/1201*1000)=250, then nothing is left.
        assert_eq!(sizes(&subsets), [(750, 0), (250, 0), (0, 0)]);
        let total: usize = sizes(&subsets).iter().map(|(r, n)| r + n).sum();
        assert_eq!(total, MAX_CAPACITY);
    }
}
