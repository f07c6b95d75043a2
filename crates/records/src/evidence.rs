//! The evidence of one spec: its ledger and the roofline's prediction (the plan), then the
//! measured pairs, the correctness of both variants' outputs against each other and the f64
//! reference, and the checks of the claims, the bound and the launch overhead. The gate is
//! not here (`gate/`): this stage hands it a measured result.

use crate::backend::pair::Side;
use crate::backend::{self, Backend};
use crate::device::Ceilings;
use crate::error::Result;
use crate::measure::{self, stats, MeasureConfig};
use crate::results::*;
use crate::rng::Rng;
use crate::spec::Spec;
use crate::verdict::CheckName;
use crate::verdict::{self, Achieved, Check, Correctness, Status};
use std::path::Path;

/// The spec's result before it is measured: its ledger and prediction on these ceilings (those
/// of its dtype), its claims and its gate settings; no samples, no checks yet.
pub fn planned(
    s: &Spec,
    backend: &dyn Backend,
    ceilings: &Ceilings,
    base_path: &Path,
) -> SpecResult {
    let ledger = s
        .workload
        .ledger(s.variants.before, s.variants.after, &backend.tiling());
    let before = variant_result(&ledger.before, ceilings);
    let after = variant_result(&ledger.after, ceilings);
    SpecResult {
        name: s.name.clone(),
        title: s.title.clone(),
        file: s.file.display().to_string(),
        spec_sha256: s.source_sha256.clone(),
        sweep: s.point.clone(),
        workload: s.workload.clone(),
        workload_desc: s.workload.describe(),
        checklist: s.checklist.clone(),
        expect: s.expect.clone(),
        tolerance: s.tolerance(),
        gate: s.gate.clone(),
        io_saving: ledger.io_saving(),
        predicted_time_saving: 1.0 - after.predicted.secs / before.predicted.secs,
        max_time_saving: 1.0
            - after.predicted.secs / (before.predicted.compute_secs + before.predicted.memory_secs),
        max_time_saving_measured: false,
        before,
        after,
        time_saving: None,
        launch_overhead_secs: None,
        samples: None,
        first_pass_pairs: None,
        correctness: None,
        baseline: BaselineOutcome::missing(
            base_path.display().to_string(),
            s.gate.max_regression.0,
        ),
        checks: Vec::new(),
        warnings: Vec::new(),
        error: None,
        status: Status::Fail,
        counters: None,
        counts: None,
        counts_gate: None,
        set_aside: Vec::new(),
        device_state: None,
    }
}

/// A spec measured: its planned result with the samples, correctness, checks and warnings of
/// one pass; a backend error fails the spec with a `run` check and sets `error` (the run goes
/// on with the other specs).
pub fn measured(
    s: &Spec,
    backend: &dyn Backend,
    ceilings: &Ceilings,
    cfg: &MeasureConfig,
    mut planned: SpecResult,
    progress: impl FnMut(usize),
) -> SpecResult {
    if let Err(e) = measure_into(s, backend, ceilings, cfg, &mut planned, progress) {
        planned.error = Some(e.to_string());
        planned
            .checks
            .push(Check::new(CheckName::Run, Status::Fail, e.to_string()));
    }
    planned
}

/// The command line's sampling settings, lowered by the spec's own limits.
pub fn effective_config(cfg: &MeasureConfig, m: &crate::spec::SpecMeasure) -> MeasureConfig {
    let mut c = *cfg;
    if let Some(v) = m.min_pairs {
        c.min_pairs = c.min_pairs.min(v.0 as usize);
    }
    if let Some(v) = m.max_pairs {
        c.max_pairs = c.max_pairs.min(v.0 as usize).max(c.min_pairs);
    }
    if let Some(v) = m.time_cap_secs {
        c.time_cap_secs = c.time_cap_secs.min(v.0);
    }
    c
}

