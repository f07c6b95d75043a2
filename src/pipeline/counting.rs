//! A run's counted sides, all counted before anything is timed and several specs at once: a
//! spec's own sides count in one single-threaded process under Valgrind (one start, one set of
//! inputs for both), whose counts do not depend on what else the machine runs, so the
//! machine's cores count specs side by side, the longest first (each in a work folder of its
//! own, of the same name length: the counts are those of one at a time). Timing comes after,
//! on a quiet machine. A GPU's counts (Nsight Compute, one profiled process on one device) stay
//! one at a time. `pipeline::run` counts every spec this way before its timing loop.

use super::prepare::Prepared;
use super::RunOptions;
use crate::error::Result;
use crate::measure::counts::{valgrind::Counter, Counted};

/// Each counted spec's counts (by the spec's index), counted up to the machine's cores at once
/// and as many as its memory holds; `None` for a spec that is not counted.
pub(super) fn count_all(p: &Prepared, opts: &RunOptions) -> Vec<Option<Result<Counted>>> {
    let mut out: Vec<Option<Result<Counted>>> = (0..p.specs.len()).map(|_| None).collect();
    let Some(counter) = &p.counter else {
        return out;
    };
    let counted: Vec<usize> = (0..p.specs.len())
        .filter(|&i| opts.mode_of(&p.specs[i]).counts() && p.counts_baselines.get(i).is_some())
        .collect();
    // Cases that count the same thing (sweep points that `measure.counts_sizes` maps to one
    // size) are counted once: counts of one binary, workload and seed repeat exactly.
    let (jobs, copies) =
        crate::measure::counts::distinct(counted.iter().map(|&i| (i, p.specs[i].counted().ok())));
    if jobs.is_empty() {
        return out;
    }
    // The longest first (by its counts baseline where it has one), so that the last to finish
    // is a short one. A spec whose counted form is refused is left to `take`, which makes its
    // error again.
    let mut order: Vec<(f64, usize, crate::spec::Spec)> = jobs
        .iter()
        .filter_map(|&i| {
            let s = p.specs[i].counted().ok()?.into_owned();
            Some((counting_cost(p, counter, i, &s), i, s))
        })
        .collect();
    order.sort_by(|(a, ..), (b, ..)| b.total_cmp(a));
    let (indices, counted): (Vec<usize>, Vec<crate::spec::Spec>) =
        order.into_iter().map(|(_, i, s)| (i, s)).unzip();
    let at_once = counter.at_once(&counted);
    let alike = if copies.is_empty() {
        String::new()
    } else {
        format!(" ({} more count the same, once)", copies.len())
    };
    p.progress.say(&format!(
        "opledger: counting the sides of {}{alike} under {}, {at_once} at a time",
        crate::report::format::counted(jobs.len() as u64, "spec", "specs"),
        if counter.engine.gpu.is_some() {
            "Nsight Compute"
        } else {
            "Valgrind"
        }
    ));
    // A line as each spec's count ends: counting is the run's longest silence otherwise.
    let progress = &p.progress;
    let done = |j: usize, k: usize, c: &Result<Counted>, secs: f64| {
        progress.counted(&counted[j].name, (k, counted.len()), secs, c.is_err());
    };
    for (i, c) in indices
        .into_iter()
        .zip(counter.count_many(&counted, at_once, &done))
    {
        out[i] = Some(c);
    }
    for (i, from) in copies {
        let copy = match &out[from] {
            Some(Ok(c)) => Counted {
                counts: crate::measure::counts::SpecCounts {
                    name: p.specs[i].name.clone(),
                    ..c.counts.clone()
                },
                ..c.clone()
            },
            // A failed count is made again for the copy by `take`, with its own error.
            _ => continue,
        };
        out[i] = Some(Ok(copy));
    }
    out
}

/// How long spec `i` (`counted`: at its counted sizes) takes to count, in units that only
/// order the specs: the instructions and data accesses its counts baseline recorded (what
/// Valgrind's time follows), else [`Counter::ledger_cost`].
fn counting_cost(p: &Prepared, counter: &Counter, i: usize, counted: &crate::spec::Spec) -> f64 {
    p.counts_baselines
        .get(i)
        .and_then(|b| b.baseline.as_ref())
        .map(|b| {
            [&b.before, &b.after]
                .into_iter()
                .flatten()
                .map(|side| {
                    let c = &side.counts;
                    (c.instructions + c.data_reads + c.data_writes) as f64
                })
                .sum::<f64>()
        })
        .filter(|&units| units > 0.0)
        .unwrap_or_else(|| counter.ledger_cost(counted))
}

/// Spec `i`'s counts as [`count_all`] made them, or (a spec it did not count) counted now.
pub(super) fn take(
    first: &mut [Option<Result<Counted>>],
    i: usize,
    counter: &Counter,
    counted: &crate::spec::Spec,
) -> Result<Counted> {
    first
        .get_mut(i)
        .and_then(Option::take)
        .unwrap_or_else(|| counter.count_spec_with_outputs(counted))
}

/// What [`taken`] gave, if anything.
pub(super) type Taken<'p> = (
    &'p Counter,
    &'p crate::gate::reference::CountsBase,
    Result<Counted>,
);

/// How the gates of a spec's other measurements than time call it: the counts gate's call on
/// what was `taken` (none where the run does not count it).
pub(super) fn calls(
    taken: Option<&Taken<'_>>,
    counted: &crate::spec::Spec,
    require_baseline: bool,
) -> Vec<crate::gate::rule::GateCall> {
    taken
        .map(|(_, cb, m)| crate::gate::counts_call(m, counted, &reference(cb, require_baseline)))
        .into_iter()
        .collect()
}

/// Spec `i`'s counts with what counted them and the counts baseline it is judged against, where
/// this run counts it: counted before any timing ([`count_all`]), else now ([`take`]).
pub(super) fn taken<'p>(
    p: &'p Prepared,
    first: &mut [Option<Result<Counted>>],
    i: usize,
    counted: &crate::spec::Spec,
) -> Option<Taken<'p>> {
    let (counter, base) = (p.counter.as_ref()?, p.counts_baselines.get(i)?);
    Some((counter, base, take(first, i, counter, counted)))
}

/// The counts baseline `cb` as the counts gate reads it.
pub(super) fn reference(
    cb: &crate::gate::reference::CountsBase,
    require_baseline: bool,
) -> crate::gate::counts::CountsReference<'_> {
    crate::gate::counts::CountsReference {
        baseline: cb.baseline.as_ref(),
        path: &cb.path,
        history_run: cb.history_run.as_deref(),
        reference: cb.reference.as_ref(),
        require_baseline,
    }
}
