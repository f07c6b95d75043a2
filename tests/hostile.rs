//! Hostile input: every case ends with exit 2 (or a clear error) and no panic, does not hang,
//! and writes nothing outside the folder it was given. Each case runs in a folder of its own
//! beside a `victim` file that must survive unchanged.

use crate::common;
use common::{bin, fixture, only_run_dir, QUICK};
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Generous limit that only a hang reaches (each case takes well under a second; that figure is
/// measured outside the tests, which assert behaviour, not speed).
const HANG_SECS: u64 = 60;

/// Runs `cmd`, killing it if it hangs; returns (exit code, stdout + stderr).
fn run(mut cmd: Command) -> (Option<i32>, String) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(HANG_SECS) {
            let _ = child.kill();
            panic!("hung for {HANG_SECS} s: {cmd:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(!out.contains("panicked"), "panic: {out}");
    (status.code(), out)
}

/// A case folder `case/` inside a parent that also holds `victim`, whose bytes are checked.
struct Sandbox {
    _root: tempfile::TempDir,
    dir: PathBuf,
    victim: PathBuf,
}

impl Sandbox {
    fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("case");
        std::fs::create_dir(&dir).unwrap();
        let victim = root.path().join("victim");
        std::fs::write(&victim, b"untouched").unwrap();
        Sandbox {
            _root: root,
            dir,
            victim,
        }
    }
    fn path(&self, p: &str) -> PathBuf {
        self.dir.join(p)
    }
    /// A run folder `name` holding the fixed archive's results.json as `edit` tampers with it.
    fn tampered_run(&self, name: &str, edit: impl FnOnce(&mut serde_json::Value)) -> PathBuf {
        let mut results: serde_json::Value =
            serde_json::from_slice(&std::fs::read(fixture("run-fixed/results.json")).unwrap())
                .unwrap();
        edit(&mut results);
        let dir = self.path(name);
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(
            dir.join("results.json"),
            serde_json::to_vec(&results).unwrap(),
        )
        .unwrap();
        dir
    }
    /// Nothing but the case folder and the untouched victim beside it.
    fn assert_contained(&self) {
        assert_eq!(std::fs::read(&self.victim).unwrap(), b"untouched");
        let parent = self.dir.parent().unwrap();
        let mut names: Vec<String> = std::fs::read_dir(parent)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["case", "victim"]);
    }
}

fn tiny_spec_text() -> String {
    std::fs::read_to_string(fixture("good/tiny-chain.yaml")).unwrap()
}

fn expect_refused(sb: &Sandbox, cmd: Command, says: &[&str]) {
    let (code, out) = run(cmd);
    assert_eq!(code, Some(2), "{out}");
    for s in says {
        assert!(out.contains(s), "expected {s:?} in: {out}");
    }
    sb.assert_contained();
}

#[test]
fn a_tampered_sweep_group_cannot_write_outside_the_output_folder() {
    let sb = Sandbox::new();
    let run_dir = sb.tampered_run("run", |r| {
        r["sweeps"][0]["group"] = serde_json::json!("x/../../../../victim")
    });
    let mut cmd = bin();
    cmd.arg("report")
        .arg(&run_dir)
        .arg("--out")
        .arg(sb.path("out/report.md"));
    std::fs::create_dir(sb.path("out")).unwrap();
    expect_refused(&sb, cmd, &["sweeps[0].group", "is not a valid name"]);
}

