//! A run's counted sides, all counted before anything is timed and several at once: each side
//! counts in a single-threaded process under Valgrind, whose counts do not depend on what else
//! the machine runs, so the machine's cores count sides side by side — a spec's two sides too
//! — (each in a work folder of its own, of the same name length: the counts are those of one
//! at a time). Timing comes after,
//! on a quiet machine. A GPU's counts (Nsight Compute, one profiled process on one device) stay
//! one at a time. `pipeline::run` counts every spec this way before its timing loop.

use super::prepare::Prepared;
use super::RunOptions;
use crate::backend::pair::Side;
use crate::error::Result;
use crate::measure::counts::{valgrind::Counter, Counted, SideCounts};

/// One side's counts (or why not) and the output its counted call left.
type SideResult = Result<(SideCounts, Option<Vec<f32>>)>;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

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
    let (jobs, copies) = distinct(p, &counted);
    if jobs.is_empty() {
        return out;
    }
    let at_once = concurrency(counter, p, &jobs);
    let alike = if copies.is_empty() {
        String::new()
    } else {
        format!(" ({} more count the same, once)", copies.len())
    };
    p.progress.say(&format!(
        "opledger: counting the sides of {} spec(s){alike} under {}, {at_once} at a time",
        jobs.len(),
        if counter.engine.gpu.is_some() {
            "Nsight Compute"
        } else {
            "Valgrind"
        }
    ));
    // Valgrind's units of work are sides (a spec's two sides count side by side, so that the
    // largest spec does not hold one core while the other waits); a GPU's profiled process
    // runs both sides of a spec.
    let per_side = counter.engine.gpu.is_none();
    let units: Vec<(usize, Option<Side>)> = jobs
        .iter()
        .flat_map(|&i| {
            if per_side {
                vec![(i, Some(Side::Before)), (i, Some(Side::After))]
            } else {
                vec![(i, None)]
            }
        })
        .collect();
    let sides: Mutex<Vec<[Option<SideResult>; 2]>> =
        Mutex::new((0..p.specs.len()).map(|_| [None, None]).collect());
    let next = AtomicUsize::new(0);
    let specs = &p.specs;
    let results = Mutex::new(&mut out);
    std::thread::scope(|scope| {
        for k in 0..at_once {
            let (next, results, units, sides) = (&next, &results, &units, &sides);
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
                    let Some(&(i, side)) = units.get(j) else {
                        break;
                    };
                    let counted = specs[i].counted();
                    match side {
                        None => {
                            let c = counted.and_then(|s| counter.count_spec_with_outputs(&s));
                            if let Ok(mut r) = results.lock() {
                                r[i] = Some(c);
                            }
                        }
                        Some(side) => {
                            let c = counted.and_then(|s| counter.count_side(&s, side));
                            if let Ok(mut r) = sides.lock() {
                                r[i][side as usize] = Some(c);
                            }
                        }
                    }
                }
            });
        }
    });
    assemble_sides(p, counter, sides.into_inner().unwrap_or_default(), &mut out);
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

/// Each spec whose two sides were counted apart (`sides`, by the spec's index) put together
/// into `out`: its counts, or the first error of its sides.
fn assemble_sides(
    p: &Prepared,
    counter: &Counter,
    sides: Vec<[Option<SideResult>; 2]>,
    out: &mut [Option<Result<Counted>>],
) {
    for (i, [before, after]) in sides.into_iter().enumerate() {
        let (Some(before), Some(after)) = (before, after) else {
            continue;
        };
        out[i] = Some(match (before, after, p.specs[i].counted()) {
            (Ok((b, bo)), Ok((a, ao)), Ok(s)) => Ok(counter.assemble(&s, b, a, [bo, ao])),
            (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => Err(e),
        });
    }
}

/// Of the counted cases `counted`, those to count (the first of each distinct counted spec)
/// and the others, each with the case it copies. Only cases whose sides are opledger's own
/// kernels are merged: a worker or a user's kernel is its own process, counted where it runs.
fn distinct(p: &Prepared, counted: &[usize]) -> (Vec<usize>, Vec<(usize, usize)>) {
    let key = |i: usize| -> Option<String> {
        let s = p.specs[i].counted().ok()?;
        let own = s.implementations.before.is_none() && s.implementations.after.is_none();
        own.then(|| {
            serde_json::to_string(&(
                &s.workload,
                s.variants.before,
                s.variants.after,
                &s.measure.counts_cache_model,
            ))
            .unwrap_or_default()
        })
    };
    let mut seen: Vec<(String, usize)> = Vec::new();
    let (mut jobs, mut copies) = (Vec::new(), Vec::new());
    for &i in counted {
        match key(i) {
            Some(k) => match seen.iter().find(|(other, _)| *other == k) {
                Some(&(_, first)) => copies.push((i, first)),
                None => {
                    seen.push((k, i));
                    jobs.push(i);
                }
            },
            None => jobs.push(i),
        }
    }
    (jobs, copies)
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
    // Two sides a spec, counted apart.
    cores.min(2 * jobs.len()).min(by_memory).max(1)
}
