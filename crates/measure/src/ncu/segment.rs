//! Segmentation: the launches of an export matched to (spec, variant) by the marker kernels
//! the profiling pass launches, and added up per variant.

use super::parse::{err, Export, Launch};
use super::{HOLD_KERNEL, MARKER_KERNEL, METRICS};
use crate::error::Result;
use std::collections::BTreeMap;
use std::path::Path;

/// Distinct kernel names kept per variant; launches of further names are counted together.
pub const MAX_KERNEL_NAMES: usize = 64;
/// The name the launches of kernels past [`MAX_KERNEL_NAMES`] are counted under.
pub const OTHER_KERNELS: &str = "(other kernels)";
/// What one variant's launches add up to: built launch by launch as the export streams.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    pub launches: u64,
    /// Kernel names in order of first launch, with counts (at most [`MAX_KERNEL_NAMES`], then
    /// [`OTHER_KERNELS`]).
    pub kernels: Vec<(String, u64)>,
    /// Per name of [`Tally::kernels`]: its launches' warp instructions and DRAM bytes (read and
    /// written), a missing value counted as 0: where a variant's work went.
    pub kernel_work: Vec<[f64; 2]>,
    /// Per metric: the sum, or `None` once a launch lacked it (missing, never zero).
    sums: BTreeMap<String, Option<f64>>,
}

impl Tally {
    fn add(&mut self, l: &Launch) {
        let first = self.launches == 0;
        self.launches += 1;
        let full = self.kernels.len() >= MAX_KERNEL_NAMES;
        let name = if full && !self.kernels.iter().any(|(k, _)| *k == l.kernel) {
            OTHER_KERNELS
        } else {
            l.kernel.as_str()
        };
        let at = match self.kernels.iter().position(|(k, _)| k == name) {
            Some(i) => i,
            None if !full => {
                self.kernels.push((name.to_string(), 0));
                self.kernel_work.push([0.0; 2]);
                self.kernels.len() - 1
            }
            None => {
                // The last name makes room for the others' count.
                let last = self.kernels.len() - 1;
                self.kernels[last].0 = OTHER_KERNELS.into();
                last
            }
        };
        self.kernels[at].1 += 1;
        let get = |m: &str| l.metrics.get(m).copied().flatten().unwrap_or(0.0);
        let work = &mut self.kernel_work[at];
        work[0] += get(super::INSTRUCTIONS);
        work[1] += get(super::DRAM_READ) + get(super::DRAM_WRITE);
        for m in METRICS {
            let v = l.metrics.get(m).copied().flatten();
            let entry =
                self.sums
                    .entry(m.to_string())
                    .or_insert(if first { Some(0.0) } else { None });
            *entry = entry.zip(v).map(|(a, b)| a + b);
        }
    }

    /// The sum of `metric` over every launch; missing when any launch lacks it or none ran.
    pub fn sum(&self, metric: &str) -> Option<f64> {
        self.sums.get(metric).copied().flatten()
    }

    /// The tally of some launches (tests, small exports).
    pub fn of(launches: &[&Launch]) -> Tally {
        let mut t = Tally::default();
        for l in launches {
            t.add(l);
        }
        t
    }
}

/// Splits launches at the markers into (case, variant) tallies as they stream.
pub struct Segmenter<'a> {
    cases: usize,
    path: &'a Path,
    current: Option<(usize, usize)>,
    seen: Vec<[bool; 2]>,
    tallies: Vec<[Tally; 2]>,
}

impl<'a> Segmenter<'a> {
    pub fn new(cases: usize, path: &'a Path) -> Self {
        Segmenter {
            cases,
            path,
            current: None,
            seen: vec![[false; 2]; cases],
            tallies: (0..cases).map(|_| Default::default()).collect(),
        }
    }

    /// One launch, at file line `line`.
    pub fn push(&mut self, l: &Launch, line: u64) -> Result<()> {
        // The name alone, or with its signature (`opledger_marker()`) as some exports print it.
        let named =
            |k: &str| l.kernel == k || l.kernel.strip_prefix(k).is_some_and(|r| r.starts_with('('));
        if named(HOLD_KERNEL) {
            return Ok(());
        }
        if named(MARKER_KERNEL) {
            let x = l.grid_x.filter(|&x| x >= 1).ok_or_else(|| {
                err(
                    self.path,
                    Some(line),
                    "a marker launch without a Grid Size of at least 1: export with the default columns",
                )
            })?;
            let (case, side) = ((x - 1) / 2, ((x - 1) % 2) as usize);
            if case >= self.cases as u64 {
                return Err(err(
                    self.path,
                    Some(line),
                    format!(
                        "a marker for case {case}, but the run has {} spec{}: is this the export of this run?",
                        self.cases,
                        if self.cases == 1 { "" } else { "s" }
                    ),
                ));
            }
            let case = case as usize;
            self.seen[case][side] = true;
            self.current = Some((case, side));
        } else if let Some((case, side)) = self.current {
            self.tallies[case][side].add(l);
        }
        Ok(())
    }

    /// The tallies `[case][0 before, 1 after]`; an export without markers is an error.
    pub fn finish(self) -> Result<Vec<[Tally; 2]>> {
        if !self.seen.iter().flatten().any(|&s| s) {
            return Err(err(
                self.path,
                None,
                format!("no `{MARKER_KERNEL}` launches: profile with `opledger run --ncu`, which marks each variant's launches"),
            ));
        }
        Ok(self.tallies)
    }
}

/// The launches of each (case, variant) of a parsed export, split at the markers.
pub fn segments(e: &Export, cases: usize, path: &Path) -> Result<Vec<[Tally; 2]>> {
    let mut s = Segmenter::new(cases, path);
    for l in &e.launches {
        s.push(l, 0)?;
    }
    s.finish()
}