fn measure_into(
    s: &Spec,
    backend: &dyn Backend,
    ceilings: &Ceilings,
    cfg: &MeasureConfig,
    r: &mut SpecResult,
    mut progress: impl FnMut(usize),
) -> Result<()> {
    let kind = s.workload.as_kind();
    // The kind's seeded inputs: the backend computes on them. The checked pair runs on a
    // second set, from another seed, which the sides keep from then on (a result kept from
    // the runs before fails the check); the reference is evaluated on those, here, outside
    // any backend. The second set is made when the checked pair comes, once the case has let
    // go of the first (`measure_pairs`).
    let inputs = std::sync::Arc::new(kind.inputs(cfg.seed));
    let ctx = backend::pair::PairContext {
        spec_dir: s.dir(),
        flush_bytes: backend.flush_bytes().max(64 << 20),
    };
    let mut case = backend::pair::prepare(
        backend,
        &s.workload,
        s.variants,
        &s.implementations,
        inputs.clone(),
        &ctx,
    )?;
    drop(inputs);
    let checked_inputs = std::cell::OnceCell::new();
    // The same set whoever asks first (the same seed's values either way).
    let checked =
        || checked_inputs.get_or_init(|| std::sync::Arc::new(kind.inputs(checked_seed(cfg.seed))));
    let tol = r.tolerance.tolerance();
    // The checked pair's outputs against the reference: at once where the case allows (no
    // copies of them kept), else after the samples.
    let mut checked_at_once = None;
    let mut check_now = |p: &dyn backend::pair::Pair| -> Result<()> {
        let outputs = (p.output(Side::Before)?, p.output(Side::After)?);
        checked_at_once = Some(correctness(
            s,
            checked(),
            (&outputs.0, &outputs.1),
            &tol,
            cfg.seed,
        ));
        Ok(())
    };
    // Read while the samples run, so that it is a busy GPU's state.
    let reading = backend.device_state();
    // The arithmetic alone of the backend's own kernels (the level roof, `on_level`), timed
    // after each of the first pairs: on a machine whose vector rate changes from one second to
    // the next, one timing at one moment set a roof that the samples' median, taken over
    // seconds, was then held to (docs/performance.md).
    let own_arithmetic = [
        (s.implementations.before.is_some(), s.variants.before),
        (s.implementations.after.is_some(), s.variants.after),
    ]
    .into_iter()
    .any(|(user, v)| own_executed(s, backend, user, v).is_some());
    let mut arithmetic_secs = Vec::new();
    let mut after_pair = |n: usize| {
        progress(n);
        if own_arithmetic && arithmetic_secs.len() < ARITHMETIC_TIMINGS {
            arithmetic_secs.extend(backend.arithmetic_secs(&s.workload));
        }
    };
    let samples = measure::measure_pairs(
        case.as_mut(),
        cfg,
        || checked().clone(),
        || std::sync::Arc::new(kind.inputs(confirm_seed(cfg.seed))),
        Some(&mut check_now),
        &mut after_pair,
    )?;
    if let Some(reading) = reading {
        match reading.finish() {
            Ok(state) => {
                r.warnings.extend(slowed_warning(&state));
                r.device_state = Some(state);
            }
            Err(e) => r.warnings.push(format!("GPU state not read: {e}")),
        }
    }

    // Correctness on the outputs of the last timed runs.
    case.collect_outputs()?;
    r.before.implementation = case.implementation(Side::Before);
    r.after.implementation = case.implementation(Side::After);
    let correctness = match checked_at_once {
        Some(c) => c,
        None => {
            let outputs = (case.output(Side::Before)?, case.output(Side::After)?);
            correctness(s, checked(), (&outputs.0, &outputs.1), &tol, cfg.seed)
        }
    };
    drop(case);
    r.checks.push(correctness.check(&tol));
    r.correctness = Some(correctness);
    let arithmetic_secs = (!arithmetic_secs.is_empty()).then(|| stats::median(&arithmetic_secs));
    judge_timings(s, backend, ceilings, cfg, r, samples, arithmetic_secs);
    Ok(())
}

/// How many of the first pairs are each followed by a timing of the arithmetic alone (each
/// the fastest of nine runs of it, `arithmetic_secs_per_element`); their median is the level
/// roof's.
const ARITHMETIC_TIMINGS: usize = 9;

/// The warning of a GPU whose clocks something held down while a spec's samples ran.
fn slowed_warning(state: &crate::device::DeviceState) -> Option<String> {
    let slowed = state.slowed_by();
    if slowed.is_empty() {
        return None;
    }
    let names: Vec<String> = slowed.iter().map(|r| r.name().replace('_', " ")).collect();
    let figures = state.figures();
    Some(format!(
        "the GPU's clocks were held down while the samples ran ({}; {}): its times are a slowed GPU's — cool it, raise its power limit or measure again",
        names.join(", "),
        figures.join(", ")
    ))
}

pub use crate::measure::{checked_seed, confirm_seed};

