//! What a run's results add up to, derived once when the run (or a merge) is made and kept in
//! `results.json`: the delivery checklist (each item's status, evidence and specs) and the
//! series of swept specs (their bytes and times with the slopes over the swept parameter). The
//! outputs render these; none derives them again.

use super::{self as model, BaselineStatus, ChecklistRow, SpecResult};
use crate::spec::ChecklistItem;
use crate::verdict::CheckName;
use crate::verdict::Status;

/// The checks that evidence each optimization item of the checklist.
const OPTIMIZATION_CHECKS: [CheckName; 4] = [
    CheckName::Correctness,
    CheckName::IoSaving,
    CheckName::TimeSaving,
    CheckName::LaunchOverhead,
];

/// Groups swept specs into series, in the order they ran.
pub fn sweeps(specs: &[SpecResult]) -> Vec<model::SweepSeries> {
    let mut out: Vec<model::SweepSeries> = Vec::new();
    for s in specs {
        let Some(p) = &s.sweep else { continue };
        let Some((param, x)) = p.params.first().cloned() else {
            continue;
        };
        let row = model::SweepRow {
            spec: s.name.clone(),
            label: p.label.clone(),
            x,
            before_bytes: s.before.bytes,
            after_bytes: s.after.bytes,
            before_secs: s.before.summary.map(|m| m.median_secs),
            after_secs: s.after.summary.map(|m| m.median_secs),
            io_saving: s.io_saving,
            time_saving: s.time_saving.map(|t| t.point),
            counted: counted_point(s),
        };
        match out.iter_mut().find(|g| g.group == p.group) {
            Some(g) => g.rows.push(row),
            None => out.push(model::SweepSeries {
                group: p.group.clone(),
                param,
                before_variant: s.before.variant,
                after_variant: s.after.variant,
                rows: vec![row],
                before_bytes_slope: None,
                after_bytes_slope: None,
                before_time_slope: None,
                after_time_slope: None,
                counted: None,
            }),
        }
    }
    for g in &mut out {
        let (Some(first), Some(last)) = (g.rows.first(), g.rows.last()) else {
            continue;
        };
        if last.x == first.x {
            // One point (or one value): no scaling, and its counts say nothing of the sweep.
            for r in &mut g.rows {
                r.counted = None;
            }
            continue;
        }
        let lx = (last.x as f64 / first.x as f64).ln();
        let slope = |a: f64, b: f64| (a > 0.0 && b > 0.0).then(|| (b / a).ln() / lx);
        g.before_bytes_slope = slope(first.before_bytes as f64, last.before_bytes as f64);
        g.after_bytes_slope = slope(first.after_bytes as f64, last.after_bytes as f64);
        g.before_time_slope = first
            .before_secs
            .zip(last.before_secs)
            .and_then(|(a, b)| slope(a, b));
        g.after_time_slope = first
            .after_secs
            .zip(last.after_secs)
            .and_then(|(a, b)| slope(a, b));
        g.counted = counted_scaling(specs, g, &slope);
    }
    out
}

/// Spec `s`'s counted bytes beside its ledger's, where both sides were counted.
fn counted_point(s: &SpecResult) -> Option<model::CountedPoint> {
    let c = s.counts.as_ref()?;
    let side = |x: &crate::measure::counts::SideCounts| match x {
        crate::measure::counts::SideCounts::Counted {
            counts,
            ledger_read_bytes,
            ledger_write_bytes,
            agreement,
            ..
        } => Some(model::CountedBytes {
            dram_bytes: counts.dram_read_bytes + counts.dram_write_bytes,
            ledger_bytes: ledger_read_bytes + ledger_write_bytes,
            read_ratio: counts.dram_read_bytes as f64 / (*ledger_read_bytes).max(1) as f64,
            write_ratio: counts.dram_write_bytes as f64 / (*ledger_write_bytes).max(1) as f64,
            agrees: agreement.agrees(),
        }),
        crate::measure::counts::SideCounts::NotAvailable { .. } => None,
    };
    Some(model::CountedPoint {
        workload: c
            .counted_workload
            .clone()
            .unwrap_or_else(|| s.workload_desc.clone()),
        before: side(&c.before)?,
        after: side(&c.after)?,
    })
}