#[test]
fn devices_fifos_and_oversized_files_are_refused_before_reading() {
    let sb = Sandbox::new();
    let zero = sb.path("zero.yaml");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    let mut cmd = bin();
    cmd.arg("check").arg(&zero);
    expect_refused(&sb, cmd, &["zero.yaml", "a character device"]);

    let fifo = sb.path("fifo.yaml");
    let made = Command::new("mkfifo").arg(&fifo).status();
    if made.is_ok_and(|s| s.success()) {
        let mut cmd = bin();
        cmd.arg("check").arg(&fifo);
        expect_refused(&sb, cmd, &["fifo.yaml", "a FIFO"]);
        std::fs::remove_file(&fifo).unwrap();
    }

    let big = sb.path("big.yaml");
    let mut text = tiny_spec_text();
    text.push_str(&format!("# {}\n", "x".repeat(2 << 20)));
    std::fs::write(&big, text).unwrap();
    let mut cmd = bin();
    cmd.arg("check").arg(&big);
    expect_refused(
        &sb,
        cmd,
        &["big.yaml", "larger than the 1 MiB a spec may have"],
    );
    std::fs::remove_file(&big).unwrap();

    // A template and a results file likewise.
    let run_dir = sb.path("run");
    std::fs::create_dir(&run_dir).unwrap();
    std::os::unix::fs::symlink("/dev/zero", run_dir.join("results.json")).unwrap();
    let mut cmd = bin();
    cmd.arg("report").arg(&run_dir);
    expect_refused(&sb, cmd, &["results.json", "a symbolic link"]);
    std::fs::remove_file(run_dir.join("results.json")).unwrap();
    std::fs::copy(
        fixture("run-fixed/results.json"),
        run_dir.join("results.json"),
    )
    .unwrap();
    let mut cmd = bin();
    cmd.arg("report").arg(&run_dir).arg("--template").arg(&zero);
    expect_refused(&sb, cmd, &["zero.yaml", "a character device"]);
}

#[test]
fn deeply_nested_specs_are_refused_at_their_position() {
    let sb = Sandbox::new();
    let depth = 100_000;
    for (name, text, pos) in [
        (
            "lists.yaml",
            format!("name: {}{}\n", "[".repeat(depth), "]".repeat(depth)),
            "1:71",
        ),
        (
            "maps.yaml",
            format!("name: {}1{}\n", "{a: ".repeat(depth), "}".repeat(depth)),
            "1:263",
        ),
        (
            "dashes.yaml",
            format!("name: x\nchecklist:\n{}x\n", "- ".repeat(depth)),
            "3:129",
        ),
    ] {
        let p = sb.path(name);
        std::fs::write(&p, text).unwrap();
        let mut cmd = bin();
        cmd.arg("check").arg(&p);
        expect_refused(
            &sb,
            cmd,
            &[&format!("{name}:{pos}: nested more than 64 levels deep")],
        );
    }
}

#[test]
fn control_characters_and_second_documents_are_located() {
    let sb = Sandbox::new();
    for (name, text, located) in [
        (
            "nul.yaml",
            "name: tiny\ntitle: a\u{0}b\n".to_string(),
            "nul.yaml:2:9: control character U+0000",
        ),
        (
            "esc.yaml",
            format!("{}\n\u{1b}[31m\n", tiny_spec_text()),
            "esc.yaml:16:1: control character U+001B",
        ),
        (
            "two.yaml",
            format!("{}---\nname: other\n", tiny_spec_text()),
            "two.yaml:15:1: a second YAML document starts here",
        ),
    ] {
        let p = sb.path(name);
        std::fs::write(&p, text).unwrap();
        let mut cmd = bin();
        cmd.arg("check").arg(&p);
        expect_refused(&sb, cmd, &[located]);
    }
    // A byte-order mark before the first key is not an error.
    let bom = sb.path("bom.yaml");
    let text = tiny_spec_text();
    let first_key = text.find("name:").unwrap();
    std::fs::write(&bom, format!("\u{feff}{}", &text[first_key..])).unwrap();
    let (code, out) = run({
        let mut c = bin();
        c.arg("check").arg(&bom);
        c
    });
    assert_eq!(code, Some(0), "{out}");
}