/// Both variants' outputs against each other (where the kind says they agree) and against the
/// f64 reference at sampled elements (where the kind has one; without it, kind `custom`, the
/// before side is the after side's reference), and the guard against NaN and constant outputs.
pub fn correctness(
    s: &Spec,
    inputs: &crate::kinds::Tensors,
    (out_b, out_a): (&[f32], &[f32]),
    tol: &crate::spec::Tolerance,
    seed: u64,
) -> Correctness {
    let (vb, va) = (s.variants.before, s.variants.after);
    let kind = s.workload.as_kind();
    let n = kind.output_len() as usize;
    let mut rng = Rng::new(seed ^ 0xc0ffee);
    let mut idx: Vec<usize> = (0..kind.reference_samples().min(n))
        .map(|_| rng.below(n))
        .collect();
    idx.extend([0, n - 1]);
    let agree = kind.variants_agree();
    let referenced = kind.has_reference();
    if !referenced {
        idx.clear();
    }
    let guard = [(vb, out_b), (va, out_a)]
        .into_iter()
        .filter_map(|(v, out)| verdict::output_guard(v.name(), out))
        .collect();
    let shape = kind.output_shape();
    let cols = shape.last().copied().unwrap_or(1).max(1) as usize;
    Correctness {
        guard,
        reference: referenced,
        variants_comparable: agree,
        after_vs_before: if agree {
            verdict::compare_all(&out_a[..n], &out_b[..n], tol, cols)
        } else {
            verdict::compare(out_a, |_| 0.0, 0..0, tol, cols)
        },
        before_vs_reference: verdict::compare(
            out_b,
            |i| kind.reference(inputs, vb, i),
            idx.iter().copied(),
            tol,
            cols,
        ),
        after_vs_reference: verdict::compare(
            out_a,
            |i| kind.reference(inputs, va, i),
            idx.iter().copied(),
            tol,
            cols,
        ),
        shape,
    }
}

/// The timings judged: each variant's summary and the roofline fraction it reached, the paired
/// saving, the checks of the bound and the claims (and the launch overhead of a launch chain),
/// and the warnings about the measurement itself.
fn judge_timings(
    s: &Spec,
    backend: &dyn Backend,
    ceilings: &Ceilings,
    cfg: &MeasureConfig,
    r: &mut SpecResult,
    samples: crate::measure::PairSamples,
    arithmetic_secs: Option<f64>,
) {
    let kind = s.workload.as_kind();
    let res = cfg.bootstrap_resamples;
    let sb = stats::summarize(&samples.before_secs, res, cfg.seed);
    let sa = stats::summarize(&samples.after_secs, res, cfg.seed);
    let ab = verdict::achieved(&r.before.ledger, sb.median_secs, ceilings);
    let aa = verdict::achieved(&r.after.ledger, sa.median_secs, ceilings);
    let saving = stats::paired_saving_ci(&samples.before_secs, &samples.after_secs, res, cfg.seed);
    // A before side slower than its roofline (four passes where the ledger counts bytes only,
    // a naive loop) saves more by being fused, legitimately: the bound is the after side at its
    // roofline against the before side's measured time.
    let against_measured = 1.0 - r.after.predicted.secs / sb.median_secs;
    if against_measured > r.max_time_saving {
        r.max_time_saving = against_measured;
        r.max_time_saving_measured = true;
    }
    r.checks.push(verdict::bound_check(
        s.expect.bound,
        &r.after.predicted,
        &aa,
    ));
    r.checks.push(verdict::io_saving_check(
        r.io_saving,
        s.expect.io_saving.as_ref(),
    ));
    let launch_ops = kind.launch_chain_ops();
    let launch_bound = launch_ops.is_some();
    r.checks.push(verdict::time_saving_check(
        &saving,
        s.expect.time_saving.as_ref(),
        r.predicted_time_saving,
        (!launch_bound).then_some(r.max_time_saving),
    ));
    if let Some(n_ops) = launch_ops {
        launch_overhead(s, cfg, r, &samples, n_ops);
    }
    let sides = TimedSides {
        ledgers: [&r.before.ledger, &r.after.ledger],
        achieved: [&ab, &aa],
        median_secs: [sb.median_secs, sa.median_secs],
    };
    let timing = timing(s, backend, ceilings, cfg, &sides, launch_bound);
    r.checks.push(timing);
    if let Some(c) = verdict::checked_run_check(
        &samples,
        (s.variants.before.name(), r.before.implementation.is_some()),
        (s.variants.after.name(), r.after.implementation.is_some()),
    ) {
        r.checks.push(c);
    }
    r.warnings.extend(backend.case_warnings(&s.workload));
    let beyond = |l: &crate::ledger::VariantLedger| beyond_cache(backend, l);
    r.warnings.extend(verdict::measurement_warnings(
        &sb,
        &sa,
        &aa,
        &ab,
        launch_bound,
        [beyond(&r.before.ledger), beyond(&r.after.ledger)],
    ));
    on_level(
        s,
        backend,
        ceilings,
        r,
        (sb.median_secs, sa.median_secs),
        arithmetic_secs,
    );
    r.before.summary = Some(sb);
    r.after.summary = Some(sa);
    r.before.achieved = Some(ab);
    r.after.achieved = Some(aa);
    r.time_saving = Some(saving);
    r.samples = Some(samples);
}