/// How series `g`'s counted bytes scale, where every point was counted and no two at the same
/// workload (`measure.counts_sizes` leaving the swept size alone); `None` elsewhere, and the
/// points' counts are dropped (one size counted for every point says nothing of the sweep).
fn counted_scaling(
    specs: &[SpecResult],
    g: &mut model::SweepSeries,
    slope: &dyn Fn(f64, f64) -> Option<f64>,
) -> Option<model::CountedScaling> {
    let points: Vec<&model::CountedPoint> =
        g.rows.iter().filter_map(|r| r.counted.as_ref()).collect();
    let mut workloads: Vec<&str> = points.iter().map(|p| p.workload.as_str()).collect();
    workloads.sort_unstable();
    workloads.dedup();
    if points.len() != g.rows.len() || workloads.len() != g.rows.len() || g.rows.len() < 2 {
        for r in &mut g.rows {
            r.counted = None;
        }
        return None;
    }
    let (first, last) = (points.first()?, points.last()?);
    let first_spec = &g.rows.first()?.spec;
    let engine = specs
        .iter()
        .find(|s| &s.name == first_spec)?
        .counts
        .as_ref()?;
    let s = |a: u64, b: u64| slope(a as f64, b as f64);
    Some(model::CountedScaling {
        ll_bytes: engine.engine.cache_model.ll.bytes,
        spec_cache_model: engine.spec_cache_model,
        before_slope: s(first.before.dram_bytes, last.before.dram_bytes),
        before_ledger_slope: s(first.before.ledger_bytes, last.before.ledger_bytes),
        after_slope: s(first.after.dram_bytes, last.after.dram_bytes),
        after_ledger_slope: s(first.after.ledger_bytes, last.after.ledger_bytes),
    })
}

/// Derives the seed's five-item delivery checklist from the spec results.
pub fn checklist(specs: &[SpecResult]) -> Vec<ChecklistRow> {
    ChecklistItem::ALL
        .iter()
        .map(|&item| {
            let (status, evidence, names) = match item {
                ChecklistItem::Roofline => roofline_row(specs),
                ChecklistItem::Baseline => baseline_row(specs),
                _ => optimization_row(specs, item),
            };
            ChecklistRow {
                key: item.key().into(),
                title: item.title().into(),
                status,
                mark: status.mark().into(),
                evidence,
                specs: names,
            }
        })
        .collect()
}

fn link(s: &SpecResult) -> String {
    format!("[{}](#spec-{})", s.name, s.name)
}

fn roofline_row(specs: &[SpecResult]) -> (Status, String, Vec<String>) {
    let with: Vec<&SpecResult> = specs
        .iter()
        .filter(|s| s.check(CheckName::Bound).is_some())
        .collect();
    if with.is_empty() {
        return (Status::Skip, "no spec was measured".into(), vec![]);
    }
    let failed: Vec<&&SpecResult> = with
        .iter()
        .filter(|s| {
            s.check(CheckName::Bound)
                .is_some_and(|c| c.status == Status::Fail)
        })
        .collect();
    let names = with.iter().map(|s| s.name.clone()).collect();
    if failed.is_empty() {
        // The specs by bound and ridge, in the order they came: each bound and ridge said once
        // (a run on one device has one ridge for all its specs of one dtype).
        let mut groups: Vec<(String, Vec<String>)> = Vec::new();
        for s in &with {
            let key = format!(
                "{} (ridge {:.1} FLOP/B)",
                s.after.predicted.bound.name(),
                s.after.predicted.ridge
            );
            let entry = format!("{} AI {:.2}", link(s), s.after.intensity);
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, v)) => v.push(entry),
                None => groups.push((key, vec![entry])),
            }
        }
        let parts: Vec<String> = groups
            .iter()
            .map(|(k, v)| format!("{k}: {}", v.join(", ")))
            .collect();
        (
            Status::Pass,
            format!(
                "predicted = measured = expected bound: {}",
                parts.join("; ")
            ),
            names,
        )
    } else {
        let parts: Vec<String> = failed.iter().map(|s| link(s)).collect();
        (
            Status::Fail,
            format!("bound not confirmed in {}", parts.join(", ")),
            names,
        )
    }
}

