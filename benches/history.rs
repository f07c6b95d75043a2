//! The history store and its change points, measured (not tested):
//!
//! - `cargo bench --bench history -- changes`: precision and recall of `history --changes` on
//!   synthetic series with known steps (1%, 3%, 10%) at known places in noise of 1–5%, with
//!   outliers, for two significance levels;
//! - `cargo bench --bench history -- store`: the SQLite store's size per run and the time of the
//!   `history` query over 10 000 runs × 50 cases (`OPLEDGER_BENCH_RUNS` to change the runs;
//!   `OPLEDGER_BENCH_COUNTED=1` counts every case as well), and `--changes` over one case's
//!   series (3% noise, one 10% step);
//! - `cargo bench --bench history -- every`: only the query of every point, eight times.

use opledger::measure::changes::{detect, Config, Split};
use opledger::rng::Rng;
use opledger::store::{Query, Store, StoreUrl};
use std::time::Instant;

fn main() {
    let filter = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with("--"))
        .unwrap_or_default();
    if filter.is_empty() || "changes".contains(&filter) {
        changes();
    }
    if filter.is_empty() || "store".contains(&filter) {
        store(false);
    }
    if filter == "every" {
        store(true);
    }
}

/// A series of `n` runs at level 1 with steps `(position, factor)`, normal noise of relative
/// size `noise`, and outliers (3% of runs, 1.3–2.5× slower: a busy runner).
fn series(n: usize, steps: &[(usize, f64)], noise: f64, rng: &mut Rng) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let level: f64 = steps
                .iter()
                .filter(|(at, _)| i >= *at)
                .map(|(_, f)| f)
                .product();
            let mut v = level * (1.0 + noise * rng.normal()).max(0.05);
            if rng.next_f64() < 0.03 {
                v *= 1.3 + 1.2 * rng.next_f64();
            }
            v
        })
        .collect()
}

