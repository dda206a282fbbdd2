//! The completion indexes of an Indexed Job: `status.completedIndexes` parsed and written in
//! upstream's interval notation (`"1,3-5,7"`: a run of three or more is `a-b`, a pair is `a,b`), and
//! which indexes still need a pod (upstream `orderedIntervals`, `firstPendingIndexes`).

use std::collections::BTreeSet;

/// A set of completion indexes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Indexes(BTreeSet<i32>);

impl Indexes {
    /// The indexes `text` lists, keeping only those below `bound` (`completions`); malformed parts are
    /// skipped rather than failing the Job on a status it cannot fix.
    pub fn parse(text: &str, bound: i32) -> Self {
        let mut set = BTreeSet::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (first, last) = match part.split_once('-') {
                Some((a, b)) => (a.parse::<i32>(), b.parse::<i32>()),
                None => (part.parse::<i32>(), part.parse::<i32>()),
            };
            let (Ok(first), Ok(last)) = (first, last) else {
                continue;
            };
            set.extend((first.max(0)..=last.min(bound.saturating_sub(1))).filter(|i| *i < bound));
        }
        Self(set)
    }

    /// Adds `index`.
    pub fn insert(&mut self, index: i32) {
        self.0.insert(index);
    }

    /// Whether `index` is in the set.
    pub fn contains(&self, index: i32) -> bool {
        self.0.contains(&index)
    }

    /// How many of this set's indexes `other` holds too.
    pub fn common(&self, other: &Indexes) -> i32 {
        i32::try_from(self.0.intersection(&other.0).count()).unwrap_or(i32::MAX)
    }

    /// How many indexes.
    pub fn total(&self) -> i32 {
        i32::try_from(self.0.len()).unwrap_or(i32::MAX)
    }

    /// The first `count` indexes below `bound` that are neither in this set nor in `busy` (indexes
    /// with an active pod), in order.
    pub fn first_pending(&self, busy: &BTreeSet<i32>, count: usize, bound: i32) -> Vec<i32> {
        (0..bound)
            .filter(|i| !self.0.contains(i) && !busy.contains(i))
            .take(count)
            .collect()
    }
}

impl std::fmt::Display for Indexes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut runs: Vec<(i32, i32)> = Vec::new();
        for &i in &self.0 {
            match runs.last_mut() {
                Some((_, last)) if *last + 1 == i => *last = i,
                _ => runs.push((i, i)),
            }
        }
        let mut first_run = true;
        for (first, last) in runs {
            if !first_run {
                f.write_str(",")?;
            }
            first_run = false;
            match last - first {
                0 => write!(f, "{first}")?,
                1 => write!(f, "{first},{last}")?,
                _ => write!(f, "{first}-{last}")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_are_written_as_upstream_writes_them() {
        let mut set = Indexes::default();
        for i in [0, 2, 4, 5, 7, 8, 9] {
            set.insert(i);
        }
        assert_eq!(set.to_string(), "0,2,4,5,7-9");
        assert_eq!(Indexes::default().to_string(), "");
    }

    #[test]
    fn parsing_round_trips_and_drops_indexes_at_or_above_completions() {
        let set = Indexes::parse("0,2,4,5,7-9", 100);
        assert_eq!(set.to_string(), "0,2,4,5,7-9");
        assert_eq!(set.total(), 7);
        assert_eq!(Indexes::parse("1-5", 3).to_string(), "1,2");
        assert_eq!(Indexes::parse("x,3,,a-b", 10).to_string(), "3");
    }

    #[test]
    fn pending_indexes_skip_completed_and_busy_ones() {
        let done = Indexes::parse("0,3", 6);
        let busy = BTreeSet::from([1]);
        assert_eq!(done.first_pending(&busy, 2, 6), [2, 4]);
        assert_eq!(done.first_pending(&busy, 10, 6), [2, 4, 5]);
    }
}