fn optimization_row(specs: &[SpecResult], item: ChecklistItem) -> (Status, String, Vec<String>) {
    let with: Vec<&SpecResult> = specs
        .iter()
        .filter(|s| s.checklist.contains(&item))
        .collect();
    if with.is_empty() {
        return (
            Status::Skip,
            "not evidenced: no spec declares this item".into(),
            vec![],
        );
    }
    let mut status = Status::Pass;
    let mut parts = Vec::new();
    for s in &with {
        let worst = if s.error.is_some() {
            Status::Fail
        } else {
            OPTIMIZATION_CHECKS
                .iter()
                .filter_map(|n| s.check(*n))
                .map(|c| c.status)
                .filter(|st| *st != Status::Skip)
                .max()
                .unwrap_or(Status::Skip)
        };
        // The row is as good as its worst spec: a failed, undecided or flagged one (an after
        // side slower than its before side, a saving above the ledger's) is never ✅.
        if worst != Status::Skip {
            status = status.max(worst);
        }
        let saving = s.time_saving.map_or("not measured".into(), |t| {
            format!(
                "time saving {:.1}% (CI {:.1}..{:.1}%)",
                t.point * 100.0,
                t.lo * 100.0,
                t.hi * 100.0
            )
        });
        let launch = s.launch_overhead_secs.map_or(String::new(), |o| {
            format!(", {:.2} µs per launch removed", o.point * 1e6)
        });
        parts.push(format!(
            "{} {}: IO saving {:.1}%, {saving}{launch}",
            link(s),
            worst.mark(),
            s.io_saving * 100.0
        ));
    }
    // A sweep says how the IO scales: the evidence the seed asks for (O(N²) against less).
    for g in sweeps(specs) {
        if with
            .iter()
            .any(|s| s.sweep.as_ref().is_some_and(|p| p.group == g.group))
        {
            if let (Some(b), Some(a)) = (g.before_bytes_slope, g.after_bytes_slope) {
                parts.push(format!(
                    "sweep {} over {}: {} bytes ∝ {}^{b:.2}, {} bytes ∝ {}^{a:.2}",
                    g.group, g.param, g.before_variant, g.param, g.after_variant, g.param
                ));
            }
        }
    }
    (
        status,
        parts.join("; "),
        with.iter().map(|s| s.name.clone()).collect(),
    )
}