#[test]
fn dangling_and_looping_links_in_a_spec_folder_are_errors() {
    let sb = Sandbox::new();
    let specs = sb.path("specs");
    std::fs::create_dir(&specs).unwrap();
    std::fs::write(specs.join("a.yaml"), tiny_spec_text()).unwrap();
    std::os::unix::fs::symlink("nowhere.yaml", specs.join("dangling.yaml")).unwrap();
    let mut cmd = bin();
    cmd.arg("check").arg(&specs);
    expect_refused(
        &sb,
        cmd,
        &["dangling.yaml", "dangling or looping symbolic link"],
    );
    std::fs::remove_file(specs.join("dangling.yaml")).unwrap();
    std::os::unix::fs::symlink("loop.yaml", specs.join("loop.yaml")).unwrap();
    let mut cmd = bin();
    cmd.arg("check").arg(&specs);
    expect_refused(
        &sb,
        cmd,
        &["loop.yaml", "dangling or looping symbolic link"],
    );
}

#[test]
fn out_of_range_flags_are_refused_before_allocating() {
    let sb = Sandbox::new();
    let spec = sb.path("tiny.yaml");
    std::fs::write(&spec, tiny_spec_text()).unwrap();
    for (flag, value) in [
        ("--probe-mib", "999999999"),
        ("--flush-mib", "999999999"),
        ("--flush-mib", "17592186044416"),
        ("--probe-mib", "0"),
        ("--flush-mib", "0"),
    ] {
        let mut cmd = bin();
        cmd.current_dir(&sb.dir)
            .args(["run", "tiny.yaml", "--backend", "cpu", flag, value]);
        expect_refused(&sb, cmd, &[flag, "is not in 1..=1048576"]);
    }
    // A probe that fits the flag's range but not this machine's memory.
    let mut cmd = bin();
    cmd.current_dir(&sb.dir).args([
        "run",
        "tiny.yaml",
        "--backend",
        "cpu",
        "--probe-mib",
        "1048576",
    ]);
    expect_refused(&sb, cmd, &["the bandwidth probe", "lower --probe-mib"]);
    assert!(!sb.path("runs").join("x").exists());
}

#[test]
fn an_address_space_limit_refuses_a_large_case_with_exit_2() {
    let sb = Sandbox::new();
    let spec = sb.path("big.yaml");
    // 16384 x 32768 f32: 2 GiB per tensor, several tensors: more than a 4 GB address space.
    std::fs::write(
        &spec,
        tiny_spec_text()
            .replace("rows: 67", "rows: 16384")
            .replace("cols: 1031", "cols: 32768"),
    )
    .unwrap();
    let mut cmd = Command::new("sh");
    cmd.current_dir(&sb.dir)
        .env_remove("GITHUB_STEP_SUMMARY")
        .arg("-c")
        .arg(format!(
            "ulimit -v 4000000 && exec {} run big.yaml --backend cpu --probe-mib 64 --flush-mib 64",
            env!("CARGO_BIN_EXE_opledger")
        ));
    expect_refused(&sb, cmd, &["big.yaml", "needs", "GiB of memory"]);
}

#[test]
fn outputs_are_checked_before_anything_is_measured_or_accepted() {
    let sb = Sandbox::new();
    std::fs::write(sb.path("tiny.yaml"), tiny_spec_text()).unwrap();
    // A runs folder that cannot be written: refused before the baseline is written.
    let mut cmd = bin();
    cmd.current_dir(&sb.dir).args([
        "run",
        "tiny.yaml",
        "--backend",
        "cpu",
        "--accept",
        "--runs-dir",
        "/proc",
    ]);
    expect_refused(
        &sb,
        cmd,
        &["/proc", "runs folder (--runs-dir) cannot be written"],
    );
    assert!(
        !sb.path("baselines").exists()
            || std::fs::read_dir(sb.path("baselines"))
                .unwrap()
                .all(|e| !e.unwrap().path().is_dir()),
        "no baseline may be written"
    );
    // A template that does not compile: refused before measuring, nothing archived.
    std::fs::write(sb.path("broken.j2"), "{% for x in %}").unwrap();
    let mut cmd = bin();
    cmd.current_dir(&sb.dir).args([
        "run",
        "tiny.yaml",
        "--backend",
        "cpu",
        "--accept",
        "--template",
        "broken.j2",
    ]);
    let (code, out) = run(cmd);
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("broken.j2"), "{out}");
    assert!(!out.contains("probing ceilings"), "measured first: {out}");
    assert!(
        std::fs::read_dir(sb.path("runs"))
            .map(|mut d| d.next().is_none())
            .unwrap_or(true),
        "no run archived"
    );
    sb.assert_contained();
}

