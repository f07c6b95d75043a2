//! Workers: the user's implementation of a variant in a process of its own. A worker written in
//! the standard library alone (`tests/fixtures/workers/fake_worker.py`) serves relu correctly or
//! misbehaves as asked; every misbehaviour must end that spec with its reason (and the worker's
//! own output), within the time limit, leaving no process behind. The NumPy example runs where a
//! Python with NumPy and numexpr is on PATH (`.ci/run` installs one; elsewhere it says SKIPPED,
//! and OPLEDGER_REQUIRE_PYTHON=1 makes that a failure).

mod common;
use common::{bin, fixture, only_run_dir, run_cmd, run_in, text, valgrind};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A spec folder with the fake worker and a relu spec whose `after` side runs it in `mode`.
fn relu_spec(dir: &Path, mode: &str, extra_after: &str) -> PathBuf {
    std::fs::copy(
        fixture("workers/fake_worker.py"),
        dir.join("fake_worker.py"),
    )
    .unwrap();
    let spec = dir.join(format!("relu-{mode}.yaml"));
    std::fs::write(
        &spec,
        format!(
            "name: worker-relu-{mode}\ntitle: a worker's relu\nworkload: {{kind: elementwise, ops: [relu], rows: 8, cols: 16}}\nvariants:\n  before: unfused\n  after: {{implements: fused, command: [python3, fake_worker.py, {mode}], function: relu, timeout_secs: 2{extra_after}}}\nexpect: {{bound: bandwidth}}\n"
        ),
    )
    .unwrap();
    spec
}

fn python3() -> bool {
    Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether python3 imports `modules` (`"numpy, numexpr"`); without them SKIPPED on stderr,
/// unless `OPLEDGER_REQUIRE_PYTHON` says this is CI, where they must be there.
fn python_with(modules: &str) -> bool {
    let has = common::parts::python_imports(modules);
    if !has {
        assert!(
            std::env::var_os("OPLEDGER_REQUIRE_PYTHON").is_none(),
            "OPLEDGER_REQUIRE_PYTHON is set but python3 has no {modules}"
        );
        eprintln!("SKIPPED: python3 without {modules}");
    }
    has
}

/// Processes whose command line holds `token` (a test's own temporary folder).
fn processes_with(token: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmdline = entry.path().join("cmdline");
        if let Ok(bytes) = std::fs::read(&cmdline) {
            let line = String::from_utf8_lossy(&bytes).replace('\0', " ");
            if line.contains(token) && !line.contains("cargo") {
                found.push(line);
            }
        }
    }
    found
}

fn results(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(only_run_dir(dir).join("results.json")).unwrap()).unwrap()
}

