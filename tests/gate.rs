//! Baselines and the regression gate: accepting, comparing, second passes, locks, crashes,
//! older keys and calibration.

use crate::common;
use common::{bin, fixture, only_run_dir, run_cmd, run_in, text, FAST, FEW_PAIRS, PAIRS};
use std::path::{Path, PathBuf};

#[test]
fn require_baseline_fails_without_one() {
    let dir = tempfile::tempdir().unwrap();
    let o = run_in(
        dir.path(),
        &[fixture("good/tiny-chain.yaml")],
        &["--require-baseline"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("no baseline"), "{}", text(&o));
}

/// Accepts a baseline for tiny-chain in `dir` and returns its path.
fn accepted_baseline(dir: &Path) -> PathBuf {
    let o = run_in(
        dir,
        &[fixture("good/tiny-chain.yaml")],
        &["--accept", PAIRS[0], PAIRS[1], PAIRS[2], PAIRS[3]],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let key_dir = std::fs::read_dir(dir.join("baselines"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_dir())
        .unwrap();
    key_dir.join("tiny-chain.json")
}

#[test]
fn a_real_slowdown_fails_after_a_confirming_second_pass() {
    let dir = tempfile::tempdir().unwrap();
    let bfile = accepted_baseline(dir.path());
    // Make the baseline's after side 1000x faster than this machine can be: the new run is a
    // 1000x regression of the after side. So large that a loaded test machine cannot explain it
    // away: the gate calls a slowdown the machine's where the before side slowed by half as much
    // (a µs-scale case beside parallel tests has run its before side 70x slow), and 10x was not
    // enough.
    let mut b: serde_json::Value = serde_json::from_slice(&std::fs::read(&bfile).unwrap()).unwrap();
    for t in b["after_samples_secs"].as_array_mut().unwrap() {
        *t = serde_json::json!(t.as_f64().unwrap() / 1000.0);
    }
    std::fs::write(&bfile, serde_json::to_vec(&b).unwrap()).unwrap();
    let o = run_in(dir.path(), &[fixture("good/tiny-chain.yaml")], &PAIRS);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("measuring again"), "{out}");
    assert!(out.contains("REGRESSION"), "{out}");
    let report = std::fs::read_to_string(only_run_dir(dir.path()).join("report.md")).unwrap();
    assert!(
        report.contains("first pass:"),
        "both passes reported: {report}"
    );
}

#[test]
fn accepting_a_significant_improvement_restarts_the_baseline_history() {
    // A 400% gate: the ordinary second accept must neither fail the gate nor count as an
    // improvement. A µs-scale case timed while the other tests load a 2-core machine can move
    // its after/before ratio by 2x between two runs, which a 10% or a 100% gate would read as a
    // regression (the accept refused, exit 1) or an improvement (the history restarted).
    let dir = tempfile::tempdir().unwrap();
    let (spec, bfile) =
        accepted_tiny_variant(dir.path(), "tiny-chain", "gate: {max_regression: 4.0}\n");
    let history_len = |p: &Path| {
        let b: serde_json::Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
        b["history"].as_array().unwrap().len()
    };
    // An ordinary second accept extends the history.
    let accept = || {
        run_in(
            dir.path(),
            std::slice::from_ref(&spec),
            &["--accept", PAIRS[0], PAIRS[1], PAIRS[2], PAIRS[3]],
        )
    };
    let o = accept();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(history_len(&bfile), 2);
    // Make the stored code 50x slower than what runs now: this run is a clear improvement
    // (a 400% gate asks for 5x). Every accepted run of the history is made the newest one's,
    // 50x slower: the spread between them (which widens what the gate can tell apart) is then
    // none, whatever load the first accept ran under.
    let mut b: serde_json::Value = serde_json::from_slice(&std::fs::read(&bfile).unwrap()).unwrap();
    for t in b["after_samples_secs"].as_array_mut().unwrap() {
        *t = serde_json::json!(t.as_f64().unwrap() * 50.0);
    }
    let newest = b["history"].as_array().unwrap().last().unwrap().clone();
    for h in b["history"].as_array_mut().unwrap() {
        for k in ["after_median_secs", "relative_median"] {
            h[k] = serde_json::json!(newest[k].as_f64().unwrap() * 50.0);
        }
    }
    std::fs::write(&bfile, serde_json::to_vec(&b).unwrap()).unwrap();
    let o = accept();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("history of accepted runs restarts"), "{out}");
    assert_eq!(
        history_len(&bfile),
        1,
        "the slow runs are not pooled with the new code's"
    );
}

#[test]
fn a_baseline_too_noisy_to_decide_makes_the_run_inconclusive_not_failed() {
    let dir = tempfile::tempdir().unwrap();
    let bfile = accepted_baseline(dir.path());
    // Spread the baseline's samples geometrically over 10^-6..10^6 times its median: the
    // bootstrap CI of the ratio of medians then spans about 300x either way, far wider than the
    // 10% gate, whatever this run measures (0.1x..10x was not: a run beside parallel tests has
    // measured 16x slow, and that FAILed).
    let mut b: serde_json::Value = serde_json::from_slice(&std::fs::read(&bfile).unwrap()).unwrap();
    let samples = b["after_samples_secs"].as_array_mut().unwrap();
    let mut sorted: Vec<f64> = samples.iter().map(|t| t.as_f64().unwrap()).collect();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    let n = samples.len();
    for (i, t) in samples.iter_mut().enumerate() {
        let e = 2.0 * i as f64 / (n - 1) as f64 - 1.0;
        *t = serde_json::json!(median * 10f64.powf(6.0 * e));
    }
    std::fs::write(&bfile, serde_json::to_vec(&b).unwrap()).unwrap();
    // The raw comparison alone, so that nothing but the spread baseline decides (under the
    // default `both`, the after/before ratios of a loaded test machine could decide instead).
    let spec = dir.path().join("tiny-chain.yaml");
    std::fs::write(
        &spec,
        std::fs::read_to_string(fixture("good/tiny-chain.yaml")).unwrap()
            + "gate: {max_regression: 0.10, compare: raw}\n",
    )
    .unwrap();
    let o = run_in(dir.path(), &[spec], &PAIRS);
    let out = text(&o);
    assert_eq!(
        o.status.code(),
        Some(0),
        "inconclusive is not a failure: {out}"
    );
    let run = only_run_dir(dir.path());
    let results: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("results.json")).unwrap()).unwrap();
    assert_eq!(
        results["specs"][0]["baseline"]["state"], "inconclusive",
        "{out}"
    );
    assert_eq!(results["verdict"]["status"], "INCONCLUSIVE");
    assert_eq!(results["verdict"]["inconclusive"], 1);
    assert!(
        out.contains("INCONCLUSIVE: 1 spec: 0 pass, 0 fail, 1 inconclusive"),
        "{out}"
    );
    // What would decide it: one accepted run knows no drift between runs.
    assert!(
        out.contains("the drift between runs is not known: measure more pairs (`--min-pairs`)"),
        "{out}"
    );
    let report = std::fs::read_to_string(run.join("report.md")).unwrap();
    assert!(
        report.starts_with("# opledger report: INCONCLUSIVE"),
        "{report}"
    );
    assert!(
        report.contains("record more runs to judge against"),
        "{report}"
    );
    // A CI job that must decide: the same evidence, INCONCLUSIVE exits 1; so do merge and
    // compare of that archive.
    let spec = dir.path().join("tiny-chain.yaml");
    let mut args: Vec<&str> = vec!["--fail-on-inconclusive"];
    args.extend(PAIRS);
    let o = run_in(dir.path(), &[spec], &args);
    let strict = only_run_dir(dir.path());
    let r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(strict.join("results.json")).unwrap()).unwrap();
    assert_eq!(r["verdict"]["status"], "INCONCLUSIVE", "{}", text(&o));
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    // Under `git bisect run`, a commit the run cannot decide is skipped (125), never bad.
    let mut args: Vec<&str> = vec!["--bisect"];
    args.extend(PAIRS);
    let o = run_in(dir.path(), &[dir.path().join("tiny-chain.yaml")], &args);
    assert_eq!(o.status.code(), Some(125), "{}", text(&o));
    // Measured once more before it is given up on.
    assert!(
        text(&o).contains("measuring this commit once more"),
        "{}",
        text(&o)
    );
    for extra in [&[][..], &["--fail-on-inconclusive"][..]] {
        let o = bin()
            .arg("merge")
            .arg("--no-store")
            .arg(&run)
            .arg("--out")
            .arg(dir.path().join(format!("merged-{}", extra.len())))
            .args(extra)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(extra.len() as i32), "{}", text(&o));
    }
}

