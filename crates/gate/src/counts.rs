//! The counts gate: each counted side's metric (instructions, DRAM bytes or estimated cycles,
//! `gate.metric`) against its counts baseline, with its own limit (`gate.counts_max_regression`,
//! 1% by default). Counts of one binary repeat exactly, so there is no noise model: a rise above
//! the limit FAILs — unless the baseline was counted by another Valgrind, compiler or C library,
//! which can move counts with the same code: then INCONCLUSIVE, naming the difference.

use crate::baseline::counts::{CountsBaseline, CountsSide};
use crate::measure::counts::{FunctionCounts, SideCounts, SpecCounts};
use crate::results::{
    CountsChange, CountsGateOutcome, CountsState, EngineDifference, FunctionChange,
};
use crate::spec::{Spec, Workload};
use crate::verdict::{Check, CheckName, Status};
use std::path::Path;

/// How many functions an outcome lists where the work moved.
const FUNCTIONS_SHOWN: usize = 5;

/// `now` judged against `base` (its counts baseline, if any) under `s`'s gate settings.
pub fn judge(
    s: &Spec,
    now: &SpecCounts,
    base: Option<&CountsBaseline>,
    path: &Path,
) -> CountsGateOutcome {
    judge_parts(
        &s.workload,
        metric_of(&s.gate, &now.engine),
        s.gate.counts_max_regression.0,
        now,
        base,
        path,
    )
}

/// The metric `gate` compares counts of `engine` on: the one it names, else the engine's.
pub fn metric_of(
    gate: &crate::spec::Gate,
    engine: &crate::measure::counts::CountsEngine,
) -> crate::spec::CountsMetric {
    gate.metric.unwrap_or_else(|| engine.default_metric())
}

/// [`judge`] with the gate's settings given apart (a stored result's, for `compare`).
pub fn judge_parts(
    workload: &Workload,
    metric: crate::spec::CountsMetric,
    limit: f64,
    now: &SpecCounts,
    base: Option<&CountsBaseline>,
    path: &Path,
) -> CountsGateOutcome {
    let value = |c: &SideCounts| c.counts().map(|c| c.metric(metric));
    let saving = match (value(&now.before), value(&now.after)) {
        (Some(b), Some(a)) if b > 0 => Some(1.0 - a as f64 / b as f64),
        _ => None,
    };
    let mut o = CountsGateOutcome {
        state: CountsState::NoBaseline,
        metric,
        limit,
        path: path.display().to_string(),
        baseline_git_sha: None,
        before: None,
        after: None,
        saving,
        differences: Vec::new(),
        functions: Vec::new(),
        functions_side: None,
        history_run: None,
        reference: None,
    };
    let Some(base) = base else {
        return o;
    };
    o.baseline_git_sha = Some(base.git_sha.clone());
    let same_variant = |side: &Option<CountsSide>, variant: &str| {
        side.as_ref().is_none_or(|b| b.variant == variant)
    };
    if base.workload != *workload
        || !same_variant(&base.before, &now.before_variant)
        || !same_variant(&base.after, &now.after_variant)
    {
        o.state = CountsState::NotComparable;
        return o;
    }
    let change = |side: &SideCounts, then: &Option<CountsSide>| {
        Some(CountsChange {
            now: side.counts()?.metric(metric),
            baseline: then.as_ref()?.counts.metric(metric),
        })
    };
    o.before = change(&now.before, &base.before);
    o.after = change(&now.after, &base.after);
    o.differences = now
        .engine
        .differences(&base.engine)
        .into_iter()
        .map(|(what, baseline, now)| EngineDifference {
            what: what.into(),
            baseline,
            now,
        })
        .collect();
    o.state = state_of(&o);
    // Where the work moved: the side that rose most, function by function.
    let rose_most = [
        ("before", o.before, &now.before, &base.before),
        ("after", o.after, &now.after, &base.after),
    ]
    .into_iter()
    // A reference that kept no functions (a stored run whose archive is not here) says
    // nothing of where the work moved: listing every function as new would mislead.
    .filter_map(|(n, c, side, then)| Some((n, c?.change(), side, then.as_ref()?)))
    .filter(|(_, _, _, then)| !then.functions.is_empty())
    .max_by(|a, b| a.1.total_cmp(&b.1));
    if let Some((name, _, side, then)) = rose_most {
        o.functions = function_changes(side.functions(), &then.functions);
        o.functions_side = Some(name.into());
    }
    o
}

/// The state a compared outcome's numbers give: FAIL where a side rose above the limit
/// (INCONCLUSIVE where another engine counted the baseline), IMPROVED where every side fell by
/// more than it, else PASS; NOT COMPARABLE without a side counted in both.
fn state_of(o: &CountsGateOutcome) -> CountsState {
    let sides: Vec<&CountsChange> = [&o.before, &o.after].into_iter().flatten().collect();
    // Against the baseline scaled by the limit, so that a rise of exactly the limit passes.
    let rose = |c: &&CountsChange| c.now as f64 > c.baseline as f64 * (1.0 + o.limit);
    let fell = |c: &&CountsChange| (c.now as f64) < c.baseline as f64 * (1.0 - o.limit);
    if sides.is_empty() {
        CountsState::NotComparable
    } else if sides.iter().any(rose) {
        if o.differences.is_empty() {
            CountsState::Fail
        } else {
            CountsState::Inconclusive
        }
    } else if sides.iter().all(fell) {
        CountsState::Improved
    } else {
        CountsState::Pass
    }
}