fn baseline_row(specs: &[SpecResult]) -> (Status, String, Vec<String>) {
    if specs.is_empty() {
        return (Status::Skip, "no spec".into(), vec![]);
    }
    // Where a spec stands against its references, time and counts together: a failed gate
    // fails the item, an undecided one holds it open (an INCONCLUSIVE is not a tick), a
    // compared or accepted one ticks it, and a spec with neither waits for a baseline.
    #[derive(PartialEq, PartialOrd)]
    enum Stand {
        Missing,
        Ok,
        Undecided,
        Fail,
    }
    let time = |s: &SpecResult| {
        use crate::gate::stats::RegressionState as R;
        match (s.baseline.status, s.baseline.state) {
            (BaselineStatus::Compared, Some(R::Fail)) => Stand::Fail,
            (BaselineStatus::Compared, Some(R::Inconclusive)) => Stand::Undecided,
            (BaselineStatus::Compared | BaselineStatus::Accepted, _) => Stand::Ok,
            _ => Stand::Missing,
        }
    };
    let counts = |s: &SpecResult| {
        use crate::CountsState as C;
        match s.counts_gate.as_ref().map(|o| o.state) {
            Some(C::Fail) => Stand::Fail,
            Some(C::Inconclusive) => Stand::Undecided,
            Some(C::Pass | C::Improved | C::Accepted) => Stand::Ok,
            _ => Stand::Missing,
        }
    };
    let mut fail = Vec::new();
    let mut undecided = Vec::new();
    let mut ok = Vec::new();
    let mut missing = Vec::new();
    for s in specs {
        // A gate set aside by the one rule (`gate::rule::set_aside`: it could not decide while
        // the other measurement's gate did) holds nothing open here either.
        let aside = |m: crate::gate::rule::Measurement, stand: Stand| {
            if s.set_aside.contains(&m) {
                Stand::Missing
            } else {
                stand
            }
        };
        let t = aside(crate::gate::rule::Measurement::Time, time(s));
        let c = aside(crate::gate::rule::Measurement::Counts, counts(s));
        match if t > c { t } else { c } {
            Stand::Fail => fail.push(link(s)),
            Stand::Undecided => undecided.push(link(s)),
            Stand::Ok => ok.push(link(s)),
            Stand::Missing => missing.push(link(s)),
        }
    }
    let names = specs.iter().map(|s| s.name.clone()).collect();
    let (status, evidence) = baseline_evidence(&fail, &undecided, &ok, &missing, specs.len());
    (status, evidence, names)
}