#[test]
fn concurrent_accepts_are_serialized_by_a_lock() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("baselines")).unwrap();
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.path().join("baselines/.lock"))
        .unwrap();
    lock.lock().unwrap();
    let mut c = run_cmd(
        dir.path(),
        &[fixture("good/tiny-chain.yaml")],
        &["--accept"],
    );
    let mut child = c
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    assert!(line.contains("waiting for the lock"), "{line}");
    // While we hold the lock, the other process has written nothing.
    assert!(child.try_wait().unwrap().is_none());
    assert!(!dir.path().join("runs").exists());
    lock.unlock().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(0), "{rest}");
    assert!(rest.contains("accepted"), "{rest}");
}

#[test]
fn accept_replaces_the_baseline_whole_and_never_writes_into_it() {
    // The widest gate a spec may set (a 1000% slowdown): the second accept is judged against
    // the first, and on a µs-scale case measured while the other tests load the machine its
    // ratio has reached ×1.9; a failed gate refuses the accept, which is not what this tests.
    let dir = tempfile::tempdir().unwrap();
    let (spec, bfile) =
        accepted_tiny_variant(dir.path(), "tiny-chain", "gate: {max_regression: 10.0}\n");
    let before = std::fs::read(&bfile).unwrap();
    // A second name for the accepted file: a write into the file would show through it, while
    // a whole replacement (a new file renamed over the name) leaves it as it was. So a reader,
    // or a kill at any moment of `accept`, sees the old baseline or the new one, never a mix.
    let link = dir.path().join("accepted-before.json");
    std::fs::hard_link(&bfile, &link).unwrap();
    let o = run_in(dir.path(), std::slice::from_ref(&spec), &["--accept"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        std::fs::read(&link).unwrap(),
        before,
        "accept wrote into the accepted baseline instead of replacing it"
    );
    let after = std::fs::read(&bfile).unwrap();
    assert_ne!(after, before, "accept did not replace the baseline");
    let b: serde_json::Value = serde_json::from_slice(&after).unwrap();
    assert_eq!(b["spec"], "tiny-chain");
    std::fs::remove_file(&link).unwrap();
    // No temp files are left where a reader would take them for baselines.
    for e in std::fs::read_dir(bfile.parent().unwrap()).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        assert!(
            name.ends_with(".json") || name.starts_with(".opledger-"),
            "{name}"
        );
    }
}