/// The functions whose own instructions changed most between two countings of a side (each
/// side keeps its top functions: a function missing from one list counts 0 there).
fn function_changes(now: &[FunctionCounts], then: &[FunctionCounts]) -> Vec<FunctionChange> {
    let mut names: Vec<&str> = now
        .iter()
        .chain(then)
        .map(|f| f.function.as_str())
        .collect();
    names.sort_unstable();
    names.dedup();
    let of = |list: &[FunctionCounts], n: &str| {
        list.iter()
            .find(|f| f.function == n)
            .map_or(0, |f| f.instructions)
    };
    let mut out: Vec<FunctionChange> = names
        .into_iter()
        .map(|n| FunctionChange {
            function: n.to_string(),
            instructions_then: of(then, n),
            instructions_now: of(now, n),
        })
        .filter(|f| f.instructions_then != f.instructions_now)
        .collect();
    out.sort_by(|a, b| {
        let d = |f: &FunctionChange| f.instructions_now.abs_diff(f.instructions_then);
        d(b).cmp(&d(a)).then(a.function.cmp(&b.function))
    });
    out.truncate(FUNCTIONS_SHOWN);
    out
}

/// The counts baseline a branch's newest counted run in the store makes (the store keeps each
/// side's instructions, DRAM bytes and estimated cycles — what the metrics compare — and the
/// engine; not the per-function counts). `None` without an engine recorded.
pub fn baseline_of_point(
    p: &crate::store::Point,
    (before_variant, after_variant): (&str, &str),
    workload: &Workload,
) -> Option<CountsBaseline> {
    let c = p.counts.as_ref()?;
    let engine = c.engine.as_deref()?.clone();
    let side =
        |variant: &str, instructions: Option<u64>, dram: Option<u64>, cycles: Option<u64>| {
            Some(CountsSide {
                variant: variant.to_string(),
                // The store keeps what the metrics compare: DRAM bytes as their sum.
                counts: crate::measure::counts::Counts {
                    instructions: instructions?,
                    dram_read_bytes: dram?,
                    estimated_cycles: cycles?,
                    ..Default::default()
                },
                functions: Vec::new(),
            })
        };
    Some(CountsBaseline {
        schema_version: crate::baseline::counts::COUNTS_BASELINE_SCHEMA_VERSION,
        spec: p.spec.to_string(),
        recorded_utc: p.run.started_utc.to_string(),
        git_sha: p.run.git_sha.to_string(),
        opledger_version: String::new(),
        engine,
        workload: workload.clone(),
        before: side(
            before_variant,
            c.before_instructions,
            c.before_dram_bytes,
            c.before_cycles,
        ),
        after: side(
            after_variant,
            c.after_instructions,
            c.after_dram_bytes,
            c.after_cycles,
        ),
    })
}

/// The `counts_regression` check of an outcome: FAIL on a rise above the limit, INCONCLUSIVE
/// where another engine counted the baseline, SKIP without a comparable baseline (FAIL under
/// `--require-baseline`). Its sentence is the outputs'.
pub fn check(o: &CountsGateOutcome, require_baseline: bool) -> Check {
    // A compared outcome's state is taken from its numbers again (an archive re-derives it);
    // an accepted one too, where it was compared first: a rise above the limit is never
    // accepted (only a passing spec's counts are).
    let state = match o.state {
        CountsState::Pass
        | CountsState::Fail
        | CountsState::Improved
        | CountsState::Inconclusive => state_of(o),
        CountsState::Accepted => match state_of(o) {
            s @ (CountsState::Fail | CountsState::Inconclusive) => s,
            _ => CountsState::Accepted,
        },
        other => other,
    };
    let status = match state {
        CountsState::Fail => Status::Fail,
        CountsState::Inconclusive => Status::Inconclusive,
        CountsState::Pass | CountsState::Improved | CountsState::Accepted => Status::Pass,
        CountsState::NoBaseline | CountsState::NotComparable if require_baseline => Status::Fail,
        CountsState::NoBaseline | CountsState::NotComparable => Status::Skip,
    };
    Check::new(CheckName::CountsRegression, status, "")
}

/// The counts baseline a spec's counts are judged against, and where `--accept` writes it.
pub struct CountsReference<'a> {
    pub baseline: Option<&'a crate::baseline::counts::CountsBaseline>,
    pub path: &'a Path,
    /// The history store's run the baseline was made from, when there was no counts baseline.
    pub history_run: Option<&'a str>,
    /// Which reference it is, when it is not the counts baseline.
    pub reference: Option<&'a crate::results::GateReference>,
    pub require_baseline: bool,
}