/// The baseline item's status and words from the specs (as links) by where they stand.
fn baseline_evidence(
    fail: &[String],
    undecided: &[String],
    ok: &[String],
    missing: &[String],
    specs: usize,
) -> (Status, String) {
    if !fail.is_empty() {
        (
            Status::Fail,
            format!("regression against the baseline: {}", fail.join(", ")),
        )
    } else if !undecided.is_empty() {
        (
            Status::Inconclusive,
            format!(
                "compared, but the gate could not decide for {}",
                undecided.join(", ")
            ),
        )
    } else if missing.is_empty() {
        // Every spec: counted, not listed (each has its own section).
        let which = match ok.len() {
            1 => ok.join(""),
            n => format!("all {n} specs"),
        };
        (
            Status::Pass,
            format!("before/after archived and compared: {which}"),
        )
    } else if ok.is_empty() && specs > 1 {
        (
            Status::Skip,
            format!(
                "none of the {specs} specs has a comparable baseline yet (record with `run --accept`)"
            ),
        )
    } else {
        (
            Status::Skip,
            format!(
                "{} of {specs} {} a comparable baseline; none yet for {} (record with `run --accept`)",
                ok.len(),
                if ok.len() == 1 {
                    "specs has"
                } else {
                    "specs have"
                },
                missing.join(", ")
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::rule::Measurement;
    use crate::gate::stats::RegressionState;
    use crate::ledger::Bound;
    use crate::CountsState;

    fn spec() -> SpecResult {
        let run: model::RunResult = serde_json::from_str(include_str!(
            "../../../tests/fixtures/run-fixed/results.json"
        ))
        .expect("the fixed archive parses");
        run.specs.into_iter().next().expect("a spec")
    }

    fn counts_gate(state: CountsState) -> crate::CountsGateOutcome {
        let mut o: crate::CountsGateOutcome = serde_json::from_value(serde_json::json!({
            "state": "pass", "metric": "cycles", "limit": 0.03, "path": "b.json"
        }))
        .expect("a counts gate's outcome");
        o.state = state;
        o
    }

    /// The checklist's baseline item follows the one rule: a time gate that could not decide
    /// while the counts gate passed is set aside, not an open item; without the rule's record
    /// (an older archive), or with no other gate deciding, it holds the item open.
    #[test]
    fn the_baseline_item_leaves_out_a_gate_the_rule_set_aside() {
        let mut s = spec();
        s.baseline.status = BaselineStatus::Compared;
        s.baseline.state = Some(RegressionState::Inconclusive);
        s.counts_gate = Some(counts_gate(CountsState::Pass));
        s.set_aside = Vec::new();
        let item = |s: &SpecResult| baseline_row(std::slice::from_ref(s)).0;
        assert_eq!(item(&s), Status::Inconclusive);
        s.set_aside = vec![Measurement::Time];
        assert_eq!(item(&s), Status::Pass);
        // A failing counts gate fails the item whatever was set aside.
        s.counts_gate = Some(counts_gate(CountsState::Fail));
        assert_eq!(item(&s), Status::Fail);
        // The counts gate set aside where time decided: the time gate's call stands.
        s.counts_gate = Some(counts_gate(CountsState::Inconclusive));
        s.baseline.state = Some(RegressionState::Pass);
        s.set_aside = vec![Measurement::Counts];
        assert_eq!(item(&s), Status::Pass);
        s.set_aside = Vec::new();
        assert_eq!(item(&s), Status::Inconclusive);
    }

    /// The roofline item says each bound and ridge once, its specs under it, and the baseline
    /// item counts the specs where all of them were compared (each has its own section).
    #[test]
    fn the_checklist_says_a_bound_and_a_ridge_once_and_counts_every_compared_spec() {
        let named = |name: &str, bound: Bound, ridge: f64| {
            let mut s = spec();
            s.name = name.into();
            s.after.predicted.bound = bound;
            s.after.predicted.ridge = ridge;
            s.baseline.status = BaselineStatus::Compared;
            s.baseline.state = Some(RegressionState::Pass);
            s
        };
        let specs = [
            named("a", Bound::Compute, 5.1),
            named("b", Bound::Bandwidth, 5.1),
            named("c", Bound::Compute, 5.1),
            named("d", Bound::Compute, 2.6),
        ];
        assert!(
            specs[0].check(CheckName::Bound).is_some(),
            "the fixture has a bound check"
        );
        let (status, evidence, _) = roofline_row(&specs);
        assert_eq!(status, Status::Pass);
        let ai = specs[0].after.intensity;
        assert_eq!(
            evidence,
            format!(
                "predicted = measured = expected bound: compute (ridge 5.1 FLOP/B): [a](#spec-a) \
                 AI {ai:.2}, [c](#spec-c) AI {ai:.2}; bandwidth (ridge 5.1 FLOP/B): [b](#spec-b) \
                 AI {ai:.2}; compute (ridge 2.6 FLOP/B): [d](#spec-d) AI {ai:.2}"
            )
        );
        let (status, evidence, names) = baseline_row(&specs);
        assert_eq!(status, Status::Pass);
        assert_eq!(evidence, "before/after archived and compared: all 4 specs");
        assert_eq!(names, ["a", "b", "c", "d"]);
        let (_, evidence, _) = baseline_row(&specs[..1]);
        assert_eq!(evidence, "before/after archived and compared: [a](#spec-a)");
        // None compared: counted too; some: the others named.
        let mut none = specs.clone();
        for s in &mut none {
            s.baseline.status = BaselineStatus::Missing;
        }
        let (status, evidence, _) = baseline_row(&none);
        assert_eq!(status, Status::Skip);
        assert_eq!(
            evidence,
            "none of the 4 specs has a comparable baseline yet (record with `run --accept`)"
        );
        none[0].baseline.status = BaselineStatus::Compared;
        let (_, evidence, _) = baseline_row(&none);
        assert_eq!(
            evidence,
            "1 of 4 specs has a comparable baseline; none yet for [b](#spec-b), [c](#spec-c), \
             [d](#spec-d) (record with `run --accept`)"
        );
    }
}