#[test]
fn a_baseline_of_another_device_or_workload_is_not_compared() {
    let dir = tempfile::tempdir().unwrap();
    let bfile = accepted_baseline(dir.path());
    let original = std::fs::read(&bfile).unwrap();
    let mut b: serde_json::Value = serde_json::from_slice(&original).unwrap();
    b["device"]["key"] = serde_json::json!("cpu-some-other-machine-64c");
    std::fs::write(&bfile, serde_json::to_vec(&b).unwrap()).unwrap();
    let o = run_in(dir.path(), &[fixture("good/tiny-chain.yaml")], &[]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "neutral, never a failure: {}",
        text(&o)
    );
    let results: serde_json::Value = serde_json::from_slice(
        &std::fs::read(only_run_dir(dir.path()).join("results.json")).unwrap(),
    )
    .unwrap();
    let base = &results["specs"][0]["baseline"];
    assert_eq!(base["status"], "not_comparable", "{base}");
    // The results hold the finding as data; the report writes its sentence.
    assert_eq!(base["finding"]["kind"], "other_device", "{base}");
    assert_eq!(
        base["finding"]["baseline_device_key"], "cpu-some-other-machine-64c",
        "{base}"
    );
    assert!(
        base.get("message").is_none(),
        "no sentence in the data: {base}"
    );
    let report = std::fs::read_to_string(only_run_dir(dir.path()).join("report.md")).unwrap();
    assert!(
        report.contains("baseline was recorded on device cpu-some-other-machine-64c"),
        "{report}"
    );
    assert!(
        base["ratio"].is_null(),
        "no ratio on raw time across devices"
    );

    // A changed workload is not comparable either.
    let mut b: serde_json::Value = serde_json::from_slice(&original).unwrap();
    b["workload"]["rows"] = serde_json::json!(66);
    std::fs::write(&bfile, serde_json::to_vec(&b).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(dir.path().join("runs"));
    let o = run_in(dir.path(), &[fixture("good/tiny-chain.yaml")], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let results: serde_json::Value = serde_json::from_slice(
        &std::fs::read(only_run_dir(dir.path()).join("results.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(results["specs"][0]["baseline"]["status"], "not_comparable");
    assert_eq!(
        results["specs"][0]["baseline"]["finding"]["kind"],
        "workload_changed"
    );
    let report = std::fs::read_to_string(only_run_dir(dir.path()).join("report.md")).unwrap();
    assert!(report.contains("workload changed"), "{report}");
}

/// Writes tiny-chain as spec `name` with `extra` YAML appended into `dir`, accepts a baseline of
/// it there, and returns the spec's and the baseline's paths.
fn accepted_tiny_variant(dir: &Path, name: &str, extra: &str) -> (PathBuf, PathBuf) {
    let spec = dir.join(format!("{name}.yaml"));
    std::fs::write(
        &spec,
        std::fs::read_to_string(fixture("good/tiny-chain.yaml"))
            .unwrap()
            .replace("name: tiny-chain", &format!("name: {name}"))
            + extra,
    )
    .unwrap();
    let accept = [&["--accept"], &PAIRS[..]].concat();
    let o = run_in(dir, std::slice::from_ref(&spec), &accept);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let key = std::fs::read_dir(dir.join("baselines"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_dir())
        .unwrap();
    (spec, key.join(format!("{name}.json")))
}

/// A run of tiny-chain as spec `drift` under `gate` (YAML), archived as `base` and again with
/// each (name, before factor, after factor) of `scaled`, every side's samples replaced by fixed
/// ones (a tiny case's few live samples can spread so widely that even a 20x ratio's CI reaches
/// across the limit) and scaled exactly: the folders, in `scaled`'s order after `base`.
fn fixed_archives(dir: &Path, gate: &str, scaled: &[(&str, f64, f64)]) -> Vec<PathBuf> {
    let spec = dir.join("drift.yaml");
    std::fs::write(
        &spec,
        std::fs::read_to_string(fixture("good/tiny-chain.yaml"))
            .unwrap()
            .replace("name: tiny-chain", "name: drift")
            + &format!("gate: {gate}\n"),
    )
    .unwrap();
    let o = run_in(dir, std::slice::from_ref(&spec), &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let mut r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(only_run_dir(dir).join("results.json")).unwrap())
            .unwrap();
    let fixed = |s: &mut serde_json::Value, before: f64, after: f64| {
        s["samples"]["after_first"] = serde_json::json!([true, false, true, false, true]);
        for (k, side, secs) in [
            ("before_secs", "before", 1.0e-3 * before),
            ("after_secs", "after", 2.0e-4 * after),
        ] {
            let v: Vec<f64> = [1.0, 1.01, 0.99, 1.02, 0.98]
                .iter()
                .map(|x| x * secs)
                .collect();
            s["samples"][k] = serde_json::json!(v);
            s[side]["summary"]["n"] = serde_json::json!(v.len());
            for (key, x) in [
                ("median_secs", 1.0),
                ("ci_lo_secs", 0.99),
                ("ci_hi_secs", 1.01),
                ("min_secs", 0.98),
                ("max_secs", 1.02),
            ] {
                s[side]["summary"][key] = serde_json::json!(x * secs);
            }
        }
    };
    let mut folders = Vec::new();
    for &(name, before, after) in [("base", 1.0, 1.0)].iter().chain(scaled) {
        fixed(&mut r["specs"][0], before, after);
        let folder = dir.join(name);
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("results.json"), serde_json::to_vec(&r).unwrap()).unwrap();
        folders.push(folder);
    }
    folders
}

/// `compare base new` in `dir`: its exit code and the row of spec `drift`.
fn compared_row(dir: &Path, base: &Path, new: &Path) -> (Option<i32>, String) {
    let o = bin()
        .current_dir(dir)
        .arg("compare")
        .arg(base)
        .arg(new)
        .output()
        .unwrap();
    let out = text(&o);
    let row = out
        .lines()
        .find(|l| l.starts_with("| drift |"))
        .unwrap_or_else(|| panic!("no row of drift: {out}"));
    (o.status.code(), row.to_string())
}

#[test]
fn by_default_a_slowdown_of_both_variants_alike_is_inconclusive_not_a_failure() {
    // The machine (or code both variants share) got 20x slower: raw time fails, the after/before
    // ratio does not move. Judged on a run's archive with fixed samples and a copy of it with
    // both sides' samples scaled exactly, through `compare` (the gate's own judgement), so that
    // the verdict is decided by the rule and not by the noise of a loaded test machine
    // (measured live, a tiny case's after/before ratio has doubled between two runs on a
    // 2-core machine whose samples spread ±30% while the other tests ran).
    for (mode, code, says) in [
        (
            "both",
            0,
            "both variants slower alike (before ×20.000, after ×20.000)",
        ),
        ("raw", 1, "REGRESSION"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let gate = format!("{{max_regression: 1.0, compare: {mode}}}");
        let folders = fixed_archives(dir.path(), &gate, &[("slow", 20.0, 20.0)]);
        let (code_now, row) = compared_row(dir.path(), &folders[0], &folders[1]);
        assert_eq!(code_now, Some(code), "compare: {mode}: {row}");
        assert!(row.contains(says), "compare: {mode}: {row}");
        if mode == "both" {
            assert!(row.contains("INCONCLUSIVE"), "{row}");
        }
    }
}

#[test]
fn by_default_a_ratio_moved_by_the_before_side_alone_is_neither_a_regression_nor_an_improvement() {
    // On a virtual machine the unfused side's large buffers sometimes move far faster than in
    // other runs while the fused side's time holds: the after/before ratio rises by a quarter
    // on unchanged code. Under `compare: both` the after side's own time decides whether the
    // after side slowed; `compare: relative` gates the ratio as it is.
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        // (name, before ×, after ×, `both` says, its exit, `relative` says)
        (
            "before-faster",
            0.6,
            1.0,
            "before side faster",
            0,
            "REGRESSION",
        ),
        ("after-slower", 1.0, 1.5, "REGRESSION", 1, "REGRESSION"),
        (
            "before-slower",
            1.8,
            1.0,
            "before side slower",
            0,
            "improved",
        ),
        ("after-faster", 1.0, 0.5, "improved", 0, "improved"),
    ];
    let scaled: Vec<(&str, f64, f64)> = cases.iter().map(|c| (c.0, c.1, c.2)).collect();
    for mode in ["both", "relative"] {
        let gate = format!("{{max_regression: 0.10, compare: {mode}}}");
        let folders = fixed_archives(dir.path(), &gate, &scaled);
        for (c, folder) in cases.iter().zip(&folders[1..]) {
            let (code, row) = compared_row(dir.path(), &folders[0], folder);
            let (says, exit) = if mode == "both" {
                (c.3, c.4)
            } else {
                (c.5, i32::from(c.5 == "REGRESSION"))
            };
            assert!(row.contains(says), "{mode}, {}: {row}", c.0);
            assert_eq!(code, Some(exit), "{mode}, {}: {row}", c.0);
        }
        std::fs::remove_dir_all(dir.path().join("runs")).unwrap();
    }
}

#[test]
fn relative_gate_catches_a_slower_after_variant() {
    let dir = tempfile::tempdir().unwrap();
    let (spec, bfile) = accepted_tiny_variant(
        dir.path(),
        "rel",
        "gate: {max_regression: 0.10, compare: relative}\n",
    );
    let original: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&bfile).unwrap()).unwrap();
    let scaled = |before: f64, after: f64| {
        let mut b = original.clone();
        for (k, f) in [
            ("before_samples_secs", before),
            ("after_samples_secs", after),
        ] {
            for t in b[k].as_array_mut().unwrap() {
                *t = serde_json::json!(t.as_f64().unwrap() * f);
            }
        }
        std::fs::write(&bfile, serde_json::to_vec(&b).unwrap()).unwrap();
    };
    // (That shared drift cancels is a unit test of baseline::compared_values: timings of tiny
    // kernels under a parallel test run are too unsteady to show it here.)
    // Only the after variant was 10x faster then: a regression of the optimization.
    scaled(1.0, 0.1);
    let o = run_in(dir.path(), std::slice::from_ref(&spec), &PAIRS);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("after/before ratio") && text(&o).contains("REGRESSION"),
        "{}",
        text(&o)
    );
}

#[test]
fn a_baseline_in_the_folder_of_the_older_key_is_read_when_its_identity_is_this_machine() {
    let dir = tempfile::tempdir().unwrap();
    let bfile = accepted_baseline(dir.path());
    let mut b: serde_json::Value = serde_json::from_slice(&std::fs::read(&bfile).unwrap()).unwrap();
    // The older key: `cpu-<model>-<cores>c`, without SIMD level and cache.
    let new_key = b["device"]["key"].as_str().unwrap().to_string();
    let simd_and_more = format!(
        "-{}-",
        b["device"]["simd"].as_str().unwrap().replace('+', "-")
    );
    let (model, _) = new_key.split_once(&simd_and_more).unwrap();
    let legacy_key = format!("{model}-{}c", b["device"]["cores"]);
    b["device"]["key"] = serde_json::json!(legacy_key);
    let legacy_dir = dir.path().join("baselines").join(&legacy_key);
    std::fs::create_dir_all(&legacy_dir).unwrap();
    std::fs::write(
        legacy_dir.join("tiny-chain.json"),
        serde_json::to_vec(&b).unwrap(),
    )
    .unwrap();
    std::fs::remove_dir_all(bfile.parent().unwrap()).unwrap();
    let o = run_in(dir.path(), &[fixture("good/tiny-chain.yaml")], &PAIRS);
    let out = text(&o);
    assert!(out.contains("baseline read from"), "{out}");
    assert!(!out.contains("gate: no baseline"), "{out}");
    // Recorded on another SIMD level: not this device's baseline (neutral, not compared).
    b["device"]["simd"] = serde_json::json!("scalar");
    std::fs::write(
        legacy_dir.join("tiny-chain.json"),
        serde_json::to_vec(&b).unwrap(),
    )
    .unwrap();
    let o = run_in(dir.path(), &[fixture("good/tiny-chain.yaml")], &PAIRS);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("gate: no baseline"), "{out}");
}

#[test]
fn calibrate_measures_the_drift_and_records_the_runs_as_the_baseline() {
    let dir = tempfile::tempdir().unwrap();
    let calibrate = |runs: &str| {
        bin()
            .current_dir(dir.path())
            .args(["calibrate", "--runs", runs, "--accept", "--backend", "cpu"])
            .arg(fixture("good/tiny-chain.yaml"))
            .args(FAST)
            .args(FEW_PAIRS)
            .output()
            .unwrap()
    };
    let o = calibrate("2");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let o = calibrate("3");
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("| tiny-chain | 3/3 |"), "{out}");
    assert!(out.contains("gates at"), "{out}");
    assert_eq!(accepted_history(dir.path(), "tiny-chain"), 3);
    // Each calibration run is an archive of its own, sealed like a run's.
    let mut calibration_runs: Vec<PathBuf> = std::fs::read_dir(dir.path().join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .filter(|p| p.to_string_lossy().contains("-calibrate-"))
        .collect();
    calibration_runs.sort();
    assert_eq!(calibration_runs.len(), 3, "{out}");
    // Each calibration run is in the history store too.
    let o = bin()
        .args(["history", "--format", "csv", "--runs-dir"])
        .arg(dir.path().join("runs"))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| l.contains("-calibrate-"))
            .count(),
        3,
        "{}",
        text(&o)
    );
    for (n, r) in calibration_runs.iter().enumerate() {
        let name = r.file_name().unwrap().to_string_lossy().into_owned();
        assert!(out.contains(&name), "run {n} named: {out}");
        let v = bin().arg("verify").arg(r).output().unwrap();
        assert_eq!(v.status.code(), Some(0), "{}", text(&v));
    }
    // A run against it states what its thresholds rest on and what it can detect.
    let o = bin()
        .current_dir(dir.path())
        .args(["run", "--backend", "cpu"])
        .arg(fixture("good/tiny-chain.yaml"))
        .args(FAST)
        .args(FEW_PAIRS)
        .output()
        .unwrap();
    assert!(
        o.status.code() == Some(0) || o.status.code() == Some(1),
        "{}",
        text(&o)
    );
    let run = std::fs::read_dir(dir.path().join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .find(|p| !p.to_string_lossy().contains("-calibrate-"))
        .unwrap();
    // In the HTML report's gate table, whatever the gate decided (report.md spells out only a
    // check that did not pass).
    let report = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(
        report.contains("thresholds from 3 accepted runs")
            && report.contains("smallest slowdown detected"),
        "{report}"
    );
}

