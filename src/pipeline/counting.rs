//! A run's counted sides, all counted before anything is timed and several at once: each side
//! counts in a single-threaded process under Valgrind, whose counts do not depend on what else
//! the machine runs, so the machine's cores count specs side by side (each in a work folder of
//! its own, of the same name length: the counts are those of one at a time). Timing comes after,
//! on a quiet machine. A GPU's counts (Nsight Compute, one profiled process on one device) stay
//! one at a time. `pipeline::run` counts every spec this way before its timing loop.

use super::prepare::Prepared;
use super::RunOptions;
use crate::error::Result;
use crate::measure::counts::{valgrind::Counter, Counted};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Each counted spec's counts (by the spec's index), counted up to the machine's cores at once
/// and as many as its memory holds; `None` for a spec that is not counted.
pub(super) fn count_all(p: &Prepared, opts: &RunOptions) -> Vec<Option<Result<Counted>>> {
    let mut out: Vec<Option<Result<Counted>>> = (0..p.specs.len()).map(|_| None).collect();
    let Some(counter) = &p.counter else {
        return out;
    };
    let jobs: Vec<usize> = (0..p.specs.len())
        .filter(|&i| opts.mode_of(&p.specs[i]).counts() && p.counts_baselines.get(i).is_some())
        .collect();
    if jobs.is_empty() {
        return out;
    }
    let at_once = concurrency(counter, p, &jobs);
    p.progress.say(&format!(
        "opledger: counting the sides of {} spec(s) under {}, {at_once} at a time",
        jobs.len(),
        if counter.engine.gpu.is_some() {
            "Nsight Compute"
        } else {
            "Valgrind"
        }
    ));
    let next = AtomicUsize::new(0);
    let specs = &p.specs;
    let results = Mutex::new(&mut out);
    std::thread::scope(|scope| {
        for k in 0..at_once {
            let (next, results, jobs) = (&next, &results, &jobs);
            scope.spawn(move || {
                // The first worker counts with the run's own counter; the others each in a
                // work folder of their own.
                let own;
                let counter = if k == 0 {
                    counter
                } else {
                    match counter.another() {
                        Ok(c) => {
                            own = c;
                            &own
                        }
                        Err(_) => return,
                    }
                };
                loop {
                    let j = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&i) = jobs.get(j) else { break };
                    let counted = specs[i]
                        .counted()
                        .and_then(|s| counter.count_spec_with_outputs(&s));
                    if let Ok(mut r) = results.lock() {
                        r[i] = Some(counted);
                    }
                }
            });
        }
    });
    out
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

/// How many counted processes run at once: the cores there are, no more than the jobs, and no
/// more than the memory holds of the largest of them. One for a GPU's profiler, and one where a
/// side is a worker: ending a worker ends the processes left to this one without a worker's
/// token, which a counted process of another spec would be.
fn concurrency(counter: &Counter, p: &Prepared, jobs: &[usize]) -> usize {
    let workers = jobs.iter().any(|&i| {
        let sides = &p.specs[i].implementations;
        [&sides.before, &sides.after]
            .iter()
            .any(|s| matches!(s, Some(crate::spec::Implementation::Worker(_))))
    });
    if counter.engine.gpu.is_some() || workers {
        return 1;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let largest = jobs
        .iter()
        .filter_map(|&i| p.specs[i].counted().ok())
        .map(|s| counter.host_bytes(&s))
        .max()
        .unwrap_or(0)
        .max(1);
    let by_memory = crate::backend::available_memory_bytes().map_or(usize::MAX, |a| {
        usize::try_from(a / 10 * 9 / largest).unwrap_or(usize::MAX)
    });
    cores.min(jobs.len()).min(by_memory).max(1)
}