/// Whether the cold flush evicts the case's data from the whole last level: its own lines
/// evicted, or a read of at least the last level (a smaller read may leave a side's inputs in
/// it).
fn evicts_all(backend: &dyn Backend) -> bool {
    backend.flush_method() == crate::device::FlushMethod::Evict
        || backend.flush_bytes() >= backend.device().llc_bytes
}

/// Whether no cache can serve a side's traffic: the flush empties the last level and nine
/// tenths of the ledger's bytes are of tensors larger than it. Such a side moving more than
/// the probe measured did not stay in cache; its memory was faster than the probe's.
fn beyond_cache(backend: &dyn Backend, l: &crate::ledger::VariantLedger) -> bool {
    let llc_bytes = backend.device().llc_bytes;
    let big_bytes = l
        .movements
        .iter()
        .filter(|m| m.bytes > llc_bytes)
        .map(crate::ledger::Movement::traffic_bytes)
        .fold(0u64, u64::saturating_add);
    evicts_all(backend) && big_bytes as f64 >= 0.9 * l.bytes_moved() as f64
}

/// The `timing` check: neither side faster than the device can go. A probe slowed by a
/// neighbour reads a roof low and makes a fast kernel look impossible, so a run that fails it
/// is judged again against the higher roofs of a second probe, made now; only a side above both
/// fails (and the sentence names both probes).
fn timing(
    s: &Spec,
    backend: &dyn Backend,
    ceilings: &Ceilings,
    cfg: &MeasureConfig,
    sides: &TimedSides<'_>,
    launch_bound: bool,
) -> Check {
    // The compulsory bytes are judged only where the flush evicts the case's data from the
    // whole last level (its own lines evicted, or a read of at least the last level): a smaller
    // read may leave a side's inputs in it.
    let output = s.workload.as_kind().output_name();
    let evicts_all = evicts_all(backend);
    let compulsory = |i: usize, c: &Ceilings| {
        let (read, write) = sides.ledgers[i].compulsory_bytes(&output)?;
        evicts_all.then(|| (read + write) as f64 / sides.median_secs[i] / c.bandwidth())
    };
    let judge = |c: &Ceilings, [ab, aa]: [&Achieved; 2]| {
        verdict::timing_check(
            [
                verdict::TimedSide {
                    name: s.variants.before.name(),
                    achieved: ab,
                    compulsory_fraction: compulsory(0, c),
                },
                verdict::TimedSide {
                    name: s.variants.after.name(),
                    achieved: aa,
                    compulsory_fraction: compulsory(1, c),
                },
            ],
            cfg.cold,
            launch_bound,
            verdict::TimingLimits {
                bandwidth_factor: verdict::bandwidth_limit_factor(
                    backend.kind(),
                    backend.datasheet().map(|d| d.bw_gbps * 1e9),
                    c.bandwidth(),
                ),
                compulsory_factor: backend.kind().impossible_compulsory_factor(),
                compute_factor: verdict::compute_limit_factor(
                    backend.kind(),
                    backend.datasheet().map(|d| {
                        d.peak_flops_per_sec(s.workload.dtype() == crate::kinds::DType::F32)
                    }),
                    c.peak_flops(),
                ),
            },
        )
    };
    let first = judge(ceilings, sides.achieved);
    if first.status != Status::Fail {
        return first;
    }
    // The same probe again, at the first one's array size (the user's `--probe-mib`, or the
    // default): a second probe at another size would compare another memory level's roof.
    let Ok(again) = backend.ceilings(Some(ceilings.array_bytes)) else {
        return first;
    };
    let again = again.for_dtype(s.workload.dtype());
    let best = ceilings.max_with(&again);
    let ab = verdict::achieved(sides.ledgers[0], sides.median_secs[0], &best);
    let aa = verdict::achieved(sides.ledgers[1], sides.median_secs[1], &best);
    let mut second = judge(&best, [&ab, &aa]);
    let probes = format!(
        "probed twice, on arrays of {} then {} MiB: FMA peak {:.1} then {:.1} GFLOP/s, triad {:.2} then {:.2} GB/s",
        ceilings.array_bytes >> 20,
        again.array_bytes >> 20,
        ceilings.peak_flops() / 1e9,
        again.peak_flops() / 1e9,
        ceilings.bandwidth() / 1e9,
        again.bandwidth() / 1e9
    );
    second.detail = if second.status == Status::Fail {
        format!("{}; {probes}, judged on the higher", second.detail)
    } else {
        format!(
            "{}; above the first probe's roofs only ({probes}): the first probe ran slow",
            second.detail
        )
    };
    second
}