#[test]
fn user_strings_cannot_inject_markdown_into_the_report() {
    let sb = Sandbox::new();
    let spec = tiny_spec_text().replace(
        "title: Tiny fused chain for tests",
        "title: \"<script>alert(1)</script>\\n# injected heading\\e[31m | [x](http://e)\"",
    );
    std::fs::write(sb.path("tiny.yaml"), spec).unwrap();
    let mut cmd = bin();
    cmd.current_dir(&sb.dir)
        .args(["run", "tiny.yaml"])
        .args(QUICK);
    let (code, out) = run(cmd);
    assert_eq!(code, Some(0), "{out}");
    let report = std::fs::read_to_string(only_run_dir(&sb.dir).join("report.md")).unwrap();
    assert!(!report.contains("<script>"), "{report}");
    assert!(!report.contains('\u{1b}'), "ESC in the report");
    assert!(
        !report.lines().any(|l| l.starts_with("# injected")),
        "{report}"
    );
    assert!(!report.contains("](http://e)"), "{report}");
    assert!(report.contains("&lt;script>"), "{report}");
    sb.assert_contained();
}

#[test]
fn results_of_another_schema_version_are_refused() {
    let sb = Sandbox::new();
    for v in [0, 3, 99999] {
        let dir = sb.tampered_run(&format!("run{v}"), |r| {
            r["schema_version"] = serde_json::json!(v)
        });
        let mut cmd = bin();
        cmd.arg("report").arg(&dir);
        expect_refused(
            &sb,
            cmd,
            &[&format!(
                "results schema version {v} is not one this opledger reads (1 to 2"
            )],
        );
    }
}

/// Names in report.md's code spans read as written on GitHub (a generic Rust name's `<`, not
/// `&lt;`), and a backtick in one cannot close its span; a commit that is not a commit (a
/// mention, a link) never reaches a title: the archive is refused.
#[test]
fn code_spans_show_names_as_written_and_a_forged_commit_is_refused() {
    let sb = Sandbox::new();
    let dir = sb.tampered_run("spans", |r| {
        r["specs"][0]["file"] = serde_json::json!("specs/<a>`b.yaml");
    });
    let o = bin().arg("report").arg(&dir).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("``specs/<a>`b.yaml``"), "{out}");
    assert!(!out.contains("&lt;a>"), "{out}");
    for sha in ["@admin", "deadbeef [x](http://e)", "DEADBEEF\n# heading"] {
        let dir = sb.tampered_run(&format!("sha{}", sha.len()), |r| {
            r["git_sha"] = serde_json::json!(sha);
        });
        let mut cmd = bin();
        cmd.arg("report").arg(&dir);
        expect_refused(
            &sb,
            cmd,
            &["is not a commit (expected 7-64 hexadecimal digits"],
        );
    }
}

#[test]
fn a_template_that_loops_without_end_is_stopped() {
    let sb = Sandbox::new();
    let run_dir = sb.path("run");
    std::fs::create_dir(&run_dir).unwrap();
    std::fs::copy(
        fixture("run-fixed/results.json"),
        run_dir.join("results.json"),
    )
    .unwrap();
    std::fs::write(
        sb.path("loop.j2"),
        "{% for a in range(10000) %}{% for b in range(10000) %}{% for c in specs %}{{ c.name }}{% endfor %}{% endfor %}{% endfor %}",
    )
    .unwrap();
    let mut cmd = bin();
    cmd.arg("report")
        .arg(&run_dir)
        .arg("--template")
        .arg(sb.path("loop.j2"));
    expect_refused(&sb, cmd, &["loop.j2", "fuel"]);
}

