//! Reading the workers' reconcile journal (`flotilla worker --reconcile-journal`: one JSON line per
//! reconcile start, `end_ns` 0, and one per end; the format the `fleet-probe` example's journal writes,
//! plus the controller) and checking the fleet's two promises on it: no key reconciled by two workers
//! at once, and every key's last change reconciled.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::Deserialize;

/// One line of the journal.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct Entry {
    pub key: String,
    #[serde(default)]
    pub controller: String,
    pub worker: String,
    pub start_ns: u64,
    pub end_ns: u64,
    pub rv: String,
}

/// One reconcile: from its start line to its end line or, when its worker was killed mid-reconcile,
/// to the worker's death (`open`).
#[derive(Debug, Clone)]
pub(super) struct Interval {
    pub controller: String,
    pub key: String,
    pub worker: String,
    pub start_ns: u64,
    pub end_ns: u64,
    pub rv: String,
    pub open: bool,
}

/// Every complete line of `path` (a line being written while it is read is skipped).
pub(super) fn read(path: &Path) -> Vec<Entry> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Pairs start and end lines. A start without an end is open until `deaths[worker]` (ns, the
/// journal's clock) or, for a worker that was not killed, until `now_ns`.
pub(super) fn intervals(
    entries: &[Entry],
    deaths: &HashMap<String, u64>,
    now_ns: u64,
) -> Vec<Interval> {
    type Id = (String, String, String, u64);
    let id = |e: &Entry| -> Id {
        (
            e.controller.clone(),
            e.key.clone(),
            e.worker.clone(),
            e.start_ns,
        )
    };
    let mut ends: HashMap<Id, &Entry> = entries
        .iter()
        .filter(|e| e.end_ns != 0)
        .map(|e| (id(e), e))
        .collect();
    let interval = |e: &Entry, end_ns, open| Interval {
        controller: e.controller.clone(),
        key: e.key.clone(),
        worker: e.worker.clone(),
        start_ns: e.start_ns,
        end_ns,
        rv: e.rv.clone(),
        open,
    };
    let mut out = Vec::new();
    for start in entries.iter().filter(|e| e.end_ns == 0) {
        match ends.remove(&id(start)) {
            Some(end) => out.push(interval(end, end.end_ns, false)),
            None => {
                let death = deaths.get(&start.worker).copied().unwrap_or(now_ns);
                out.push(interval(start, death, true));
            }
        }
    }
    // An end line without a start line (none expected) is still a reconcile.
    out.extend(ends.into_values().map(|e| interval(e, e.end_ns, false)));
    out
}

/// Every pair of overlapping reconciles of one key of one controller, described.
pub(super) fn overlaps(intervals: &[Interval]) -> Vec<String> {
    let mut by_key: BTreeMap<(&str, &str), Vec<&Interval>> = BTreeMap::new();
    for i in intervals {
        by_key.entry((&i.controller, &i.key)).or_default().push(i);
    }
    let mut found = Vec::new();
    for ((controller, key), mut list) in by_key {
        list.sort_by_key(|i| i.start_ns);
        let mut latest: Option<&Interval> = None;
        for i in list {
            if let Some(prev) = latest
                && i.start_ns < prev.end_ns
            {
                found.push(format!(
                    "{controller} {key}: {} [{}..{}{}] overlaps {} [{}..{}{}]",
                    prev.worker,
                    prev.start_ns,
                    prev.end_ns,
                    if prev.open { " open" } else { "" },
                    i.worker,
                    i.start_ns,
                    i.end_ns,
                    if i.open { " open" } else { "" },
                ));
            }
            if latest.is_none_or(|p| i.end_ns > p.end_ns) {
                latest = Some(i);
            }
        }
    }
    found
}

/// The keys of `controller` whose newest completed reconcile saw a resourceVersion older than
/// `want[key]` (the object's last change), or that were never reconciled.
pub(super) fn lost_keys(
    intervals: &[Interval],
    controller: &str,
    want: &HashMap<String, u64>,
) -> Vec<String> {
    let mut newest: HashMap<&str, u64> = HashMap::new();
    for i in intervals
        .iter()
        .filter(|i| !i.open && i.controller == controller)
    {
        let rv = i.rv.parse().unwrap_or(0);
        let slot = newest.entry(&i.key).or_default();
        *slot = (*slot).max(rv);
    }
    let mut lost: Vec<String> = want
        .iter()
        .filter(|(k, rv)| newest.get(k.as_str()).is_none_or(|seen| seen < *rv))
        .map(|(k, rv)| {
            format!(
                "{controller} {k} (last change at rv {rv}, newest reconcile saw {:?})",
                newest.get(k.as_str())
            )
        })
        .collect();
    lost.sort();
    lost
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(controller: &str, w: &str, s: u64, end: u64, rv: &str) -> Entry {
        Entry {
            key: "ns/a".into(),
            controller: controller.into(),
            worker: w.into(),
            start_ns: s,
            end_ns: end,
            rv: rv.into(),
        }
    }

    #[test]
    fn back_to_back_reconciles_do_not_overlap_and_an_open_one_lasts_until_its_worker_died() {
        let entries = [
            e("deployment", "w1", 10, 0, "1"),
            e("deployment", "w1", 10, 20, "1"),
            e("deployment", "w2", 20, 0, "2"),
            e("deployment", "w2", 20, 30, "2"),
        ];
        assert!(overlaps(&intervals(&entries, &HashMap::new(), 100)).is_empty());
        let entries = [
            e("deployment", "w1", 10, 0, "1"),
            e("deployment", "w2", 15, 0, "1"),
            e("deployment", "w2", 15, 30, "1"),
        ];
        let deaths = HashMap::from([("w1".to_owned(), 18)]);
        assert_eq!(overlaps(&intervals(&entries, &deaths, 100)).len(), 1);
        let deaths = HashMap::from([("w1".to_owned(), 12)]);
        assert!(
            overlaps(&intervals(&entries, &deaths, 100)).is_empty(),
            "the key moved after its holder died"
        );
    }

    #[test]
    fn one_key_of_two_controllers_is_two_keys() {
        let entries = [
            e("deployment", "w1", 10, 0, "1"),
            e("deployment", "w1", 10, 20, "1"),
            e("replicaset", "w2", 15, 0, "1"),
            e("replicaset", "w2", 15, 25, "1"),
        ];
        assert!(overlaps(&intervals(&entries, &HashMap::new(), 100)).is_empty());
    }

    #[test]
    fn a_key_is_lost_when_no_completed_reconcile_saw_its_last_change() {
        let entries = [
            e("deployment", "w1", 10, 0, "5"),
            e("deployment", "w1", 10, 20, "5"),
            e("deployment", "w2", 30, 0, "9"),
        ];
        let all = intervals(&entries, &HashMap::new(), 100);
        let want = |rv| HashMap::from([("ns/a".to_owned(), rv)]);
        assert!(lost_keys(&all, "deployment", &want(5)).is_empty());
        assert_eq!(
            lost_keys(&all, "deployment", &want(9)).len(),
            1,
            "a reconcile still open does not count"
        );
        assert_eq!(lost_keys(&all, "replicaset", &want(1)).len(), 1);
    }
}