/// How many accepted runs the baseline of `spec` holds in `dir`'s `baselines/` (its one device).
fn accepted_history(dir: &Path, spec: &str) -> usize {
    let key_dir = std::fs::read_dir(dir.join("baselines"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_dir())
        .unwrap();
    let b: serde_json::Value =
        serde_json::from_slice(&std::fs::read(key_dir.join(format!("{spec}.json"))).unwrap())
            .unwrap();
    b["history"].as_array().unwrap().len()
}

/// `calibrate --accept --keep-history`: the runs join the accepted history (calibrations of
/// several sittings make one spread) instead of replacing it, the newest ten kept; without the
/// flag a calibration replaces it; the flag alone, without `--accept`, is refused.
#[test]
fn a_calibration_joins_the_history_where_asked() {
    let dir = tempfile::tempdir().unwrap();
    let calibrate = |runs: &str, extra: &[&str]| {
        bin()
            .current_dir(dir.path())
            .args(["calibrate", "--runs", runs, "--backend", "cpu"])
            .args(extra)
            .arg(fixture("good/tiny-chain.yaml"))
            .args(FAST)
            .args(FEW_PAIRS)
            .output()
            .unwrap()
    };
    let history = || accepted_history(dir.path(), "tiny-chain");
    let o = calibrate("3", &["--keep-history"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--accept"), "{}", text(&o));
    let passed =
        |o: &std::process::Output| o.status.code() == Some(0) || o.status.code() == Some(1);
    let o = calibrate("3", &["--accept"]);
    assert!(passed(&o), "{}", text(&o));
    // Calibrate may leave one run out as an outlier: count what was accepted.
    let first = history();
    assert!(first >= 2, "{}", text(&o));
    let o = calibrate("5", &["--accept", "--keep-history"]);
    assert!(passed(&o), "{}", text(&o));
    assert!(
        text(&o).contains("the old baseline's carried on"),
        "{}",
        text(&o)
    );
    let joined = history();
    assert!(joined >= first + 3, "{first} then {joined}: {}", text(&o));
    let o = calibrate("4", &["--accept", "--keep-history"]);
    assert!(passed(&o), "{}", text(&o));
    assert_eq!(history(), 10, "the newest ten kept: {}", text(&o));
    let o = calibrate("3", &["--accept"]);
    assert!(passed(&o), "{}", text(&o));
    assert!(history() <= 3, "{}", text(&o));
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// `run` and `compare` fed the same evidence reach the same verdict: a store with a history of
/// three accepted runs, run A, and head run B (slowed down for real). `run` gates B against the
/// store with A accepted into it; `compare A B --baselines STORE` builds that same reference
/// from A and the store's history.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one pair of runs read by `run` and by `compare`: the two verdicts are compared field by field"
)]
fn run_and_compare_reach_one_verdict_on_the_same_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let spec = fixture("good/tiny-chain.yaml");
    let o = bin()
        .current_dir(dir.path())
        .arg("calibrate")
        .arg(&spec)
        .args(["--runs", "3", "--accept", "--backend", "cpu"])
        .args(FAST)
        .args(FEW_PAIRS)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // Run A measured without a gate (so that it passes and `accept` takes it).
    let o = bin()
        .current_dir(dir.path())
        .arg("run")
        .arg(&spec)
        .args(["--backend", "cpu", "--baselines", "no-baselines"])
        .args(FAST)
        .args(FEW_PAIRS)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let run_a = only_run_dir(dir.path());
    // The history without A (what compare is given), and the store `run` gates B against:
    // A accepted into it.
    let without_a = dir.path().join("without-a");
    copy_tree(&dir.path().join("baselines"), &without_a);
    let o = bin()
        .arg("accept")
        .arg(&run_a)
        .arg("--baselines")
        .arg(dir.path().join("baselines"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("accepted 1 baseline"), "{}", text(&o));
    for slowdown in ["0", "0.5"] {
        let o = run_cmd(dir.path(), std::slice::from_ref(&spec), &[])
            .env("OPLEDGER_EXPERIMENT_SLOWDOWN", slowdown)
            .output()
            .unwrap();
        assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
        let run_b = only_run_dir(dir.path());
        let b: serde_json::Value =
            serde_json::from_slice(&std::fs::read(run_b.join("results.json")).unwrap()).unwrap();
        let run_state = b["specs"][0]["baseline"]["state"]
            .as_str()
            .unwrap()
            .to_string();
        let run_ratio = b["specs"][0]["baseline"]["ratio"]["point"]
            .as_f64()
            .unwrap();
        let o = bin()
            .arg("compare")
            .arg(&run_a)
            .arg(&run_b)
            .arg("--baselines")
            .arg(&without_a)
            .output()
            .unwrap();
        let out = text(&o);
        let row = out
            .lines()
            .find(|l| l.starts_with("| tiny-chain |"))
            .unwrap();
        let decision = row.rsplit('|').nth(1).unwrap().trim().to_ascii_lowercase();
        let expected = match run_state.as_str() {
            "fail" => "regression",
            "pass" => "within the limit",
            other => other,
        };
        assert!(
            decision.starts_with(expected),
            "slowdown {slowdown}: run said {run_state}, compare said {decision}: {out}"
        );
        assert!(
            row.contains(&format!("{run_ratio:.3} (")),
            "the same ratio {run_ratio:.3}: {row}"
        );
        assert!(out.contains("from the history in"), "{out}");
        assert_eq!(
            o.status.code(),
            Some(if run_state == "fail" { 1 } else { 0 }),
            "{out}"
        );
        // Compare without the baselines' history, reading the drift from `store`.
        let compare_with = |store: &str| {
            bin()
                .arg("compare")
                .arg(&run_a)
                .arg(&run_b)
                .arg("--baselines")
                .arg(dir.path().join("nowhere"))
                .arg("--store")
                .arg(dir.path().join(store))
                .output()
                .unwrap()
        };
        // The history store's runs of the case give the drift.
        let o = compare_with("runs/history.sqlite");
        assert!(
            text(&o).contains("from the history store's runs of these cases"),
            "{}",
            text(&o)
        );
        // Without either, compare says what it assumed.
        let o = compare_with("no-store.sqlite");
        assert!(
            text(&o).contains("assume no drift between runs"),
            "{}",
            text(&o)
        );
        assert!(!dir.path().join("no-store.sqlite").exists());
    }
}

/// An undecided comparison says what would decide it, in the terminal's table and in the
/// pull-request comment: with no drift between runs known, more pairs, more runs to judge
/// against, or counts.
#[test]
fn an_inconclusive_comparison_names_what_would_decide_it() {
    let dir = tempfile::tempdir().unwrap();
    // A limit of +0.1%: no run's CI against itself lies within it, none lies beyond it.
    let spec = dir.path().join("tight.yaml");
    std::fs::write(
        &spec,
        std::fs::read_to_string(fixture("good/tiny-chain.yaml")).unwrap()
            + "gate: {max_regression: 0.001}\n",
    )
    .unwrap();
    let o = run_in(dir.path(), &[spec], &["--no-store"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let run = only_run_dir(dir.path());
    let comment = dir.path().join("comment.md");
    let o = bin()
        .current_dir(dir.path())
        .arg("compare")
        .arg(&run)
        .arg(&run)
        .arg("--markdown")
        .arg(&comment)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let comment = std::fs::read_to_string(&comment).unwrap();
    for out in [text(&o), comment] {
        assert!(out.contains("| INCONCLUSIVE |"), "{out}");
        assert!(
            out.contains("What would decide it:")
                && out.contains("- tiny-chain: the CI (×")
                && out.contains("reaches across the +0.1% limit")
                && out.contains("--min-pairs")
                && out.contains("--measure counts"),
            "{out}"
        );
    }
}

#[test]
fn run_bisect_exits_as_git_bisect_run_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let code = |specs: &[PathBuf], extra: &[&str]| {
        let mut args = vec!["--bisect"];
        args.extend(extra);
        let o = run_in(dir.path(), specs, &args);
        (o.status.code(), text(&o))
    };
    // Good commit, bad commit.
    let (c, t) = code(&[fixture("good/tiny-chain.yaml")], &[]);
    assert_eq!(c, Some(0), "{t}");
    let (c, t) = code(&[fixture("good/impossible-claim.yaml")], &[]);
    assert_eq!(c, Some(1), "{t}");
    // Bad input stops the bisection (128 + 2) instead of marking the commit bad: a bad spec,
    // a misspelt flag.
    let (c, t) = code(&[fixture("bad/empty-ops.yaml")], &[]);
    assert_eq!(c, Some(130), "{t}");
    let (c, t) = code(&[fixture("good/tiny-chain.yaml")], &["--no-such-flag"]);
    assert_eq!(c, Some(130), "{t}");
    // Without --bisect the codes are the usual ones.
    let o = run_in(dir.path(), &[fixture("bad/empty-ops.yaml")], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}