#[test]
fn a_killed_accept_leaves_no_temp_file_behind_the_next_accept() {
    let sb = Sandbox::new();
    std::fs::write(sb.path("tiny.yaml"), tiny_spec_text()).unwrap();
    let accept = || {
        let mut cmd = bin();
        cmd.current_dir(&sb.dir)
            .args(["run", "tiny.yaml", "--accept"])
            .args(QUICK);
        run(cmd)
    };
    let (code, out) = accept();
    assert_eq!(code, Some(0), "{out}");
    let key_dir = std::fs::read_dir(sb.path("baselines"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_dir())
        .unwrap();
    // What a writer killed between create and rename leaves.
    let stale = key_dir.join(".opledger-AbC123.tmp");
    std::fs::write(&stale, b"{\"half\": ").unwrap();
    let (code, out) = accept();
    assert!(code == Some(0) || code == Some(1), "{out}");
    assert!(!stale.exists(), "the stale temp file was not cleaned");
    sb.assert_contained();
}

/// `check` of one spec file written into a fresh folder (with `files` beside it): exit code and
/// output.
fn check_spec(spec: &str, files: &[(&str, &str)], extra: &[&str]) -> (Option<i32>, String) {
    let sb = Sandbox::new();
    for (name, text) in files {
        std::fs::write(sb.path(name), text).unwrap();
    }
    std::fs::write(sb.path("s.yaml"), spec).unwrap();
    let mut cmd = bin();
    cmd.arg("check").arg(sb.path("s.yaml")).args(extra);
    let r = run(cmd);
    sb.assert_contained();
    r
}

/// The `line:column` the first error of `out` points at, for the file `s.yaml`.
fn located_at(out: &str) -> String {
    let at = out.find("s.yaml:").expect("a located error") + "s.yaml:".len();
    out[at..]
        .split(|c: char| !(c.is_ascii_digit() || c == ':'))
        .next()
        .unwrap()
        .trim_end_matches(':')
        .to_string()
}

#[test]
fn a_custom_ledger_whose_counts_overflow_is_a_located_error() {
    for count in ["1125899906842624", "9223372036854775807"] {
        let spec = format!(
            "name: c\ntitle: t\nworkload:\n  kind: custom\n  sizes: {{n: 4096}}\n  tensors: {{a: {{shape: [n]}}, y: {{shape: [n]}}}}\n  inputs: [a]\n  output: y\n  ledger:\n    unfused:\n      reads:\n        a: {count}\n      writes: {{y: 1}}\n      flops: n\n    fused: {{reads: {{a: 1}}, writes: {{y: 1}}, flops: n}}\nvariants:\n  before: {{implements: unfused, command: [python3, w.py]}}\n  after: {{implements: fused, command: [python3, w.py]}}\nexpect: {{bound: bandwidth}}\n"
        );
        let (code, out) = check_spec(&spec, &[], &[]);
        assert_eq!(code, Some(2), "{count}: {out}");
        assert!(
            out.contains("workload.ledger.unfused.reads.a") && out.contains("overflow"),
            "{count}: {out}"
        );
        assert_eq!(located_at(&out), "12:9", "at `a:` under reads: {out}");
    }
}

/// A `cuda:` spec of the example kernel with `cuda` as given (indented under `after:`).
fn cuda_spec(workload_extra: &str, cuda: &str) -> String {
    format!(
        "name: k\ntitle: t\nworkload: {{kind: elementwise, ops: [bias_add, gelu], rows: 64, cols: 64{workload_extra}}}\nvariants:\n  before: unfused\n  after:\n    implements: fused\n    cuda:\n      source: k.cu\n      entry: bias_gelu_fused\n{cuda}expect: {{bound: bandwidth}}\n"
    )
}

const KERNEL: &str = "extern \"C\" __global__ void bias_gelu_fused(float* y, const float* x, const float* bias, int rows, int cols) {}\n";

#[test]
fn launches_no_gpu_can_run_are_refused_at_the_element() {
    let args = "      args: [y, x, bias, rows, cols]\n";
    for (cuda, says, at) in [
        (
            "      block: [4096]\n      grid: [16]\n".to_string() + args,
            "at most 1024 on every GPU",
            "11:15",
        ),
        (
            "      block: [1024, 1024, 64]\n      grid: [16]\n".to_string() + args,
            "67108864 threads: a block holds at most 1024",
            "11:7",
        ),
        (
            "      block: [256]\n      grid: [16, 70000]\n".to_string() + args,
            "y dimension is at most 65535",
            "12:18",
        ),
        (
            "      block: [256]\n      grid: [16]\n".to_string()
                + args
                + "      smem_bytes: 1073741824\n",
            "at most 232448 bytes",
            "14:19",
        ),
    ] {
        let (code, out) = check_spec(&cuda_spec("", &cuda), &[("k.cu", KERNEL)], &[]);
        assert_eq!(code, Some(2), "{cuda}: {out}");
        assert!(out.contains(says), "{says}: {out}");
        assert_eq!(located_at(&out), at, "{out}");
    }
}

#[test]
fn a_fractional_workload_key_into_an_integer_parameter_is_refused() {
    let cuda = "      block: [256]\n      grid: [16]\n      args: [y, x, bias, rows, scale]\n";
    let (code, out) = check_spec(&cuda_spec(", scale: 0.5", cuda), &[("k.cu", KERNEL)], &[]);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("`scale` into `int cols`: 0.5 is a fraction but the parameter is an integer"),
        "{out}"
    );
    assert_eq!(located_at(&out), "13:32", "at `scale` in args: {out}");
}