/// Both sides as the timing check reads them: ledgers, what they achieved, their medians.
struct TimedSides<'a> {
    ledgers: [&'a crate::ledger::VariantLedger; 2],
    achieved: [&'a Achieved; 2],
    median_secs: [f64; 2],
}

/// What `variant` executes at the level it ran at, where it is the backend's own kernel (not a
/// `user`'s, which executes what it does) and that differs from the ledger's count.
fn own_executed(
    s: &Spec,
    backend: &dyn Backend,
    user: bool,
    variant: crate::spec::Variant,
) -> Option<crate::ledger::Executed> {
    (!user)
        .then(|| backend.executed(&s.workload, variant))
        .flatten()
}

/// Each side's level roofline, for the backend's own kernels ([`own_executed`]); the
/// arithmetic's time is `between_pairs_secs`, the median of the timings after the first pairs
/// (`measure_into`).
fn on_level(
    s: &Spec,
    backend: &dyn Backend,
    ceilings: &Ceilings,
    r: &mut SpecResult,
    (before_median_secs, after_median_secs): (f64, f64),
    between_pairs_secs: Option<f64>,
) {
    for (v, variant, median) in [
        (&mut r.before, s.variants.before, before_median_secs),
        (&mut r.after, s.variants.after, after_median_secs),
    ] {
        v.on_level = own_executed(s, backend, v.implementation.is_some(), variant).map(|e| {
            verdict::on_level(e, between_pairs_secs, &v.ledger, ceilings).measured(median)
        });
    }
}

/// A launch chain's per-launch overhead, (T_eager − T_graph)/(N − 1) with its paired CI, and
/// its check.
fn launch_overhead(
    s: &Spec,
    cfg: &MeasureConfig,
    r: &mut SpecResult,
    samples: &crate::measure::PairSamples,
    n_ops: u64,
) {
    let res = cfg.bootstrap_resamples;
    let diff =
        stats::paired_difference_ci(&samples.before_secs, &samples.after_secs, res, cfg.seed);
    let per = |v: f64| v / (n_ops - 1) as f64;
    let overhead = stats::Estimate {
        point: per(diff.point),
        lo: per(diff.lo),
        hi: per(diff.hi),
    };
    r.checks.push(verdict::launch_overhead_check(
        &overhead,
        n_ops,
        &s.variants,
    ));
    r.launch_overhead_secs = Some(overhead);
}

fn variant_result(v: &crate::ledger::VariantLedger, c: &Ceilings) -> VariantResult {
    VariantResult {
        variant: v.variant,
        implementation: None,
        bytes: v.bytes_moved(),
        flops: v.flops,
        intensity: v.intensity(),
        predicted: verdict::predict(v, c),
        ledger: v.clone(),
        summary: None,
        achieved: None,
        on_level: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checked pair's inputs differ from the timed runs' in every tensor of every kind: a
    /// result kept from the runs before cannot match them.
    #[test]
    fn the_checked_seed_gives_every_kind_other_inputs() {
        let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
        let mut files: Vec<_> = std::fs::read_dir(root.join("tests/fixtures/kinds"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.extend(
            [
                "tests/fixtures/good/tiny-chain.yaml",
                "examples/numpy/swiglu.yaml",
                "specs/fuse-bias-gelu.yaml",
            ]
            .map(|f| root.join(f)),
        );
        for file in files {
            let spec = crate::spec::load(&file).unwrap_or_else(|e| panic!("{e}"));
            let kind = spec.workload.as_kind();
            if kind.input_bytes() > 4 << 20 {
                // A large example: its inputs are made the same way, at a size a test avoids.
                continue;
            }
            for seed in [MeasureConfig::default().seed, 1, 42] {
                let (a, b) = (kind.inputs(seed), kind.inputs(checked_seed(seed)));
                assert!(a.iter().count() > 0, "{}", file.display());
                for ((name, shape, x), (_, shape_b, y)) in a.iter().zip(b.iter()) {
                    assert_eq!(shape, shape_b, "{} {name}", file.display());
                    let same = x.iter().zip(y).filter(|(p, q)| p == q).count();
                    assert!(
                        same * 10 < x.len().max(10),
                        "{} {name}: {same} of {} elements equal",
                        file.display(),
                        x.len()
                    );
                }
            }
        }
    }
}