#[test]
#[cfg_attr(not(has_python), ignore = "needs python3")]
fn a_worker_side_is_measured_checked_and_named_in_the_results() {
    if !python3() {
        eprintln!("SKIPPED: no python3");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spec = relu_spec(dir.path(), "ok", "");
    let o = run_in(dir.path(), &[spec], &[]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    let r = results(dir.path());
    let s = &r["specs"][0];
    let correctness = s["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "correctness")
        .unwrap();
    assert_eq!(correctness["status"], "pass", "{correctness}");
    assert!(
        s["correctness"]["after_vs_before"]["checked"]
            .as_u64()
            .unwrap()
            == 128
    );
    let implementation = s["after"]["implementation"].as_str().unwrap();
    assert!(
        implementation.contains("python3 fake_worker.py ok (function relu)")
            && implementation.contains("fake_worker.py on cpu"),
        "{implementation}"
    );
    assert!(s["before"]["implementation"].is_null());
    // The after side's samples are the worker's own timings.
    assert!(s["samples"]["after_secs"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t.as_f64().unwrap() > 0.0));
}

/// By default a built-in pair starts each sample cold by evicting its own cache lines, while a
/// pair with a worker's side reads the read flush on its built-in side too (the worker's
/// process reads it): the run, each spec's samples and the report say which.
#[test]
#[cfg_attr(not(has_python), ignore = "needs python3")]
fn a_pair_with_a_worker_reads_where_the_run_evicts_and_the_report_says_so() {
    if !python3() {
        eprintln!("SKIPPED: no python3");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let worker = relu_spec(dir.path(), "ok", "");
    let builtin = dir.path().join("chain.yaml");
    std::fs::write(
        &builtin,
        "name: builtin-chain\ntitle: a built-in chain\nworkload: {kind: elementwise, ops: [bias_add, gelu], rows: 64, cols: 256}\nvariants: {before: unfused, after: fused}\nexpect: {bound: bandwidth}\n",
    )
    .unwrap();
    // The defaults' flush (no --flush-mib), as a user's run has it.
    let o = bin()
        .current_dir(dir.path())
        .arg("run")
        .args([&worker, &builtin])
        .args([
            "--time-cap-secs",
            "2",
            "--probe-mib",
            "8",
            "--backend",
            "cpu",
        ])
        .args(common::FEW_PAIRS)
        .args(["--no-store", "--runs-dir"])
        .arg(dir.path().join("runs"))
        .arg("--baselines")
        .arg(dir.path().join("baselines"))
        .output()
        .unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    let r = results(dir.path());
    let method = |name: &str| {
        r["specs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .map(|s| s["samples"]["flush_method"].clone())
            .unwrap()
    };
    if r["flush_method"] == "evict" {
        assert_eq!(method("builtin-chain"), "evict", "the built-in pair");
        assert_eq!(method("worker-relu-ok"), "read", "the pair with a worker");
        let report = std::fs::read_to_string(only_run_dir(dir.path()).join("report.md")).unwrap();
        let row = report
            .lines()
            .find(|l| l.starts_with("| Measurement |"))
            .unwrap();
        assert!(
            row.contains("evicted from every cache level")
                && row.contains("both sides of worker-relu-ok read"),
            "{row}"
        );
    } else {
        // A machine that cannot evict by address reads everywhere.
        assert_eq!(r["flush_method"], "read");
        assert_eq!(method("builtin-chain"), "read", "the built-in pair");
    }
}

#[test]
#[cfg_attr(not(has_python), ignore = "needs python3")]
fn every_worker_failure_fails_its_spec_with_the_reason_and_leaves_no_process() {
    if !python3() {
        eprintln!("SKIPPED: no python3");
        return;
    }
    // (mode, what the failure must say, the worker's own output quoted)
    let cases = [
        (
            "crash-at-run",
            "the worker closed the channel instead of answering `run` (it exited: exit status: 3)",
            Some("segfault of the user's kernel"),
        ),
        (
            "hang-at-run",
            "no reply to `run` within 2 s",
            Some("waiting forever"),
        ),
        (
            "garbage",
            "protocol error: the reply to `run` is not the protocol's",
            None,
        ),
        (
            "no-secs",
            "protocol error: the reply to `run` is not the protocol's (invalid type: string \"fast\", expected a sequence",
            None,
        ),
        (
            "wrong-shape",
            "the output has shape [128]; expected [8, 16]",
            None,
        ),
        (
            "wrong-dtype",
            "the output's dtype is '<f8'; expected float32",
            None,
        ),
        (
            "no-function",
            "it serves no function `relu` (it registered: other)",
            None,
        ),
        // An output swapped for something that is not a regular file, or far too large, is
        // refused at once: never a read that waits or never ends.
        (
            "fifo-output",
            "is not a regular file: a worker's output must be one",
            None,
        ),
        (
            "zero-output",
            "is a symbolic link: a worker's output must be a regular file",
            None,
        ),
        (
            "huge-output",
            "holds 1099511627776 bytes, more than a .npy of shape [8, 16] can",
            None,
        ),
        (
            "exit-at-start",
            "instead of answering `hello` (it exited: exit status: 7)",
            Some("leaving before hello"),
        ),
    ];
    for (mode, reason, output) in cases {
        let dir = tempfile::tempdir().unwrap();
        let spec = relu_spec(dir.path(), mode, "");
        // The other spec of the run still runs: a worker's failure is its spec's alone.
        let o = run_in(dir.path(), &[spec, fixture("good/tiny-chain.yaml")], &[]);
        let out = text(&o);
        assert_eq!(o.status.code(), Some(1), "{mode}: {out}");
        assert!(out.contains(reason), "{mode}: expected {reason:?} in {out}");
        if let Some(tail) = output {
            assert!(
                out.contains("its last output:") && out.contains(tail),
                "{mode}: {out}"
            );
        }
        let r = results(dir.path());
        let s = &r["specs"][0];
        assert_eq!(s["status"], "fail", "{mode}");
        assert!(s["error"].as_str().unwrap().contains(reason), "{mode}");
        assert_eq!(r["specs"][1]["status"], "pass", "{mode}: {out}");
        let token = dir.path().display().to_string();
        let left = processes_with(&token);
        assert!(left.is_empty(), "{mode}: processes left behind: {left:?}");
    }
}

#[test]
#[cfg_attr(not(has_python), ignore = "needs python3")]
fn outputs_a_guard_refuses_fail_correctness_even_when_they_match_nothing_else() {
    if !python3() {
        eprintln!("SKIPPED: no python3");
        return;
    }
    for (mode, said) in [
        (
            "zeros",
            "fused: every one of the 128 output elements is 0: a constant output",
        ),
        (
            "nan",
            "fused: the output holds 1 NaN or infinite element (the first at index 0: NaN)",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let spec = relu_spec(dir.path(), mode, "");
        let o = run_in(dir.path(), &[spec], &[]);
        let out = text(&o);
        assert_eq!(o.status.code(), Some(1), "{mode}: {out}");
        assert!(
            out.contains("❌ correctness") && out.contains(said),
            "{mode}: {out}"
        );
    }
}

#[test]
fn implementation_keys_are_checked_where_they_are_written() {
    let dir = tempfile::tempdir().unwrap();
    // (after side as written, expected location, expected message)
    let cases = [
        (
            "{implements: fused}",
            "6:3",
            "an implementation needs `command`",
        ),
        (
            "{implements: fused, command: []}",
            "6:30",
            "an implementation needs `command`",
        ),
        (
            "{implements: naive, command: [python3, w.py]}",
            "6:11",
            "variant `naive` does not apply to workload kind elementwise",
        ),
        (
            "{implements: fused, command: [python3, w.py], function: \"a b\"}",
            "6:56",
            "variants.after.function \"a b\": expected 1-64 characters",
        ),
        (
            "{implements: fused, command: [python3, w.py], timeout_secs: 0}",
            "6:56",
            "variants.after.timeout_secs 0: expected seconds in (0, 86400]",
        ),
        (
            "{implements: fused, command: [python3, w.py], workers: 2}",
            "6:56",
            "unknown field `workers`",
        ),
        (
            "{implements: fuse, command: [python3]}",
            "6:23",
            "unknown variant `fuse`",
        ),
    ];
    for (after, pos, message) in cases {
        let spec = dir.path().join("s.yaml");
        std::fs::write(
            &spec,
            format!("name: s\ntitle: t\nworkload: {{kind: elementwise, ops: [relu], rows: 8, cols: 16}}\nvariants:\n  before: unfused\n  after: {after}\nexpect: {{bound: bandwidth}}\n"),
        )
        .unwrap();
        let o = common::bin().arg("check").arg(&spec).output().unwrap();
        let out = text(&o);
        assert_eq!(o.status.code(), Some(2), "{after}: {out}");
        assert!(
            out.contains(&format!("{}:{pos}: ", spec.display())),
            "{after}: expected position {pos} in {out}"
        );
        assert!(
            out.contains(message),
            "{after}: expected {message:?} in {out}"
        );
    }
    // Two implementations of one ledger (the user's fused kernel against the built-in one)
    // are a fair comparison; one built-in variant against itself is not.
    let spec = dir.path().join("same.yaml");
    std::fs::write(
        &spec,
        "name: same\ntitle: t\nworkload: {kind: elementwise, ops: [relu], rows: 8, cols: 16}\nvariants:\n  before: fused\n  after: {implements: fused, command: [python3, w.py]}\nexpect: {bound: bandwidth}\n",
    )
    .unwrap();
    let o = common::bin().arg("check").arg(&spec).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// The shipped NumPy example: NumPy step by step against numexpr, both in one worker.
#[test]
#[cfg_attr(not(has_numpy), ignore = "needs python3 with NumPy and numexpr")]
fn the_numpy_example_runs_both_sides_in_one_worker() {
    if !python_with("numpy, numexpr") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/numpy");
    // The example, smaller, in a folder of its own: the worker imports opledger's module from
    // the PYTHONPATH opledger gives it, wherever it lives.
    std::fs::copy(
        example.join("bias_gelu_worker.py"),
        dir.path().join("bias_gelu_worker.py"),
    )
    .unwrap();
    let spec = dir.path().join("bias-gelu.yaml");
    let spec_text = std::fs::read_to_string(example.join("bias-gelu.yaml"))
        .unwrap()
        .replace("rows: 4096, cols: 4096", "rows: 64, cols: 256");
    std::fs::write(&spec, spec_text).unwrap();
    let o = run_in(dir.path(), &[spec], &[]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    let r = results(dir.path());
    let s = &r["specs"][0];
    for side in ["before", "after"] {
        let i = s[side]["implementation"].as_str().unwrap();
        assert!(
            i.contains("opledger_worker.py 2") && i.contains("NumPy"),
            "{i}"
        );
    }
    assert!(s["before"]["implementation"]
        .as_str()
        .unwrap()
        .contains("numpy_unfused"));
    assert!(s["after"]["implementation"]
        .as_str()
        .unwrap()
        .contains("numexpr_fused"));
    // The shipped worker keeps every rule of the protocol.
    let spec = dir.path().join("bias-gelu.yaml");
    let o = bin()
        .current_dir(dir.path())
        .arg("worker-test")
        .arg(&spec)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// A custom op (relu, ledger in the spec) with the fake worker on both sides: the before side
/// is the after side's reference; a sweep over one of the op's own sizes makes a case per value.
fn custom_spec(dir: &Path, before_mode: &str, after_mode: &str) -> PathBuf {
    std::fs::copy(
        fixture("workers/fake_worker.py"),
        dir.join("fake_worker.py"),
    )
    .unwrap();
    let spec = dir.join("custom.yaml");
    std::fs::write(
        &spec,
        format!(
            "name: custom-relu\ntitle: relu as a custom op\nworkload:\n  kind: custom\n  sizes: {{rows: 8, cols: 16}}\n  tensors:\n    x: {{shape: [rows, cols]}}\n    t: {{shape: [rows, cols]}}\n    y: {{shape: [rows, cols]}}\n  inputs: [x]\n  output: y\n  ledger:\n    unfused: {{reads: {{x: 1, t: 1}}, writes: {{t: 1, y: 1}}, flops: rows * cols, launches: 2}}\n    fused: {{reads: {{x: 1}}, writes: {{y: 1}}, flops: rows * cols}}\nsweep: {{rows: [8, 24]}}\nvariants:\n  before: {{implements: unfused, command: [python3, fake_worker.py, {before_mode}], function: relu}}\n  after: {{implements: fused, command: [python3, fake_worker.py, {after_mode}], function: relu}}\nexpect: {{bound: bandwidth, io_saving: {{min: 0.45, max: 0.55}}}}\n"
        ),
    )
    .unwrap();
    spec
}

#[test]
#[cfg_attr(not(has_python), ignore = "needs python3")]
fn a_custom_op_runs_on_workers_with_its_declared_ledger_and_the_before_side_as_reference() {
    if !python3() {
        eprintln!("SKIPPED: no python3");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spec = custom_spec(dir.path(), "ok", "ok");
    let o = run_in(dir.path(), &[spec], &[]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    let r = results(dir.path());
    let specs = r["specs"].as_array().unwrap();
    assert_eq!(specs.len(), 2, "one case per swept value");
    for (s, rows) in specs.iter().zip([8u64, 24]) {
        // The declared ledger: unfused moves x, t twice, y; fused x and y.
        let t = rows * 16 * 4;
        assert_eq!(s["before"]["bytes"], 4 * t);
        assert_eq!(s["after"]["bytes"], 2 * t);
        assert_eq!(s["io_saving"], 0.5);
        let c = s["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "correctness")
            .unwrap();
        assert_eq!(c["status"], "pass", "{c}");
        assert!(
            c["detail"].as_str().unwrap().contains(&format!(
                "no f64 reference for this kind: after checked against before over {} elements",
                rows * 16
            )),
            "{c}"
        );
    }
    // The after side computing something else fails against the before side.
    let dir = tempfile::tempdir().unwrap();
    let spec = custom_spec(dir.path(), "ok", "zeros");
    let o = run_in(dir.path(), &[spec], &[]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("after vs before:") && out.contains("every one of the"),
        "{out}"
    );
    // The report leaves out the comparisons that did not happen (no f64 reference here).
    let report = std::fs::read_to_string(only_run_dir(dir.path()).join("report.html")).unwrap();
    assert!(report.contains("<tr><td>after vs before</td>"), "{report}");
    assert!(!report.contains("f64 reference</td>"), "{report}");
}

#[test]
fn custom_op_errors_are_located_in_the_spec() {
    let base = "name: c\ntitle: t\nworkload:\n  kind: custom\n  sizes: {rows: 8}\n  tensors: {x: {shape: [rows]}, y: {shape: [rows]}}\n  inputs: [x]\n  output: y\n  ledger:\n    unfused: {reads: {x: 1}, writes: {y: 1}, flops: rows}\n    fused: {reads: {x: 1}, writes: {y: 1}, flops: rows}\nvariants:\n  before: {implements: unfused, command: [python3, w.py]}\n  after: {implements: fused, command: [python3, w.py]}\nexpect: {bound: bandwidth}\n";
    // (replace this, with that, expected location, expected message)
    let cases = [
        (
            "flops: rows}\n    fused",
            "flops: depth}\n    fused",
            "9:3",
            "workload.ledger: unfused.flops `depth`: unknown name `depth`; known: rows",
        ),
        (
            "writes: {y: 1}, flops: rows}\n    fused",
            "writes: {z: 1}, flops: rows}\n    fused",
            "9:3",
            "workload.ledger.unfused: `z` is no tensor of workload.tensors (its tensors: x, y)",
        ),
        (
            "unfused: {reads: {x: 1}, writes: {y: 1}",
            "unfused: {reads: {x: 1}, writes: {x: 1}",
            "9:3",
            "workload.ledger.unfused: the variant never writes the output `y`",
        ),
        (
            "shape: [rows]}, y",
            "shape: [rows ^ 2]}, y",
            "6:25",
            "unexpected `^`",
        ),
        (
            "output: y",
            "output: x",
            "8:3",
            "workload.output `x` is also an input",
        ),
        (
            "  before: {implements: unfused, command: [python3, w.py]}",
            "  before: unfused",
            "13:3",
            "variants.before: kind custom has no built-in kernels: both sides must be implementations",
        ),
        (
            "sizes: {rows: 8}",
            "sizes: {Rows: 8}",
            "5:3",
            "workload.sizes: `Rows`: expected a name of [a-z_][a-z0-9_]*",
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.yaml");
    std::fs::write(&good, base).unwrap();
    let o = common::bin().arg("check").arg(&good).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    for (this, that, pos, message) in cases {
        assert!(base.contains(this), "{this}");
        let spec = dir.path().join("c.yaml");
        std::fs::write(&spec, base.replace(this, that)).unwrap();
        let o = common::bin().arg("check").arg(&spec).output().unwrap();
        let out = text(&o);
        assert_eq!(o.status.code(), Some(2), "{that}: {out}");
        assert!(
            out.contains(&format!("{}:{pos}: ", spec.display())),
            "{that}: expected {pos} in {out}"
        );
        assert!(
            out.contains(message),
            "{that}: expected {message:?} in {out}"
        );
    }
}

/// The shipped SwiGLU example (kind custom, NumPy against numexpr), smaller.
#[test]
#[cfg_attr(not(has_numpy), ignore = "needs python3 with NumPy and numexpr")]
fn the_swiglu_example_runs_its_declared_ledger_on_workers() {
    if !python_with("numpy, numexpr") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/numpy");
    std::fs::copy(
        example.join("swiglu_worker.py"),
        dir.path().join("swiglu_worker.py"),
    )
    .unwrap();
    let spec = dir.path().join("swiglu.yaml");
    let spec_text = std::fs::read_to_string(example.join("swiglu.yaml"))
        .unwrap()
        .replace(
            "sizes: {rows: 2048, cols: 4096}",
            "sizes: {rows: 64, cols: 256}",
        );
    std::fs::write(&spec, spec_text).unwrap();
    let o = run_in(dir.path(), &[spec], &[]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    let s = &results(dir.path())["specs"][0];
    assert_eq!(s["io_saving"], 0.4);
    assert!(s["after"]["implementation"]
        .as_str()
        .unwrap()
        .contains("numexpr_fused"));
}

/// Whether process `pid` is gone (or a zombie, ended but not yet reaped by whoever adopted it).
fn gone(pid: i32) -> bool {
    for _ in 0..100 {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return true,
            Ok(stat) => {
                let state = stat
                    .rsplit(')')
                    .next()
                    .unwrap_or("")
                    .split_whitespace()
                    .next();
                if matches!(state, Some("Z" | "X")) {
                    return true;
                }
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    false
}

fn descendant_pid(dir: &Path) -> i32 {
    std::fs::read_to_string(dir.join("descendant.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
#[cfg_attr(not(has_python), ignore = "needs python3")]
fn a_bare_spec_file_name_starts_its_workers_in_the_current_folder() {
    if !python3() {
        eprintln!("SKIPPED: no python3");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    relu_spec(dir.path(), "ok", "");
    let o = common::bin()
        .current_dir(dir.path())
        .args(["run", "relu-ok.yaml"])
        .args(common::QUICK)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(results(dir.path())["specs"][0]["status"], "pass");
}

#[test]
#[cfg_attr(not(has_python), ignore = "needs python3")]
fn a_worker_that_exits_while_its_child_holds_the_channel_is_noticed_at_once() {
    if !python3() {
        eprintln!("SKIPPED: no python3");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spec = relu_spec(dir.path(), "fork-and-exit", "");
    let o = run_in(dir.path(), &[spec], &[]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("the worker exited (exit status: 5) without answering `hello`"),
        "{out}"
    );
    assert!(!out.contains("no reply"), "not a time-out: {out}");
    assert!(
        out.contains("leaving a child behind"),
        "its output quoted: {out}"
    );
    assert!(gone(descendant_pid(dir.path())), "the child was ended");
}

#[test]
#[cfg_attr(not(has_python), ignore = "needs python3")]
fn a_grandchild_in_a_session_of_its_own_is_ended_with_its_worker() {
    if !python3() {
        eprintln!("SKIPPED: no python3");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spec = relu_spec(dir.path(), "setsid-escape", "");
    let o = run_in(dir.path(), &[spec], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let pid = descendant_pid(dir.path());
    assert!(gone(pid), "the setsid() grandchild {pid} outlived opledger");
}

#[test]
#[cfg_attr(not(has_python), ignore = "needs python3")]
fn a_worker_flooding_its_output_leaves_only_a_bounded_tail() {
    if !python3() {
        eprintln!("SKIPPED: no python3");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let spec = relu_spec(dir.path(), "flood", "");
    let mut child = common::run_cmd(dir.path(), &[spec], &[])
        .env("TMPDIR", &tmp)
        .env("FLOOD_MIB", "64")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The largest temporary file seen while it runs.
    let mut largest = 0u64;
    fn sizes(d: &Path, out: &mut Vec<u64>) {
        for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => sizes(&e.path(), out),
                _ => out.push(e.metadata().map_or(0, |m| m.len())),
            }
        }
    }
    while child.try_wait().unwrap().is_none() {
        let mut v = Vec::new();
        sizes(&tmp, &mut v);
        largest = largest.max(v.into_iter().max().unwrap_or(0));
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let o = child.wait_with_output().unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("flood: the last line"),
        "the end is quoted: {out}"
    );
    assert!(out.contains("exit status: 9"), "{out}");
    assert!(
        largest < 1 << 20,
        "a temporary file of {largest} bytes: the output was kept whole"
    );
}

#[test]
#[cfg_attr(not(has_python), ignore = "needs python3")]
fn correctness_failures_are_named_by_their_indices_and_pattern() {
    if !python3() {
        eprintln!("SKIPPED: no python3");
        return;
    }
    // The relu output is 8 x 16; each mode is wrong in one place only.
    for (mode, says) in [
        ("bad-column", "at [0, 15] expected"),
        ("bad-column", "all 8 failures are in column 15"),
        ("bad-rows", "at [6, 0] expected"),
        (
            "bad-rows",
            "every element of rows 6–7 fails, and no other (16 per row)",
        ),
        (
            "bad-stride",
            "every 4th element fails from the first to the last",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let spec = relu_spec(dir.path(), mode, "");
        let o = run_in(dir.path(), &[spec], &[]);
        let out = text(&o);
        assert_eq!(o.status.code(), Some(1), "{mode}: {out}");
        let check = results(dir.path())["specs"][0]["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "correctness")
            .unwrap()["detail"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(check.contains(says), "{mode}: expected {says:?} in {check}");
        assert!(check.contains("got "), "{mode}: the values: {check}");
    }
}

#[test]
#[cfg_attr(not(has_python), ignore = "needs python3")]
fn an_after_side_slower_than_its_before_side_is_never_a_green_fusion() {
    if !python3() {
        eprintln!("SKIPPED: no python3");
        return;
    }
    // A worker's relu in pure Python against the built-in kernel: far slower, no time claim.
    let dir = tempfile::tempdir().unwrap();
    relu_spec(dir.path(), "ok", "");
    let spec = dir.path().join("slower.yaml");
    std::fs::write(
        &spec,
        "name: slower\ntitle: a slower fusion\nchecklist: [fusion]\nworkload: {kind: elementwise, ops: [relu], rows: 8, cols: 16}\nvariants:\n  before: unfused\n  after: {implements: fused, command: [python3, fake_worker.py, ok], function: relu}\nexpect: {bound: bandwidth}\n",
    )
    .unwrap();
    // Enough pairs that the saving's CI lies below zero, not only its point.
    let o = run_in(dir.path(), &[spec], &common::PAIRS);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "no claim was made: {out}");
    assert!(
        out.contains("⚠️ SLOWER: fused takes longer than unfused"),
        "{out}"
    );
    let r = results(dir.path());
    let fusion = r["checklist"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["key"] == "fusion")
        .unwrap()
        .clone();
    assert_ne!(fusion["mark"], "✅", "{fusion}");
    let report = std::fs::read_to_string(only_run_dir(dir.path()).join("report.md")).unwrap();
    assert!(
        report.contains("**fused is slower than unfused**"),
        "{report}"
    );
}

/// A compiler for the C kit: `cc` and `c++`, or `None` (SKIPPED) where there are none, unless
/// `OPLEDGER_REQUIRE_PYTHON` says this is CI (which installs g++, and its gcc with it).
fn c_compilers() -> Option<(String, String)> {
    let found = common::parts::c_compilers();
    if found.is_none() {
        assert!(
            std::env::var_os("OPLEDGER_REQUIRE_PYTHON").is_none(),
            "CI needs a C and a C++ compiler for the worker kit"
        );
        eprintln!("SKIPPED: no C and C++ compiler for include/opledger_worker.h");
    }
    found
}

/// The C worker kit: the example compiles as C99 and as C++11 without a warning, serves its
/// function over the protocol, and its output passes the kind's correctness check; a function
/// it does not serve is refused by name.
#[test]
#[cfg_attr(not(has_cc), ignore = "needs a C and a C++ compiler")]
fn the_c_example_builds_on_the_kit_and_runs() {
    let Some((cc, cxx)) = c_compilers() else {
        return;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let source = root.join("examples/c/bias_gelu_worker.c");
    let include = root.join("include");
    let worker = dir.path().join("bias_gelu_worker");
    for (compiler, args) in [
        (cc.as_str(), &["-std=c99", "-pedantic"][..]),
        (cxx.as_str(), &["-std=c++11", "-x", "c++"][..]),
    ] {
        let o = Command::new(compiler)
            .args(["-O2", "-Wall", "-Wextra", "-Werror"])
            .args(args)
            .arg("-I")
            .arg(&include)
            .arg(&source)
            .arg("-o")
            .arg(&worker)
            .arg("-lm")
            .output()
            .unwrap();
        assert!(o.status.success(), "{compiler}: {}", text(&o));
    }
    let spec_text = std::fs::read_to_string(root.join("examples/c/bias-gelu.yaml"))
        .unwrap()
        .replace("rows: 4096, cols: 4096", "rows: 64, cols: 256");
    let spec = dir.path().join("bias-gelu.yaml");
    std::fs::write(&spec, &spec_text).unwrap();
    let o = run_in(dir.path(), std::slice::from_ref(&spec), &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let r = results(dir.path());
    let s = &r["specs"][0];
    let i = s["after"]["implementation"].as_str().unwrap();
    assert!(
        i.contains("opledger_worker.h 2") && i.contains("c_fused"),
        "{i}"
    );
    assert_eq!(s["checks"][0]["name"], "correctness");
    assert_eq!(s["checks"][0]["status"], "pass", "{}", s["checks"][0]);
    // The kit's worker keeps every rule of the protocol.
    let o = bin()
        .current_dir(dir.path())
        .arg("worker-test")
        .arg(&spec)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // Thirteen steps, and a counted run of each function where Valgrind is installed.
    let steps = 13 + usize::from(common::parts::valgrind());
    assert!(
        text(&o).contains(&format!("PASS: {steps} steps")),
        "{}",
        text(&o)
    );
    // A function the worker does not serve: the spec fails, naming what it has.
    std::fs::write(
        &spec,
        spec_text.replace("function: c_fused", "function: nope"),
    )
    .unwrap();
    let o = run_in(dir.path(), &[spec], &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("c_fused"), "{}", text(&o));
}

/// nvcc: `OPLEDGER_NVCC`, else `nvcc` on PATH, or `None` (SKIPPED) unless
/// `OPLEDGER_REQUIRE_NVCC` says this is CI (which installs NVIDIA's nvcc wheels).
fn nvcc() -> Option<PathBuf> {
    if let Some(nvcc) = common::parts::nvcc() {
        return Some(nvcc);
    }
    assert!(
        std::env::var_os("OPLEDGER_REQUIRE_NVCC").is_none(),
        "OPLEDGER_REQUIRE_NVCC is set but no nvcc runs (OPLEDGER_NVCC={:?})",
        std::env::var_os("OPLEDGER_NVCC")
    );
    eprintln!(
        "SKIPPED: no nvcc (set OPLEDGER_NVCC) for the CUDA path of include/opledger_worker.h"
    );
    None
}

/// The C kit's CUDA path: the CUDA example compiles with nvcc for sm_80 and sm_90 without a
/// warning (host and device code, `-Werror all-warnings`), and the worker speaks the protocol
/// on the CUDA side: its hello names the device `cuda`, and where no GPU or driver is present
/// its setup fails with CUDA's own words rather than a crash; with a GPU, it keeps every rule.
#[test]
#[cfg_attr(not(has_nvcc), ignore = "needs nvcc (OPLEDGER_NVCC)")]
fn the_cuda_example_compiles_with_nvcc_and_says_what_cuda_said() {
    let Some(nvcc) = nvcc() else { return };
    if c_compilers().is_none() {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let worker = dir.path().join("bias_gelu_worker_cuda");
    let mut c = Command::new(&nvcc);
    c.args(["-std=c++11", "-O2", "-Werror", "all-warnings"])
        .args(["-Xcompiler", "-Wall,-Wextra,-Werror"])
        .args(["-gencode", "arch=compute_80,code=sm_80"])
        .args(["-gencode", "arch=compute_90,code=sm_90"])
        .arg("-I")
        .arg(root.join("include"));
    // NVIDIA's wheels keep the CUDA runtime's libraries beside bin/, where nvcc does not look.
    if let Some(lib) = nvcc
        .parent()
        .and_then(|b| b.parent())
        .map(|t| t.join("lib"))
    {
        if lib.join("libcudart_static.a").exists() {
            c.arg("-L").arg(lib);
        }
    }
    let o = c
        .arg(root.join("examples/c/bias_gelu_worker.cu"))
        .arg("-o")
        .arg(&worker)
        .output()
        .unwrap();
    assert!(o.status.success(), "nvcc: {}", text(&o));
    let spec_text = std::fs::read_to_string(root.join("examples/c/bias-gelu-cuda.yaml"))
        .unwrap()
        .replace("rows: 8192, cols: 8192", "rows: 64, cols: 256");
    assert!(spec_text.contains("rows: 64"), "{spec_text}");
    let spec = dir.path().join("bias-gelu-cuda.yaml");
    std::fs::write(&spec, &spec_text).unwrap();
    let o = bin()
        .current_dir(dir.path())
        .arg("worker-test")
        .arg(&spec)
        .output()
        .unwrap();
    let out = text(&o);
    assert!(
        out.lines()
            .any(|l| l.contains("ok   hello") && l.contains("on cuda")),
        "{out}"
    );
    if o.status.code() != Some(0) {
        assert_eq!(o.status.code(), Some(1), "{out}");
        let setup = out
            .lines()
            .find(|l| l.contains("FAIL setup cuda_fused"))
            .unwrap_or_else(|| panic!("without a GPU, setup fails: {out}"));
        assert!(
            setup.contains("(cudaError"),
            "CUDA's own error name: {setup}"
        );
        assert!(out.contains("ok   shutdown"), "{out}");
    }
}

/// `worker-test`: the shipped-like strict worker keeps every rule; each broken one fails with
/// the step and the rule it breaks (exit 1).
#[test]
#[cfg_attr(not(has_python), ignore = "needs python3")]
fn worker_test_passes_a_strict_worker_and_names_the_rule_each_broken_one_breaks() {
    if !python3() {
        eprintln!("SKIPPED: no python3");
        return;
    }
    let cases: [(&str, &str, &str); 10] = [
        ("lazy-timer", "run relu cold ×1", "below the 1e-8 s floor"),
        ("slow-claim", "run relu cold ×1", "more than the"),
        ("wrong-count", "run relu warm ×3", "1 times for 3 runs"),
        ("no-exit", "shutdown", "still running 2 s later"),
        (
            "ok",
            "setup of a function it does not serve",
            "answered ok: true",
        ),
        ("zeros", "output relu", "every element is 0"),
        ("wrong-shape", "output relu", "expected [8, 16]"),
        ("garbage", "run relu cold ×1", "not the protocol's"),
        ("no-function", "function relu", "not registered"),
        (
            "first-inputs-only",
            "setup relu again on other inputs",
            "kept its first inputs",
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let test = |mode: &str| {
        let spec = custom_spec(dir.path(), mode, mode);
        bin()
            .current_dir(dir.path())
            .args(["worker-test", "--timeout-secs", "5"])
            .arg(&spec)
            .output()
            .unwrap()
    };
    let o = test("strict");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains(&format!(
            "PASS: {} steps kept the protocol",
            13 + usize::from(common::parts::valgrind())
        )),
        "{}",
        text(&o)
    );
    for (mode, step, why) in cases {
        let o = test(mode);
        let out = text(&o);
        assert_eq!(o.status.code(), Some(1), "{mode}: {out}");
        let line = out
            .lines()
            .find(|l| l.contains("FAIL") && l.contains(step))
            .unwrap_or_else(|| panic!("{mode}: no failed step `{step}`: {out}"));
        assert!(line.contains(why), "{mode}: {line}\n{out}");
        assert!(out.contains("rule: "), "{mode}: the rule is named: {out}");
    }
    // A command standing in for the spec's (the C kit's example would be one), and bad input.
    let spec = custom_spec(dir.path(), "ok", "ok");
    let o = bin()
        .current_dir(dir.path())
        .args(["worker-test"])
        .arg(&spec)
        .args(["--", "python3", "fake_worker.py", "strict"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = bin()
        .args(["worker-test"])
        .arg(fixture("good/tiny-chain.yaml"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("no side of spec"), "{}", text(&o));
}

/// The relu custom op at a size where a run moves 2 MiB, the before side honest, the after
/// side run by `after` (a command and a function).
fn cheat_spec(dir: &Path, after: &str, function: &str) -> PathBuf {
    for f in ["fake_worker.py", "cheats_worker.py"] {
        std::fs::copy(fixture(&format!("workers/{f}")), dir.join(f)).unwrap();
    }
    let spec = dir.join(format!("cheat-{function}.yaml"));
    std::fs::write(
        &spec,
        format!(
            "name: cheat\ntitle: a cheating after side\nworkload:\n  kind: custom\n  sizes: {{rows: 256, cols: 1024}}\n  tensors:\n    x: {{shape: [rows, cols]}}\n    y: {{shape: [rows, cols]}}\n  inputs: [x]\n  output: y\n  ledger:\n    unfused: {{reads: {{x: 1}}, writes: {{y: 1}}, flops: rows * cols}}\n    fused: {{reads: {{x: 1}}, writes: {{y: 1}}, flops: rows * cols}}\nvariants:\n  before: {{implements: unfused, command: [python3, fake_worker.py, ok], function: relu}}\n  after: {{implements: fused, command: {after}, function: {function}}}\nexpect: {{bound: bandwidth}}\n"
        ),
    )
    .unwrap();
    spec
}

/// Kernels that look fast for a reason that is not the kernel's: each fails its spec with a
/// message that says what it did, and the honest ones pass.
#[test]
#[cfg_attr(not(has_python), ignore = "needs python3")]
fn every_cheating_kernel_of_the_corpus_fails_and_says_how() {
    if !python3() {
        eprintln!("SKIPPED: no python3");
        return;
    }
    let has_numpy = python_with("numpy");
    let fake = "[python3, fake_worker.py, MODE]";
    let module = "[python3, cheats_worker.py]";
    let mut cases: Vec<(String, &str, &str)> = vec![
        // A clock that under-reports: the bytes moved faster than any memory.
        (fake.replace("MODE", "fast-timer"), "relu", "IMPOSSIBLE"),
        // The work done when the output is asked for, the timed run doing nothing.
        (fake.replace("MODE", "work-in-output"), "relu", "IMPOSSIBLE"),
        // The result computed at setup and answered from a cache.
        (
            fake.replace("MODE", "cached-at-setup"),
            "relu",
            "IMPOSSIBLE",
        ),
        // A timer reporting nothing at all.
        (
            fake.replace("MODE", "lazy-timer"),
            "relu",
            "impossible time",
        ),
        // A case that keeps its first inputs when set up again: its honest, timed work is on
        // tensors other than the checked run's.
        (
            fake.replace("MODE", "first-inputs-only"),
            "relu",
            "inputs new to both sides",
        ),
    ];
    if has_numpy {
        cases.extend([
            (module.to_string(), "cached", "the same result"),
            (
                module.to_string(),
                "first_only",
                "the same result (the same object)",
            ),
            (module.to_string(), "lazy", "a value not computed yet"),
            // The result computed when the inputs change and copied out otherwise: its first
            // run on new inputs is many times its other runs, twice.
            (module.to_string(), "memo", "result kept across calls"),
            // The work done by the function's `prepare`, at setup: the timed call hands it back.
            (module.to_string(), "at_setup", "IMPOSSIBLE"),
        ]);
    }
    for (command, function, says) in &cases {
        let dir = tempfile::tempdir().unwrap();
        let spec = cheat_spec(dir.path(), command, function);
        if *function == "at_setup" {
            // Handing back what setup computed takes the same few microseconds at any size: time
            // sees it only where that beats what any memory could move (4x the probe, which the
            // tests keep small), so 16 MiB tensors here, against NumPy's honest relu.
            let yaml = std::fs::read_to_string(&spec)
                .unwrap()
                .replace("rows: 256", "rows: 4096")
                .replace(
                    "command: [python3, fake_worker.py, ok], function: relu",
                    "command: [python3, cheats_worker.py], function: honest",
                );
            std::fs::write(&spec, yaml).unwrap();
        }
        let o = run_in(dir.path(), &[spec], &[]);
        let out = text(&o);
        assert_eq!(o.status.code(), Some(1), "{command} {function}: {out}");
        assert!(
            out.contains(says),
            "{command} {function} should say {says:?}: {out}"
        );
        // An impossible time is judged again on a second probe of the run's own size.
        if out.contains("IMPOSSIBLE") {
            assert!(
                out.contains("probed twice, on arrays of 8 then 8 MiB"),
                "{out}"
            );
        }
    }
    // The honest ones: the fake worker's relu and the module's.
    let mut honest = vec![(fake.replace("MODE", "ok"), "relu")];
    if has_numpy {
        honest.push((module.to_string(), "honest"));
    }
    for (command, function) in honest {
        let dir = tempfile::tempdir().unwrap();
        let spec = cheat_spec(dir.path(), &command, function);
        let o = run_in(dir.path(), &[spec], &[]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{command} {function}: {}",
            text(&o)
        );
        let timing = timing_check(&results(dir.path()));
        assert_eq!(timing["status"], "pass", "{timing}");
    }
}

/// The first spec's `timing` check in a run's results.
fn timing_check(r: &serde_json::Value) -> serde_json::Value {
    r["specs"][0]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "timing")
        .cloned()
        .unwrap()
}

/// The compulsory bytes — each input read once, the output written once — are held to a
/// tighter bound than the ledger's, and only where the flush empties the last-level cache (a
/// smaller flush may leave them there): a clock that under-reports fails on them first.
#[test]
#[cfg_attr(not(has_python), ignore = "needs python3")]
fn inputs_and_output_are_judged_against_memory_where_the_flush_empties_the_cache() {
    if !python3() {
        eprintln!("SKIPPED: no python3");
        return;
    }
    let timing = |dir: &Path| {
        let r = results(dir);
        (r["device"]["llc_bytes"].as_u64().unwrap(), timing_check(&r))
    };
    // The flush of the tests (8 MiB) is below this machine's last level or not: first see.
    let dir = tempfile::tempdir().unwrap();
    let spec = cheat_spec(dir.path(), "[python3, fake_worker.py, ok]", "relu");
    let o = run_in(dir.path(), &[spec], &["--no-store"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let (llc_bytes, check) = timing(dir.path());
    assert_eq!(check["status"], "pass", "{check}");
    let judged = check["detail"]
        .as_str()
        .unwrap()
        .contains("inputs and output alone below 200%");
    assert_eq!(judged, llc_bytes <= 8 << 20, "{check}");
    // A flush as large as the last level.
    let flush_mib = llc_bytes.div_ceil(1 << 20).max(1).to_string();
    let run_flushed = |dir: &Path, spec: PathBuf| {
        bin()
            .current_dir(dir)
            .arg("run")
            .arg(spec)
            .args(["--backend", "cpu", "--no-store", "--time-cap-secs", "2"])
            .args(["--probe-mib", "8", "--flush-mib", &flush_mib])
            .args(["--min-pairs", "3", "--max-pairs", "5", "--runs-dir", "runs"])
            .output()
            .unwrap()
    };
    // The fake worker's relu in `mode`, its exit code, and its timing check's status and words.
    let judged = |mode: &str, exit: i32, status: &str, says: &str| {
        let dir = tempfile::tempdir().unwrap();
        let command = format!("[python3, fake_worker.py, {mode}]");
        let o = run_flushed(dir.path(), cheat_spec(dir.path(), &command, "relu"));
        assert_eq!(o.status.code(), Some(exit), "{mode}: {}", text(&o));
        let (_, check) = timing(dir.path());
        assert_eq!(check["status"], status, "{check}");
        assert!(check["detail"].as_str().unwrap().contains(says), "{check}");
    };
    // Judged, and an honest side passes.
    judged("ok", 0, "pass", "inputs and output alone below 200%");
    // A clock that under-reports: its inputs and output moved faster than memory allows.
    judged(
        "fast-timer",
        1,
        "fail",
        "fused read its inputs and wrote its output at",
    );
}

/// The corpus in counts mode: each side runs under Valgrind, its kit marking the counted
/// call, which is the first on inputs new to it; a second counted call on the same inputs shows
/// a result kept across calls, and instructions too few for the ledger's FLOPs show work done
/// elsewhere. A worker whose protocol code does not mark its counted runs is not counted, and
/// says why; the honest side counts, its repeat executing what its first call did.
#[test]
fn the_python_cheats_fail_in_counts_mode_too() {
    if !valgrind() || !python_with("numpy") {
        return;
    }
    let module = "[python3, cheats_worker.py]";
    let honest_before =
        "{implements: unfused, command: [python3, cheats_worker.py], function: honest}";
    let cases = [
        (module, "cached", "the same result"),
        (module, "lazy", "a value not computed yet"),
        (module, "memo", "result kept across calls"),
        (module, "at_setup", "IMPOSSIBLE counts: it read"),
        (
            "[python3, fake_worker.py, ok]",
            "relu",
            "answered its counted runs without marking them",
        ),
    ];
    for (command, function, says) in cases {
        let dir = tempfile::tempdir().unwrap();
        let spec = cheat_spec(dir.path(), command, function);
        let yaml = std::fs::read_to_string(&spec).unwrap().replace(
            "{implements: unfused, command: [python3, fake_worker.py, ok], function: relu}",
            honest_before,
        );
        std::fs::write(&spec, yaml).unwrap();
        // A 256 KiB last level: the 1 MiB tensors exceed it, so the compulsory bytes are judged.
        let o = run_in(
            dir.path(),
            &[spec],
            &["--measure", "counts", "--cache-model", "LL=262144,16,64"],
        );
        let out = text(&o);
        assert_eq!(o.status.code(), Some(1), "{command} {function}: {out}");
        assert!(
            out.contains(says),
            "{command} {function} should say {says:?}: {out}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let spec = cheat_spec(dir.path(), module, "honest");
    let yaml = std::fs::read_to_string(&spec).unwrap().replace(
        "{implements: unfused, command: [python3, fake_worker.py, ok], function: relu}",
        honest_before,
    );
    std::fs::write(&spec, yaml).unwrap();
    // Valgrind's own option sources would count only a function that never runs (0
    // instructions): what counts is the engine's command line alone.
    std::fs::write(
        dir.path().join(".valgrindrc"),
        "--toggle-collect=no_such_function\n",
    )
    .unwrap();
    let o = run_cmd(dir.path(), &[spec], &["--measure", "counts"])
        .env("VALGRIND_OPTS", "--toggle-collect=no_such_function")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let r = results(dir.path());
    let s = &r["specs"][0];
    for side in ["before", "after"] {
        let c = &s["counts"][side];
        assert_eq!(c["status"], "counted", "{c}");
        let first = c["counts"]["instructions"].as_u64().unwrap();
        let again = c["repeat_instructions"].as_u64().unwrap();
        // The interpreter's and NumPy's own work, the same again, give or take an allocation.
        assert!(
            first > 100_000 && (again as f64 - first as f64).abs() < 0.05 * first as f64,
            "{c}"
        );
    }
    // The counted call's output is checked against the reference.
    let correctness = s["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "correctness")
        .unwrap();
    assert_eq!(correctness["status"], "pass", "{correctness}");
}

/// The C kit in counts mode, through `run --measure counts` and `worker-test`: the example's
/// honest worker is counted (its call marked, its DRAM bytes those of the variant it
/// implements), and the GEMM that keeps its result fails at the second counted call.
#[test]
#[cfg_attr(
    any(not(has_valgrind), not(has_cc)),
    ignore = "needs Valgrind; needs a C and a C++ compiler"
)]
fn c_workers_are_counted_and_the_kept_result_fails() {
    let Some((cc, _)) = c_compilers() else {
        return;
    };
    if !valgrind() {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    for (source, exe) in [
        ("tests/fixtures/workers/memo_gemm.c", "memo_gemm"),
        ("examples/c/bias_gelu_worker.c", "bias_gelu_worker"),
    ] {
        let o = Command::new(&cc)
            .args(["-O2", "-std=c99", "-Wall", "-Wextra", "-Werror", "-I"])
            .arg(root.join("include"))
            .arg(root.join(source))
            .arg("-o")
            .arg(dir.path().join(exe))
            .arg("-lm")
            .output()
            .unwrap();
        assert!(o.status.success(), "{cc}: {}", text(&o));
    }
    let memo = dir.path().join("memo.yaml");
    std::fs::write(
        &memo,
        "name: memo-gemm\ntitle: a GEMM that keeps its result\nworkload: {kind: gemm, m: 128, n: 128, k: 128}\nvariants:\n  before: naive\n  after: {implements: tiled, command: [./memo_gemm], function: memo_gemm}\nexpect: {bound: compute}\n",
    )
    .unwrap();
    let o = run_in(
        dir.path(),
        std::slice::from_ref(&memo),
        &["--measure", "counts"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("after: result kept across calls"),
        "{}",
        text(&o)
    );
    let o = bin()
        .current_dir(dir.path())
        .arg("worker-test")
        .arg(&memo)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("FAIL counted run memo_gemm (Valgrind)"),
        "{}",
        text(&o)
    );

    // The example at a size whose tensors are four times a 1 MiB last level.
    let gelu = dir.path().join("gelu.yaml");
    std::fs::write(
        &gelu,
        "name: c-bias-gelu\ntitle: bias-add and GELU in C\nworkload: {kind: elementwise, ops: [bias_add, gelu], rows: 1024, cols: 1024}\nvariants:\n  before: unfused\n  after: {implements: fused, command: [./bias_gelu_worker], function: c_fused}\nexpect: {bound: bandwidth}\n",
    )
    .unwrap();
    let o = run_in(
        dir.path(),
        std::slice::from_ref(&gelu),
        &["--measure", "counts", "--cache-model", "LL=1048576,16,64"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let r = results(dir.path());
    let after = &r["specs"][0]["counts"]["after"];
    assert_eq!(after["agreement"]["kind"], "implementation", "{after}");
    assert_eq!(after["agreement"]["agrees"], true, "{after}");
    let o = bin()
        .current_dir(dir.path())
        .arg("worker-test")
        .arg(&gelu)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("ok   counted run c_fused (Valgrind)"),
        "{}",
        text(&o)
    );
}

/// The C kit under hostile requests (ASan where the compiler has it): a shape whose element
/// count wraps, in a request or in a `.npy` header, is refused; a case whose setup failed is
/// not left registered (its `run` is "no case", never a call on half-made buffers); a run count
/// that is not a whole number from 1 to a million is refused.
#[test]
#[cfg_attr(
    any(not(has_cc), not(has_python)),
    ignore = "needs a C and a C++ compiler; needs python3"
)]
fn the_c_kit_refuses_wrapping_shapes_and_bad_counts_and_keeps_no_failed_case() {
    let Some((cc, _)) = c_compilers() else {
        return;
    };
    if !python3() {
        eprintln!("SKIPPED: no python3");
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let worker = dir.path().join("kit_worker");
    let build = |sanitize: bool| {
        let mut c = Command::new(&cc);
        c.args(["-std=c99", "-O1", "-g", "-Wall", "-Wextra", "-Werror"]);
        if sanitize {
            c.arg("-fsanitize=address,undefined");
        }
        c.arg("-I")
            .arg(root.join("include"))
            .arg(root.join("examples/c/bias_gelu_worker.c"))
            .arg("-o")
            .arg(&worker)
            .arg("-lm")
            .output()
            .unwrap()
    };
    if !build(true).status.success() {
        let o = build(false);
        assert!(o.status.success(), "{}", text(&o));
    }
    let o = Command::new("python3")
        .arg(fixture("workers/drive_kit.py"))
        .arg(&worker)
        .arg(dir.path())
        .output()
        .unwrap();
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let replies: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}\n{out}")))
        .collect();
    assert_eq!(replies.len(), 12, "{out}");
    let error = |i: usize| {
        assert_eq!(replies[i]["ok"], false, "reply {i}: {out}");
        replies[i]["error"].as_str().unwrap().to_string()
    };
    assert_eq!(replies[0]["ok"], true, "{out}");
    assert!(
        error(1).contains("output needs a path and a shape"),
        "{out}"
    );
    assert!(error(2).contains("no case 'a' set up"), "{out}");
    assert!(error(3).contains("bad shape"), "{out}");
    assert!(error(4).contains("no case 'w' set up"), "{out}");
    assert_eq!(replies[5]["ok"], true, "{out}");
    for i in 6..=8 {
        assert!(
            error(i).contains("count must be a whole number from 1 to 1000000"),
            "{out}"
        );
    }
    assert_eq!(replies[9]["secs"].as_array().unwrap().len(), 2, "{out}");
    assert_eq!(replies[10]["ok"], true, "{out}");
    assert_eq!(replies[11]["exit"], 0, "{out}");
    assert!(
        !out.contains("AddressSanitizer") && !out.contains("runtime error"),
        "{out}"
    );
}

/// The Python module's worker refuses a run count that is not a whole number from 1 to a
/// million (1e300 would never answer, -5 would answer with no run at all).
#[test]
#[cfg_attr(not(has_numpy), ignore = "needs python3 with NumPy and numexpr")]
fn the_python_worker_refuses_run_counts_it_cannot_honour() {
    if !python_with("numpy") {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let o = Command::new("python3")
        .env("PYTHONPATH", root.join("python"))
        .args([
            "-c",
            r#"
import opledger_worker as w
for bad in (1e300, -5, 0, 2.5, True, "3", None, float("nan"), float("inf"), 10**7):
    try:
        w._run_count({"count": bad})
    except ValueError as e:
        assert "whole number from 1 to 1000000" in str(e), e
    else:
        raise SystemExit(f"accepted {bad!r}")
assert w._run_count({"count": 3}) == 3 and w._run_count({"count": 3.0}) == 3
assert w._run_count({}) == 1
print("refused every bad count")
"#,
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("refused every bad count"));
}

/// A C worker that keeps its last GEMM result, keyed by a checksum of A and B, and copies it
/// out when they match: its first run on new inputs is the only honest one. The checked run is
/// the first after the new inputs, and many times slower than the copies; confirmed on a third
/// set of inputs, the spec FAILs naming it. The copies alone would pass every rate check at
/// this size (a copy is possible at any speed a memory allows).
#[test]
#[cfg_attr(not(has_cc), ignore = "needs a C and a C++ compiler")]
fn a_c_worker_that_keeps_its_result_across_calls_fails() {
    let Some((cc, _)) = c_compilers() else {
        return;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let worker = dir.path().join("memo_gemm");
    let o = Command::new(&cc)
        .args(["-O2", "-std=c99", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(root.join("include"))
        .arg(root.join("tests/fixtures/workers/memo_gemm.c"))
        .arg("-o")
        .arg(&worker)
        .arg("-lm")
        .output()
        .unwrap();
    assert!(o.status.success(), "{cc}: {}", text(&o));
    let spec = dir.path().join("memo.yaml");
    std::fs::write(
        &spec,
        "name: memo-gemm\ntitle: a GEMM that keeps its result\nworkload: {kind: gemm, m: 128, n: 128, k: 128}\nvariants:\n  before: naive\n  after: {implements: tiled, command: [./memo_gemm], function: memo_gemm}\nexpect: {bound: compute}\n",
    )
    .unwrap();
    let o = run_in(dir.path(), std::slice::from_ref(&spec), &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("result kept across calls"),
        "{}",
        text(&o)
    );
    let r = results(dir.path());
    let s = &r["specs"][0];
    // Its output was right: only the checked run's time tells.
    let correctness = s["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "correctness")
        .unwrap();
    assert_eq!(correctness["status"], "pass", "{correctness}");
    assert!(
        s["samples"]["confirmed"]["after_secs"].as_f64().is_some(),
        "{s}"
    );
    // And the run right after it on the same inputs, the confirming run's yardstick.
    assert!(
        s["samples"]["repeated"]["after_secs"].as_f64().is_some(),
        "{s}"
    );
}

/// A worker's text is data: escape sequences and GitHub workflow commands in its error and its
/// output are shown, not obeyed (in the terminal, the CI log and the results), and a worker's
/// environment holds none of the secrets opledger masks elsewhere (the store's URL, any
/// variable with a password in a URL).
#[test]
#[cfg_attr(not(has_python), ignore = "needs python3")]
fn a_workers_text_is_shown_not_obeyed_and_it_gets_no_secret() {
    if !python3() {
        eprintln!("SKIPPED: no python3");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spec = relu_spec(dir.path(), "hostile-text", "");
    let o = run_cmd(dir.path(), &[spec], &[])
        .env("OPLEDGER_STORE", dir.path().join("history.sqlite"))
        .env("DATABASE_URL", "postgres://ci:hunter2@127.0.0.1:1/db")
        .output()
        .unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("env: (none)"), "{out}");
    assert!(!out.contains('\u{1b}') && !out.contains('\u{7}'), "{out:?}");
    assert!(out.contains("[U+001B][31mred"), "{out}");
    for line in out.lines() {
        assert!(!line.trim_start().starts_with("::"), "{line}");
    }
    assert!(
        out.contains("| ::error::a workflow command from the worker"),
        "{out}"
    );
    let run = only_run_dir(dir.path());
    for file in ["results.json", "report.md"] {
        let t = std::fs::read_to_string(run.join(file)).unwrap();
        assert!(t.contains("env: (none)"), "{file}: {t}");
        assert!(
            !t.contains('\u{1b}') && !t.contains("\\u001b"),
            "{file}: {t}"
        );
        assert!(!t.contains("hunter2"), "{file}");
    }
}

/// A worker that launches its kernel on a side stream — which no event on the timed stream
/// waits for, the commonest way a kernel looks fast on public leaderboards — is timed with the
/// work it started (the device is synchronised before the end mark) and its output read
/// complete: against an honest relu it FAILs the time saving its spec claims, exactly as the
/// same kernel on the timed stream does, and is neither IMPOSSIBLE nor a wrong output. Run on
/// the stand-in GPU of tests/fixtures/workers/standin (streams modelled on threads).
#[test]
#[cfg_attr(not(has_numpy), ignore = "needs python3 with NumPy and numexpr")]
fn a_kernel_on_a_side_stream_is_timed_with_its_work() {
    let standin = fixture("workers/standin");
    for function in ["side_stream", "same_stream"] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(
            fixture("workers/streams_worker.py"),
            dir.path().join("streams_worker.py"),
        )
        .unwrap();
        let spec = cheat_spec(dir.path(), "[python3, streams_worker.py]", function);
        // Against NumPy's relu (a fraction of a millisecond at this size): the modelled kernel
        // takes 20 ms, wherever it runs.
        fails_its_time_claim_correctly(
            &spec,
            "command: [python3, cheats_worker.py], function: honest",
            ("PYTHONPATH", &standin),
            function,
        );
    }
}

/// Runs `spec` (a [`cheat_spec`]) with its before side `before` and a claimed time saving of
/// 20% (`env` set for the run): the spec fails that claim with a correct output, and no time
/// is impossible — what a side timed with all its work, and read complete, does.
fn fails_its_time_claim_correctly(spec: &Path, before: &str, env: (&str, &Path), what: &str) {
    let yaml = std::fs::read_to_string(spec)
        .unwrap()
        .replace(
            "command: [python3, fake_worker.py, ok], function: relu",
            before,
        )
        .replace(
            "expect: {bound: bandwidth}",
            "expect: {bound: bandwidth, time_saving: {min: 0.2}}",
        );
    std::fs::write(spec, yaml).unwrap();
    let dir = spec.parent().unwrap();
    let o = bin()
        .current_dir(dir)
        .env(env.0, env.1)
        .arg("run")
        .arg(spec)
        .args(common::FAST)
        .args(common::FEW_PAIRS)
        .args(["--backend", "cpu"])
        .output()
        .unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{what}: {out}");
    let r = results(dir);
    let s = &r["specs"][0];
    assert!(s["error"].is_null(), "{what}: {out}");
    let status = |name: &str| {
        s["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .map(|c| c["status"].clone())
            .unwrap_or_else(|| panic!("{what}: no {name} check: {out}"))
    };
    assert_eq!(status("correctness"), "pass", "{what}: {out}");
    assert_eq!(status("time_saving"), "fail", "{what}: {out}");
    assert!(!out.contains("IMPOSSIBLE"), "{what}: {out}");
}

/// The C kit's CUDA path keeps opledger's one timing rule, shown against a stand-in CUDA runtime
/// (tests/fixtures/workers/cudart: streams are threads, device memory is host memory, "GPU work"
/// is a host function on a stream): a worker whose relu runs on a stream of its own is timed
/// with its 20 ms of work and its output read complete, so it FAILs the time saving its spec
/// claims against the same relu on stream 0 — where events on stream 0 alone timed it at under
/// a microsecond and copied its output back before it was written.
#[test]
#[cfg_attr(
    any(not(has_nvcc), not(has_cc)),
    ignore = "needs nvcc (OPLEDGER_NVCC); needs a C and a C++ compiler"
)]
fn the_c_kits_cuda_path_times_a_side_stream_with_its_work() {
    let Some(nvcc) = nvcc() else { return };
    let Some((_, cxx)) = c_compilers() else {
        return;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fixtures = root.join("tests/fixtures/workers/cudart");
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    let o = Command::new(&cxx)
        .args(["-std=c++17", "-O2", "-shared", "-fPIC", "-Wall", "-Werror"])
        .arg("-Wl,-soname,libcudart.so.13")
        .arg(fixtures.join("cudart_standin.cpp"))
        .arg("-o")
        .arg(lib.join("libcudart.so"))
        .arg("-lpthread")
        .output()
        .unwrap();
    assert!(o.status.success(), "the stand-in runtime: {}", text(&o));
    std::os::unix::fs::symlink("libcudart.so", lib.join("libcudart.so.13")).unwrap();
    let mut c = Command::new(&nvcc);
    c.args(["-std=c++11", "-O2", "-arch=sm_90", "-cudart", "shared"])
        .arg("-I")
        .arg(root.join("include"))
        .arg("-L")
        .arg(&lib);
    // NVIDIA's wheels keep the device runtime's library beside bin/, where nvcc does not look.
    if let Some(l) = nvcc
        .parent()
        .and_then(|b| b.parent())
        .map(|t| t.join("lib"))
    {
        c.arg("-L").arg(l);
    }
    let o = c
        .arg(fixtures.join("side_stream_worker.cu"))
        .arg("-o")
        .arg(dir.path().join("ssw"))
        .output()
        .unwrap();
    assert!(o.status.success(), "nvcc: {}", text(&o));
    let spec = cheat_spec(dir.path(), "[./ssw]", "side_stream");
    fails_its_time_claim_correctly(
        &spec,
        "command: [./ssw], function: same_stream",
        ("LD_LIBRARY_PATH", &lib),
        "side_stream",
    );
}