#[test]
fn cuda_errors_point_at_the_element_that_is_wrong() {
    let args = "      args: [y, x, bias, rows, cols]\n";
    // An unknown name in the grid (found when evaluated) and an unknown function (found when
    // parsed) point at the grid's element alike.
    for (grid, at) in [("[16, nosuch]", "12:18"), ("[\"nofn(rows)\"]", "12:14")] {
        let cuda = format!("      block: [256]\n      grid: {grid}\n{args}");
        let (code, out) = check_spec(&cuda_spec("", &cuda), &[("k.cu", KERNEL)], &[]);
        assert_eq!(code, Some(2), "{grid}: {out}");
        assert_eq!(located_at(&out), at, "{grid}: {out}");
    }
    // An entry the file lacks points at `entry`.
    let cuda = format!("      block: [256]\n      grid: [16]\n{args}");
    let spec = cuda_spec("", &cuda).replace("entry: bias_gelu_fused", "entry: missing_fn");
    let (code, out) = check_spec(&spec, &[("k.cu", KERNEL)], &[]);
    assert_eq!(code, Some(2), "{out}");
    assert_eq!(located_at(&out), "10:14", "{out}");
    // The CPU backend refusing a `cuda:` side points at that side's `cuda:`.
    let (code, out) = check_spec(
        &cuda_spec("", &cuda),
        &[("k.cu", KERNEL)],
        &["--backend", "cpu"],
    );
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("runs on the CUDA backend"), "{out}");
    assert_eq!(located_at(&out), "8:5", "{out}");
}

#[test]
fn bidirectional_controls_in_a_title_are_shown_not_obeyed() {
    let sb = Sandbox::new();
    let text = tiny_spec_text().replace(
        "title: Tiny fused chain for tests",
        "title: \"Tiny \\u202Eevil\\u2066 chain\\u2069\"",
    );
    std::fs::write(sb.path("s.yaml"), text).unwrap();
    let mut cmd = bin();
    cmd.current_dir(&sb.dir)
        .arg("run")
        .arg("s.yaml")
        .args(QUICK);
    let (code, out) = run(cmd);
    assert_eq!(code, Some(0), "{out}");
    let report = std::fs::read_to_string(only_run_dir(&sb.dir).join("report.md")).unwrap();
    for c in ['\u{202E}', '\u{2066}', '\u{2069}'] {
        assert!(!report.contains(c), "{c:?} reached the report");
    }
    assert!(
        report.contains("Tiny [U+202E]evil[U+2066] chain[U+2069]"),
        "{report}"
    );
    sb.assert_contained();
}
