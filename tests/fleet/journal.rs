//! Reading the journal the `fleet-probe` journal controller writes: one JSON line per reconcile start
//! (`end_ns` 0) and one per end. The checks here are the fleet's promises: no two overlapping reconciles
//! of one key, and every key reconciled after its last change.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::Deserialize;

/// One line of the journal.
#[derive(Debug, Clone, Deserialize)]
pub struct Entry {
    pub key: String,
    pub worker: String,
    pub start_ns: u64,
    pub end_ns: u64,
    pub rv: String,
    /// Why it ran (`Request::reason`, displayed).
    #[serde(default)]
    pub reason: String,
}

/// One reconcile: from its start line to its end line, or — when its worker was killed mid-reconcile —
/// to the worker's death (`open` then).
#[derive(Debug, Clone)]
pub struct Interval {
    pub key: String,
    pub worker: String,
    pub start_ns: u64,
    pub end_ns: u64,
    pub rv: String,
    pub open: bool,
}

/// Reads every complete line (a line being written while we read is skipped).
pub fn read(path: &Path) -> Vec<Entry> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Pairs start and end lines into intervals. A start without an end is open until `deaths[worker]`
/// (ns, same clock) or, for a worker still alive, until now.
pub fn intervals(entries: &[Entry], deaths: &HashMap<String, u64>, now_ns: u64) -> Vec<Interval> {
    let mut ends: HashMap<(String, String, u64), &Entry> = HashMap::new();
    for e in entries.iter().filter(|e| e.end_ns != 0) {
        ends.insert((e.key.clone(), e.worker.clone(), e.start_ns), e);
    }
    let mut out = Vec::new();
    for s in entries.iter().filter(|e| e.end_ns == 0) {
        match ends.remove(&(s.key.clone(), s.worker.clone(), s.start_ns)) {
            Some(e) => out.push(Interval {
                key: e.key.clone(),
                worker: e.worker.clone(),
                start_ns: e.start_ns,
                end_ns: e.end_ns,
                rv: e.rv.clone(),
                open: false,
            }),
            None => out.push(Interval {
                key: s.key.clone(),
                worker: s.worker.clone(),
                start_ns: s.start_ns,
                end_ns: deaths.get(&s.worker).copied().unwrap_or(now_ns),
                rv: s.rv.clone(),
                open: true,
            }),
        }
    }
    // End lines without a start line (none expected) still count as reconciles.
    for e in ends.into_values() {
        out.push(Interval {
            key: e.key.clone(),
            worker: e.worker.clone(),
            start_ns: e.start_ns,
            end_ns: e.end_ns,
            rv: e.rv.clone(),
            open: false,
        });
    }
    out
}

/// Every pair of overlapping reconciles of one key, described for a failure message.
pub fn overlaps(intervals: &[Interval]) -> Vec<String> {
    let mut by_key: BTreeMap<&str, Vec<&Interval>> = BTreeMap::new();
    for i in intervals {
        by_key.entry(&i.key).or_default().push(i);
    }
    let mut found = Vec::new();
    for (key, mut list) in by_key {
        list.sort_by_key(|i| i.start_ns);
        let mut latest: Option<&Interval> = None;
        for i in list {
            if let Some(prev) = latest
                && i.start_ns < prev.end_ns
            {
                found.push(format!(
                    "{key}: {} [{}..{}{}] overlaps {} [{}..{}{}]",
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

/// Keys whose newest completed reconcile saw a resourceVersion older than `want[key]`.
pub fn stale_keys(intervals: &[Interval], want: &HashMap<String, u64>) -> Vec<String> {
    let mut newest: HashMap<&str, u64> = HashMap::new();
    for i in intervals.iter().filter(|i| !i.open) {
        let rv = i.rv.parse().unwrap_or(0);
        let slot = newest.entry(&i.key).or_default();
        *slot = (*slot).max(rv);
    }
    let mut stale: Vec<String> = want
        .iter()
        .filter(|(k, rv)| newest.get(k.as_str()).is_none_or(|seen| seen < *rv))
        .map(|(k, rv)| format!("{k} (want rv {rv}, saw {:?})", newest.get(k.as_str())))
        .collect();
    stale.sort();
    stale
}

/// Nanoseconds since the Unix epoch: the journal's clock.
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[test]
fn the_overlap_check_finds_an_overlap_and_accepts_back_to_back_reconciles() {
    let e = |w: &str, s, end| Entry {
        key: "ns/a".into(),
        worker: w.into(),
        start_ns: s,
        end_ns: end,
        rv: "1".into(),
        reason: String::new(),
    };
    let entries = vec![
        e("w1", 10, 0),
        e("w1", 10, 20),
        e("w2", 20, 0),
        e("w2", 20, 30),
    ];
    assert!(overlaps(&intervals(&entries, &HashMap::new(), 100)).is_empty());
    let entries = vec![e("w1", 10, 0), e("w2", 15, 0), e("w2", 15, 30)];
    let deaths = HashMap::from([("w1".to_owned(), 18)]);
    assert_eq!(
        overlaps(&intervals(&entries, &deaths, 100)).len(),
        1,
        "an open start of a killed worker counts until its death"
    );
}