/// The counts baseline a passing result becomes.
pub fn baseline_of(
    now: &SpecCounts,
    workload: &Workload,
    spec: &str,
    utc: &str,
    git_sha: &str,
) -> Option<CountsBaseline> {
    let side = |c: &SideCounts, variant: &str| {
        Some(CountsSide {
            variant: variant.to_string(),
            counts: *c.counts()?,
            functions: c.functions().to_vec(),
        })
    };
    let before = side(&now.before, &now.before_variant);
    let after = side(&now.after, &now.after_variant);
    (before.is_some() || after.is_some()).then(|| CountsBaseline {
        schema_version: crate::baseline::counts::COUNTS_BASELINE_SCHEMA_VERSION,
        spec: spec.to_string(),
        recorded_utc: utc.to_string(),
        git_sha: git_sha.to_string(),
        opledger_version: env!("CARGO_PKG_VERSION").into(),
        engine: now.engine.clone(),
        workload: workload.clone(),
        before,
        after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::counts::{CacheModel, Counts, CountsEngine, LedgerAgreement};
    use crate::spec::CountsMetric;

    fn counts(instructions: u64) -> Counts {
        Counts {
            instructions,
            estimated_cycles: instructions,
            ..Counts::default()
        }
    }

    fn side(instructions: u64, f: u64) -> SideCounts {
        SideCounts::Counted {
            counts: counts(instructions),
            ledger_read_bytes: 0,
            ledger_write_bytes: 0,
            ledger_flops: 0,
            agreement: LedgerAgreement::CacheResident {
                smallest_tensor: "bias".into(),
                smallest_tensor_bytes: 1,
                ll_bytes: 1,
            },
            functions: vec![FunctionCounts {
                function: "kernel".into(),
                instructions: f,
                ll_misses: 0,
            }],
            repeat_instructions: None,
            compulsory_bytes: None,
        }
    }

    fn engine() -> CountsEngine {
        CountsEngine {
            valgrind: "valgrind-3.19.0".into(),
            cache_model: CacheModel::default(),
            simd: "avx2".into(),
            threads: 1,
            seed: 1,
            arch: "x86_64".into(),
            compiler: "rustc 1".into(),
            libc: "glibc 2.36".into(),
            binary_sha256: "ab".into(),
            gpu: None,
        }
    }

    fn spec_counts(before: u64, after: u64) -> SpecCounts {
        SpecCounts {
            counted_workload: None,
            spec_cache_model: false,
            name: "x".into(),
            engine: engine(),
            before_variant: "unfused".into(),
            after_variant: "fused".into(),
            before: side(before, before / 2),
            after: side(after, after / 2),
        }
    }

    fn workload() -> Workload {
        let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../../specs/launch-chain.yaml");
        crate::spec::load(Path::new(file)).unwrap().workload
    }

    #[test]
    fn a_rise_above_the_limit_fails_and_names_where_it_went() {
        let w = workload();
        let base = baseline_of(&spec_counts(2000, 1000), &w, "x", "t", "abc").unwrap();
        let p = Path::new("b.json");
        let judge = |now: &SpecCounts, b: &CountsBaseline| {
            judge_parts(&w, CountsMetric::Instructions, 0.01, now, Some(b), p)
        };
        let same = judge(&spec_counts(2000, 1000), &base);
        assert_eq!(same.state, CountsState::Pass);
        assert_eq!(same.saving, Some(0.5));
        assert!(same.functions.is_empty());
        assert_eq!(
            judge(&spec_counts(2000, 1010), &base).state,
            CountsState::Pass
        );
        let rose = judge(&spec_counts(2000, 1011), &base);
        assert_eq!(rose.state, CountsState::Fail);
        assert_eq!(rose.functions_side.as_deref(), Some("after"));
        assert_eq!(rose.functions[0].instructions_now, 505);
        assert_eq!(
            judge(&spec_counts(1900, 900), &base).state,
            CountsState::Improved
        );
        assert_eq!(check(&rose, false).status, Status::Fail);
        // A reference that kept totals only (a stored run without its archive): the rise
        // fails all the same, and no function is listed as if it were new.
        let mut totals = base.clone();
        for side in [&mut totals.before, &mut totals.after]
            .into_iter()
            .flatten()
        {
            side.functions.clear();
        }
        let rose = judge(&spec_counts(2000, 1011), &totals);
        assert_eq!(rose.state, CountsState::Fail);
        assert!(rose.functions.is_empty() && rose.functions_side.is_none());
        // Another compiler counted the baseline: the same rise cannot be blamed on the code.
        let mut other = base.clone();
        other.engine.compiler = "rustc 2".into();
        let unsure = judge(&spec_counts(2000, 1011), &other);
        assert_eq!(unsure.state, CountsState::Inconclusive);
        assert_eq!(unsure.differences[0].what, "compiler");
        // Another workload is not this spec's baseline.
        let none = judge_parts(
            &w,
            CountsMetric::Instructions,
            0.01,
            &spec_counts(1, 1),
            None,
            p,
        );
        assert_eq!(none.state, CountsState::NoBaseline);
        assert_eq!(check(&none, false).status, Status::Skip);
        assert_eq!(check(&none, true).status, Status::Fail);
    }
}