fn changes() {
    println!("change points: 60-run series, 300 series per cell, a detection within ±2 runs of a true step is a hit");
    println!("| split | alpha | step | noise | steps | detected | hits | precision | recall | false shifts per flat series |");
    println!("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
    for (split, alpha) in [
        (Split::Mean, 0.001),
        (Split::Mean, 0.01),
        (Split::Energy, 0.001),
    ] {
        let cfg = Config {
            alpha,
            split,
            ..Config::default()
        };
        for step in [0.01, 0.03, 0.10] {
            for noise in [0.01, 0.02, 0.05] {
                let mut rng = Rng::new((step * 1e4) as u64 * 31 + (noise * 1e4) as u64);
                let (mut truth, mut detected, mut hits, mut flat_false) = (0, 0, 0, 0);
                for k in 0..300 {
                    // Half the series one step (a slowdown), half two (a slowdown, then a fix).
                    let steps: Vec<(usize, f64)> = if k % 2 == 0 {
                        vec![(25 + k % 11, 1.0 + step)]
                    } else {
                        vec![(15 + k % 7, 1.0 + step), (40 + k % 9, 1.0 / (1.0 + step))]
                    };
                    let s = series(60, &steps, noise, &mut rng);
                    let found = detect(&s, &cfg);
                    truth += steps.len();
                    detected += found.len();
                    hits += steps
                        .iter()
                        .filter(|(at, _)| found.iter().any(|f| f.at.abs_diff(*at) <= 2))
                        .count();
                    let flat = series(60, &[], noise, &mut rng);
                    flat_false += detect(&flat, &cfg).len();
                }
                let precision = if detected == 0 {
                    f64::NAN
                } else {
                    hits as f64 / detected as f64
                };
                println!(
                    "| {split:?} | {alpha} | {:.0}% | {:.0}% | {truth} | {detected} | {hits} | {:.2} | {:.2} | {:.3} |",
                    step * 100.0,
                    noise * 100.0,
                    precision,
                    hits as f64 / truth as f64,
                    flat_false as f64 / 300.0
                );
            }
        }
    }
}

/// `every`: only the query of every point, eight times (each time printed), on the store
/// recorded or reused.
#[expect(
    clippy::too_many_lines,
    reason = "one benchmark's setup, timed steps and printed table in the order they print"
)]
fn store(every_only: bool) {
    let runs: usize = std::env::var("OPLEDGER_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let cases = 50;
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/run-fixed/results.json"
    );
    let mut run: opledger::results::RunResult =
        serde_json::from_slice(&std::fs::read(fixture).expect("the fixture run")).expect("a run");
    let one = run.specs[0].clone();
    run.specs = (0..cases)
        .map(|c| {
            let mut s = one.clone();
            s.name = format!("case-{c:02}");
            s
        })
        .collect();
    let tmp = tempfile::tempdir().expect("a temporary folder");
    // OPLEDGER_BENCH_KEEP=1 keeps the store and the site to look at; OPLEDGER_BENCH_REUSE=DIR
    // reads such a kept store again instead of recording one.
    let reuse = std::env::var_os("OPLEDGER_BENCH_REUSE").map(std::path::PathBuf::from);
    let (root, _guard) = if let Some(kept) = reuse.clone() {
        (kept, None)
    } else if std::env::var_os("OPLEDGER_BENCH_KEEP").is_some() {
        let kept = tmp.keep();
        println!("store and site kept in {}", kept.display());
        (kept, None)
    } else {
        (tmp.path().to_path_buf(), Some(tmp))
    };
    let dir = root.as_path();
    let path = dir.join("history.sqlite");
    // OPLEDGER_BENCH_STORE=postgres://… measures a PostgreSQL server instead (an empty database).
    let url = match std::env::var("OPLEDGER_BENCH_STORE") {
        Ok(u) if !u.is_empty() => StoreUrl::parse(&u).expect("a store URL"),
        _ => StoreUrl::Sqlite(path.clone()),
    };
    let mut store = Store::open(&url).expect("a store");
    let archive = dir.join("runs/archive");
    let (base_before, base_after) = (
        one.before.summary.expect("a measured fixture").median_secs,
        one.after.summary.expect("a measured fixture").median_secs,
    );
    let mut rng = Rng::new(1);
    // OPLEDGER_BENCH_COUNTED=1: every case counted as well (what the main job records where
    // Valgrind is installed).
    let counted = std::env::var_os("OPLEDGER_BENCH_COUNTED").is_some();
    let started = Instant::now();
    // A reused store was recorded with the same OPLEDGER_BENCH_RUNS.
    let recorded = if reuse.is_some() { 0 } else { runs };
    for r in 0..recorded {
        // 3% noise, and a 10% slowdown of the after variant from 90% of the way on.
        let step = if r >= runs * 9 / 10 { 1.10 } else { 1.0 };
        for s in &mut run.specs {
            if let (Some(b), Some(a)) = (s.before.summary.as_mut(), s.after.summary.as_mut()) {
                b.median_secs = base_before * (1.0 + 0.03 * rng.normal());
                a.median_secs = base_after * step * (1.0 + 0.03 * rng.normal());
            }
            if counted {
                s.counts = Some(spec_counts(&s.name, step));
            }
        }
        run.run_uid = format!("{r:032x}");
        run.run_id = format!("run-{r}");
        // One run an hour, in start order, as a store fills.
        run.started_utc = hours_after_2025(r);
        run.started_unix_ns = Some(r as i64);
        run.git_sha = format!("{:07x}", r * 7919 % 0xfffffff);
        store
            .record(&run, &archive, &format!("{r:064x}"), Some("main"))
            .expect("recorded");
    }
    let record_secs = started.elapsed().as_secs_f64();
    drop(store);
    // The write-ahead log is checkpointed when the last connection closes.
    let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    println!(
        "store: {runs} runs × {cases} cases recorded in {record_secs:.1} s ({:.2} ms a run); file {:.1} MiB, {:.1} KiB a run, {:.0} bytes a case row",
        record_secs / runs as f64 * 1e3,
        bytes as f64 / (1u64 << 20) as f64,
        bytes as f64 / runs as f64 / 1024.0,
        bytes as f64 / (runs * cases) as f64
    );
    let mut store = Store::open(&url).expect("a store");
    let time = |store: &mut Store, q: &Query| {
        let mut t: Vec<f64> = (0..5)
            .map(|_| {
                let s = Instant::now();
                let n = store.series(q).expect("a series").len();
                std::hint::black_box(n);
                s.elapsed().as_secs_f64()
            })
            .collect();
        t.sort_by(f64::total_cmp);
        t[2]
    };
    if every_only {
        for _ in 0..8 {
            let s = Instant::now();
            let points = store.series(&Query::default()).expect("a series");
            let query_secs = s.elapsed().as_secs_f64();
            let n = points.len();
            // Freed apart: `opledger history` leaves its points to the process's exit.
            let s = Instant::now();
            drop(points);
            println!(
                "every point ({n}): {:.0} ms, freeing them {:.0} ms",
                query_secs * 1e3,
                s.elapsed().as_secs_f64() * 1e3
            );
        }
        return;
    }
    let one_case = Query {
        specs: vec!["case-07".into()],
        ..Query::default()
    };
    let last = Query {
        last: Some(50),
        ..Query::default()
    };
    println!(
        "history query (median of 5): one case, {runs} points: {:.1} ms; every case, {} points: {:.0} ms; every case --last 50: {:.0} ms",
        time(&mut store, &one_case) * 1e3,
        runs * cases,
        time(&mut store, &Query::default()) * 1e3,
        time(&mut store, &last) * 1e3
    );
    // The dashboard over the whole store: every case's newest runs (no archives here, so no
    // run pages: the pages of trends and the index).
    let out = dir.join("site");
    let s = Instant::now();
    opledger::commands::site::site(&opledger::commands::site::Options {
        store: url.clone(),
        query: Query {
            last: Some(opledger::commands::site::DEFAULT_LAST),
            ..Query::default()
        },
        out: out.clone(),
        commit_url: None,
    })
    .expect("a site");
    // The case pages themselves (`cases/DEVICE/SPEC.html`), not their pages of older runs.
    let page_bytes: Vec<u64> = std::fs::read_dir(out.join("cases"))
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|d| std::fs::read_dir(d.path()).into_iter().flatten().flatten())
        .filter(|f| f.path().extension().is_some_and(|e| e == "html"))
        .filter_map(|f| f.metadata().ok().map(|m| m.len()))
        .collect();
    let site_bytes: u64 = page_bytes.iter().sum();
    let largest = page_bytes.iter().copied().max().unwrap_or(0);
    println!(
        "site over {cases} cases × the newest {} runs: {:.2} s, case pages {:.1} MiB in all, the largest {:.0} KiB",
        opledger::commands::site::DEFAULT_LAST.min(runs),
        s.elapsed().as_secs_f64(),
        site_bytes as f64 / (1u64 << 20) as f64,
        largest as f64 / 1024.0
    );
    let points = store.series(&one_case).expect("a series");
    let s = Instant::now();
    let found = opledger::store::series::changes(&points, opledger::store::series::Metric::After);
    println!(
        "--changes over one case's {} runs (the newest {} read): {:.0} ms ({} shifts)",
        points.len(),
        opledger::store::series::MAX_SERIES_RUNS.min(points.len()),
        s.elapsed().as_secs_f64() * 1e3,
        found.iter().map(|c| c.shifts.len()).sum::<usize>()
    );
}

