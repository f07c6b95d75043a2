//! `opledger counts SPEC…`: each side of each spec counted once by the measurement layer
//! (`measure::counts::valgrind`, specs side by side up to the machine's cores) and set against
//! its ledger; the table (or JSON) printed.

use crate::error::{ExitCode, Result};
use crate::measure::counts::valgrind::Counter;
use crate::measure::counts::{CacheModel, LedgerAgreement, SpecCounts};
use std::path::PathBuf;

/// What `opledger counts` measures and how.
pub struct CountOptions {
    pub paths: Vec<PathBuf>,
    /// The environment's settings: the experiment's deliberate slowdown is the code under
    /// test, and is handed to the counted process.
    pub settings: crate::settings::Settings,
    /// The command line's cache model (none: each spec's own, or the default).
    pub model: Option<CacheModel>,
    pub seed: u64,
    pub json: bool,
}

/// Counts every side of every spec under `o.paths`; prints the table (or JSON). Exit 3 when
/// Valgrind is not installed, 1 when a side's DRAM bytes disagree with its ledger.
pub fn counts(o: &CountOptions) -> Result<ExitCode> {
    let counter = Counter::new(o.model, o.seed, &o.settings)?;
    if o.settings.experiment_slowdown > 0.0 {
        eprintln!(
            "opledger: warning: {}={} slows the fused elementwise variant on purpose: these counts are the gate experiment's, not the code's as it is",
            crate::settings::SLOWDOWN_VAR,
            o.settings.experiment_slowdown
        );
    }
    let specs = crate::spec::load_all(&o.paths)?;
    let available = crate::backend::available_memory_bytes();
    for s in &specs {
        counter.refuse_oversized(s, available)?;
    }
    let counted: Vec<crate::spec::Spec> = specs
        .iter()
        .map(|s| s.counted().map(|c| c.into_owned()))
        .collect::<Result<_>>()?;
    // Counted side by side up to the machine's cores, the longest first, each distinct counted
    // spec once (sweep points counted at one size); printed in the specs' order.
    let (mut order, copies) =
        crate::measure::counts::distinct(counted.iter().enumerate().map(|(i, s)| (i, Some(s))));
    let cost: Vec<f64> = counted.iter().map(|s| counter.ledger_cost(s)).collect();
    order.sort_by(|&a, &b| cost[b].total_cmp(&cost[a]));
    let ordered: Vec<crate::spec::Spec> = order.iter().map(|&i| counted[i].clone()).collect();
    let mut results: Vec<Option<Result<SpecCounts>>> = (0..counted.len()).map(|_| None).collect();
    // A line on stderr as each spec's count ends (the table comes when all have).
    let done = |j: usize, k: usize, c: &Result<crate::measure::counts::Counted>, secs: f64| {
        eprintln!(
            "{}",
            crate::report::terminal::counted_line(
                &ordered[j].name,
                (k, ordered.len()),
                secs,
                c.is_err()
            )
        );
    };
    for (i, c) in
        order
            .into_iter()
            .zip(counter.count_many(&ordered, counter.at_once(&ordered), &done))
    {
        results[i] = Some(c.map(|c| c.counts));
    }
    for (i, from) in copies {
        results[i] = Some(match &results[from] {
            Some(Ok(c)) => Ok(SpecCounts {
                name: counted[i].name.clone(),
                ..c.clone()
            }),
            // The first one's error, met first when the results are read.
            _ => continue,
        });
    }
    let counted: Vec<SpecCounts> = results.into_iter().flatten().collect::<Result<_>>()?;
    if o.json {
        let bytes = crate::report::output::json("the counts", &counted)?;
        print!("{}", String::from_utf8_lossy(&bytes));
    } else {
        print!("{}", crate::report::counts::table(&counted));
    }
    let disagrees = counted.iter().any(|s| {
        [&s.before, &s.after]
            .iter()
            .any(|c| c.agreement().and_then(LedgerAgreement::agrees) == Some(false))
    });
    Ok(if disagrees {
        ExitCode::GateFailed
    } else {
        ExitCode::Pass
    })
}