/// `2025-01-01T00:00:00Z` plus `hours`, as a run's start is written.
fn hours_after_2025(hours: usize) -> String {
    // Days since 1970-01-01 to a civil date (the proleptic Gregorian calendar).
    let days = 20_089 + (hours / 24) as i64;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year}-{month:02}-{day:02}T{:02}:00:00Z", hours % 24)
}

/// Both sides of a case counted (the after side's work scaled by `step`), under one engine.
fn spec_counts(name: &str, step: f64) -> opledger::measure::counts::SpecCounts {
    use opledger::measure::counts::{
        CacheModel, Counts, CountsEngine, LedgerAgreement, SideCounts, SpecCounts,
    };
    let side = |work: f64| SideCounts::Counted {
        counts: Counts {
            instructions: (4.0e7 * work) as u64,
            dram_read_bytes: (3.2e7 * work) as u64,
            dram_write_bytes: (1.6e7 * work) as u64,
            estimated_cycles: (6.0e7 * work) as u64,
            ..Counts::default()
        },
        ledger_read_bytes: 32_000_000,
        ledger_write_bytes: 16_000_000,
        ledger_flops: 0,
        agreement: LedgerAgreement::Streaming {
            read_ratio: 1.0,
            write_ratio: 1.0,
            agrees: true,
        },
        functions: Vec::new(),
        repeat_instructions: None,
        compulsory_bytes: None,
    };
    SpecCounts {
        name: name.to_string(),
        engine: CountsEngine {
            valgrind: "valgrind-3.19.0".into(),
            cache_model: CacheModel::default(),
            simd: "avx2".into(),
            threads: 1,
            seed: 1,
            arch: "x86_64".into(),
            compiler: "rustc 1.95.0 (59807616e 2026-04-14)".into(),
            libc: "glibc 2.36".into(),
            binary_sha256: "5f".repeat(32),
            gpu: None,
        },
        before_variant: "unfused".into(),
        after_variant: "fused".into(),
        before: side(1.0),
        after: side(0.6 * step),
        counted_workload: None,
        spec_cache_model: false,
    }
}
