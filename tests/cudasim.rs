//! The CUDA backend end to end without a GPU: `tests/cudasim/cudasim.cpp` (a CPU stand-in for
//! libcuda.so that runs the very kernel sources as C++, one fiber per CUDA thread) is built with
//! the system C++ compiler and put first on LD_LIBRARY_PATH of the real binary, which then runs
//! every workload kind and variant with `--backend cuda`: NVRTC compiles the modules, cudarc
//! allocates, uploads, launches (graph capture included), times with events and copies back, and
//! the outputs are checked against the f64 references by the same verdict code as on a GPU.
//!
//! Needs g++ and libnvrtc (on LD_LIBRARY_PATH, as `.ci/run` sets it). Without them the tests say
//! they skipped; with OPLEDGER_REQUIRE_NVRTC=1 (set by `.ci/run`) a missing tool is a failure.
//! Timings on the simulator are the CPU's and mean nothing: only behaviour is asserted.

use opledger::backend::cuda::nvrtc;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn skip(why: &str) -> bool {
    assert!(
        std::env::var_os("OPLEDGER_REQUIRE_NVRTC").is_none(),
        "OPLEDGER_REQUIRE_NVRTC is set but the CUDA simulator cannot run: {why}"
    );
    // To the real stderr, past the harness's capture, so that a skip is visible.
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!("SKIPPED: {why}\n").as_bytes(),
    );
    true
}

fn cxx() -> String {
    crate::common::parts::cxx()
}

fn compile(out: &Path, main: &str, shared: bool) -> Result<(), String> {
    let mut c = Command::new(cxx());
    c.args([
        "-std=c++17",
        "-O2",
        "-fno-strict-aliasing",
        "-Wno-unknown-pragmas",
    ]);
    if shared {
        c.args(["-shared", "-fPIC", "-fvisibility=hidden"]);
    }
    c.arg("-I")
        .arg(root().join("crates/backend/src/cuda/kernels"))
        .arg("-I")
        .arg(root().join("tests/cudasim"))
        .arg(root().join("tests/cudasim").join(main))
        .arg("-o")
        .arg(out);
    let o = c
        .output()
        .map_err(|e| format!("cannot run {} ({e})", cxx()))?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{main} does not compile:\n{}",
            String::from_utf8_lossy(&o.stderr)
        ))
    }
}

/// The folder holding the simulator's libcuda.so (built once per test binary), or None to skip.
fn simulator() -> Option<&'static Path> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    if cfg!(not(target_arch = "x86_64")) {
        // The fibers switch with x86-64 assembly; elsewhere the simulator is not built.
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"SKIPPED: tests/cudasim runs on x86-64 only\n",
        );
        return None;
    }
    let built = DIR.get_or_init(|| {
        if Command::new(cxx()).arg("--version").output().is_err() {
            return Err(format!(
                "no C++ compiler ({}) to build tests/cudasim",
                cxx()
            ));
        }
        if !nvrtc::available() {
            return Err("libnvrtc not found; set LD_LIBRARY_PATH to an NVRTC lib folder".into());
        }
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cudasim");
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        compile(&dir.join("libcuda.so"), "cudasim.cpp", true).unwrap_or_else(|e| panic!("{e}"));
        Ok(dir)
    });
    match built {
        Ok(dir) => Some(dir),
        Err(why) => {
            skip(why);
            None
        }
    }
}

fn with_simulator(c: &mut Command, sim: &Path) {
    let mut path = sim.as_os_str().to_owned();
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
        path.push(":");
        path.push(old);
    }
    c.env("LD_LIBRARY_PATH", path);
    c.env_remove("GITHUB_STEP_SUMMARY");
}

fn run(sim: &Path, dir: &Path, specs: &[PathBuf], backend: &str) -> Output {
    run_cmd(sim, dir, specs, backend).output().unwrap()
}

/// The command [`run`] runs, for a caller that sets more of it.
fn run_cmd(sim: &Path, dir: &Path, specs: &[PathBuf], backend: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_opledger"));
    with_simulator(&mut c, sim);
    c.current_dir(dir)
        .arg("run")
        .args(specs)
        .args(["--backend", backend])
        .args(["--probe-mib", "8", "--min-pairs", "3", "--max-pairs", "4"])
        .args(["--time-cap-secs", "1"])
        .arg("--baselines")
        .arg(dir.join("baselines"))
        .arg("--runs-dir")
        .arg(dir.join("runs"));
    c
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn results(dir: &Path) -> Value {
    let run = results_dir(dir);
    serde_json::from_str(&std::fs::read_to_string(run.join("results.json")).unwrap()).unwrap()
}

/// The one run folder under `dir/runs`.
fn results_dir(dir: &Path) -> PathBuf {
    let runs: Vec<_> = std::fs::read_dir(dir.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(runs.len(), 1, "one run directory: {runs:?}");
    runs[0].clone()
}

fn check<'a>(spec: &'a Value, name: &str) -> &'a Value {
    spec["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("{}: no {name} check", spec["name"]))
}

#[test]
fn simulator_self_test_catches_broken_kernels() {
    if simulator().is_none() {
        return;
    }
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cudasim/selftest");
    compile(&exe, "selftest.cpp", false).unwrap_or_else(|e| panic!("{e}"));
    let o = Command::new(&exe).output().unwrap();
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    for line in [
        "ok   block sum over 256 threads",
        "ok   divergent barrier and shuffle is a deadlock",
        "ok   full-mask shuffle in a partial warp is reported",
        "ok   a missing __syncthreads changes the result",
        "ok   mma m16n8k16 equals the plain product",
        "ok   ldmatrix.x4 (plain and .trans) fragments give the plain product",
        "ok   a write past the end of a device buffer stops the process",
        "cudasim: segmentation fault",
    ] {
        assert!(out.contains(line), "missing {line:?} in:\n{out}");
    }
}

/// Every workload kind and both variants of each (elementwise unfused/fused on the scalar and
/// the float4 path, RMSNorm, LayerNorm
/// and softmax unfused/fused, GEMM naive/tiled, f32 attention standard/flash causal, bf16
/// attention standard/tensor-core flash causal and not, launch chain eager/graph) run through
/// the CUDA backend and match the f64 reference.
#[test]
#[cfg_attr(
    not(has_cudasim),
    ignore = "needs the driver simulator (x86-64, g++, NVRTC)"
)]
fn every_kind_runs_correctly_on_the_simulated_driver() {
    let Some(sim) = simulator() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let f = |p: &str| root().join("tests/fixtures").join(p);
    // Every tiny spec of every kind the CUDA backend has kernels for (the registry's), and the
    // bf16 and float4 cases.
    let mut specs: Vec<PathBuf> = std::fs::read_dir(f("kinds"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let spec = opledger::spec::load(p).unwrap();
            opledger::backend::cannot_run(opledger::device::DeviceKind::Cuda, &spec.workload)
                .is_none()
        })
        .collect();
    specs.sort();
    let kinds_run = specs.len();
    specs.extend([
        f("good/tiny-chain.yaml"),
        f("cudasim/tiny-attention-bf16-causal.yaml"),
        f("cudasim/tiny-attention-bf16.yaml"),
        f("cudasim/tiny-chain-float4.yaml"),
    ]);
    let o = run(sim, tmp.path(), &specs, "cuda");
    let out = text(&o);
    // Exit 0 or 1: bound and speed claims are judged on the simulator's meaningless timings, but
    // bad input (2) or an unavailable backend (3) would be a real failure.
    assert!(matches!(o.status.code(), Some(0 | 1)), "{out}");
    assert!(
        out.contains("backend cuda (requested): opledger cudasim"),
        "{out}"
    );
    let r = results(tmp.path());
    assert_eq!(r["backend"], "cuda");
    assert!(r["device"]["name"].as_str().unwrap().contains("cudasim"));
    assert_eq!(
        r["device"]["key"],
        "cuda-opledger-cudasim-cpu-emulation-sm90-2sms"
    );
    // Device identity: the simulator reports 8 GiB and driver 13.0.
    assert_eq!(r["device"]["memory_bytes"], 8u64 << 30);
    assert_eq!(r["device"]["driver"], "CUDA 13.0");
    // The probes ran: copy, FMA and (sm_90) the bf16 tensor-core peak; the L2 flush buffer is
    // twice the simulated 4 MiB L2.
    for ceiling in [
        "copy_bytes_per_sec",
        "fma_flops_per_sec",
        "tensor_flops_per_sec",
    ] {
        assert!(r["ceilings"][ceiling].as_f64().unwrap() > 0.0, "{ceiling}");
    }
    assert_eq!(r["flush_bytes"], 8u64 << 20);
    let specs = r["specs"].as_array().unwrap();
    assert_eq!(specs.len(), kinds_run + 4);
    for kind in opledger::kinds::WorkloadKind::ALL {
        if *kind != opledger::kinds::WorkloadKind::Probe && kind.builtin_kernels() {
            assert!(
                specs.iter().any(|s| s["workload"]["kind"] == kind.name()),
                "kind {} did not run on the simulated GPU",
                kind.name()
            );
        }
    }
    for s in specs {
        assert!(s["error"].is_null(), "{}: {}", s["name"], s["error"]);
        let c = check(s, "correctness");
        assert_eq!(c["status"], "pass", "{}: {}", s["name"], c["detail"]);
        let corr = &s["correctness"];
        for part in ["before_vs_reference", "after_vs_reference"] {
            assert!(corr[part]["checked"].as_u64().unwrap() > 0, "{part}");
            assert_eq!(corr[part]["mismatches"], 0, "{}: {part}", s["name"]);
        }
    }
}

/// `--backend auto` takes the GPU when a driver with a device is there (and says so); the probe
/// kind, which only the CPU backend runs, is an error of that spec, not a crash.
#[test]
#[cfg_attr(
    not(has_cudasim),
    ignore = "needs the driver simulator (x86-64, g++, NVRTC)"
)]
fn auto_backend_picks_the_simulated_gpu() {
    let Some(sim) = simulator() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let specs = [
        root().join("tests/fixtures/kinds/tiny-launch.yaml"),
        root().join("tests/fixtures/kinds/tiny-probe.yaml"),
    ];
    let o = run(sim, tmp.path(), &specs, "auto");
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("backend cuda"), "{out}");
    let r = results(tmp.path());
    assert_eq!(r["backend"], "cuda");
    let specs = r["specs"].as_array().unwrap();
    assert_eq!(check(&specs[0], "correctness")["status"], "pass");
    assert!(
        specs[1]["error"]
            .as_str()
            .unwrap()
            .contains("the probe kind runs on the CPU backend"),
        "{}",
        specs[1]["error"]
    );
}

/// `scripts/gpu-check.sh`, the one call a GPU machine gets, dry-run on the simulator (QUICK=1:
/// the NVRTC compile of every kernel for the device and the tiny specs of every kind), so that a
/// broken script cannot waste a GPU loan: its steps, the results it keeps and its table.
/// The GPU check's script as a GPU machine's budget needs it: on the simulator it finishes, its
/// output is three files (at most 8 come back), its summary and archive are rewritten after
/// every step (a check killed midway keeps the steps it made), and steps past the deadline are
/// skipped and said.
#[test]
#[cfg_attr(
    not(has_cudasim),
    ignore = "needs the driver simulator (x86-64, g++, NVRTC)"
)]
fn gpu_check_script_dry_run() {
    let Some(sim) = simulator() else { return };
    let script = |out: &Path, env: &[(&str, &str)]| {
        let tmp = tempfile::tempdir().unwrap();
        let mut c = Command::new("bash");
        with_simulator(&mut c, sim);
        c.current_dir(root())
            .arg("scripts/gpu-check.sh")
            .env("QUICK", "1")
            .env("BIN", env!("CARGO_BIN_EXE_opledger"))
            .env("OUT", out)
            .env("TMPDIR", tmp.path());
        for (k, v) in env {
            c.env(k, v);
        }
        let o = c.output().unwrap();
        (o, tmp)
    };
    let files = |out: &Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let archived = |out: &Path| -> String {
        let o = Command::new("tar")
            .arg("-tzf")
            .arg(out.join("results.tar.gz"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let out = tempfile::tempdir().unwrap();
    let (o, _tmp) = script(out.path(), &[]);
    let printed = text(&o);
    assert_eq!(
        files(out.path()),
        ["log.txt", "results.tar.gz", "summary.txt"],
        "{printed}"
    );
    let summary = std::fs::read_to_string(out.path().join("summary.txt")).unwrap();
    let line = |name: &str| {
        summary
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} step: {summary}"))
            .to_string()
    };
    assert!(line("cuda-compile").contains("exit 0"), "{summary}");
    // Exit 0 or 1 (bound and speed claims are judged on the simulator's meaningless timings),
    // never 2 (bad input), 3 (no backend) or 124 (out of time).
    let tiny = line("tiny-kinds");
    assert!(
        tiny.contains("exit 0") || tiny.contains("exit 1"),
        "{summary}"
    );
    let inside = archived(out.path());
    assert!(
        inside.contains("tiny-kinds-results.json") && inside.contains("tiny-kinds-report.md"),
        "{inside}"
    );
    for spec in [
        "tiny-attention-bf16-causal",
        "tiny-chain-float4",
        "tiny-launch",
    ] {
        let line = printed
            .lines()
            .find(|l| l.contains(spec))
            .unwrap_or_else(|| panic!("no table line for {spec}:\n{printed}"));
        assert!(line.contains("correctness pass"), "{line}");
    }

    // Killed right after its first step (as the device tool kills a command past its limit):
    // the summary holds that step and the archive is whole; no later step ran.
    let out = tempfile::tempdir().unwrap();
    let (o, _tmp) = script(out.path(), &[("STOP_AFTER", "cuda-compile")]);
    assert_eq!(o.status.code(), None, "killed: {}", text(&o));
    let summary = std::fs::read_to_string(out.path().join("summary.txt")).unwrap();
    assert!(summary.contains("cuda-compile"), "{summary}");
    assert!(!summary.contains("tiny-kinds"), "{summary}");
    assert!(!archived(out.path()).contains("results.json"));
    assert_eq!(
        files(out.path()),
        ["log.txt", "results.tar.gz", "summary.txt"],
        "{summary}"
    );

    // No time left: every step is skipped and says so, the summary still written.
    let out = tempfile::tempdir().unwrap();
    let (o, _tmp) = script(out.path(), &[("DEADLINE_SECS", "1")]);
    let summary = std::fs::read_to_string(out.path().join("summary.txt")).unwrap();
    assert!(
        summary.contains("cuda-compile                 skipped: the deadline"),
        "{summary}\n{}",
        text(&o)
    );
    assert!(files(out.path()).len() <= 8);
}

/// A user's own CUDA kernel (`examples/cuda/`) against the built-in unfused variant: compiled by
/// NVRTC from the user's file, bound by argument names, launched and timed on the CUDA backend,
/// and checked against the f64 reference; a kernel that does not compile fails its spec with
/// NVRTC's log pointing into the user's file.
#[test]
#[cfg_attr(
    not(has_cudasim),
    ignore = "needs the driver simulator (x86-64, g++, NVRTC)"
)]
fn a_users_cuda_kernel_runs_as_one_side() {
    let Some(sim) = simulator() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let example = root().join("examples/cuda");
    std::fs::copy(
        example.join("bias_gelu.cu"),
        tmp.path().join("bias_gelu.cu"),
    )
    .unwrap();
    let spec_text = std::fs::read_to_string(example.join("bias-gelu.yaml"))
        .unwrap()
        .replace("rows: 8192, cols: 8192", "rows: 16, cols: 256")
        // Two cases of one kernel: compiled once, run twice.
        .replace("variants:", "sweep: {rows: [16, 32]}\nvariants:");
    let spec = tmp.path().join("bias-gelu.yaml");
    std::fs::write(&spec, spec_text).unwrap();
    let o = run(sim, tmp.path(), std::slice::from_ref(&spec), "cuda");
    let out = text(&o);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{out}");
    let r = results(tmp.path());
    assert_eq!(r["specs"].as_array().unwrap().len(), 2);
    for s in r["specs"].as_array().unwrap() {
        assert!(s["error"].is_null(), "{}", s["error"]);
        assert_eq!(check(s, "correctness")["status"], "pass", "{out}");
        let about = s["after"]["implementation"].as_str().unwrap();
        assert!(
            about.contains("bias_gelu.cu (entry bias_gelu_fused), compiled by NVRTC for sm_90"),
            "{about}"
        );
    }
    // More than 48 KiB of dynamic shared memory (up to the device's opt-in limit): the
    // kernel's limit is raised before it launches, as a GPU (and the simulator) requires.
    let big = tmp.path().join("bias-gelu-smem.yaml");
    std::fs::write(
        &big,
        std::fs::read_to_string(&spec)
            .unwrap()
            .replace("name: cuda-bias-gelu", "name: cuda-bias-gelu-smem")
            .replace("sweep: {rows: [16, 32]}\n", "")
            .replace(
                "      block: [256]",
                "      block: [256]\n      smem_bytes: 65536",
            ),
    )
    .unwrap();
    let runs = tmp.path().join("runs");
    std::fs::remove_dir_all(&runs).unwrap();
    let o = run(sim, tmp.path(), std::slice::from_ref(&big), "cuda");
    let out = text(&o);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{out}");
    let r = results(tmp.path());
    let s = &r["specs"][0];
    assert!(s["error"].is_null(), "{}", s["error"]);
    assert_eq!(check(s, "correctness")["status"], "pass", "{out}");

    // A compile error: that spec fails with NVRTC's log, naming the user's file and line.
    std::fs::write(
        tmp.path().join("bias_gelu.cu"),
        "extern \"C\" __global__ void bias_gelu_fused(float* y, const float* x, const float* bias,\n    long long rows, long long cols) {\n  y[0] = undeclared;\n}\n",
    )
    .unwrap();
    let runs = tmp.path().join("runs");
    std::fs::remove_dir_all(&runs).unwrap();
    let o = run(sim, tmp.path(), std::slice::from_ref(&spec), "cuda");
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("bias_gelu.cu(3): error") && out.contains("undeclared"),
        "{out}"
    );
}

/// A user's source that includes the toolkit's half-precision headers compiles where a toolkit
/// is found (CI: the runtime wheel installed beside nvcc), and is not compiled with fast math
/// unless its options ask (an `#error` under `#if __USE_FAST_MATH__` would fire).
#[test]
#[cfg_attr(
    any(not(has_cudasim), not(has_nvcc)),
    ignore = "needs the driver simulator (x86-64, g++, NVRTC) and a CUDA toolkit's nvcc"
)]
fn a_users_cuda_kernel_includes_the_toolkits_headers_and_keeps_its_own_math() {
    let Some(sim) = simulator() else { return };
    let nvcc = crate::common::parts::nvcc().expect("the build found nvcc");
    // The toolkit is the folder above nvcc's `bin/` (on PATH when named bare).
    let nvcc = if nvcc.components().count() > 1 {
        nvcc
    } else {
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|d| d.join(&nvcc))
            .find(|p| p.is_file())
            .expect("nvcc on PATH")
    };
    let toolkit = nvcc.parent().and_then(Path::parent).unwrap().to_path_buf();
    let tmp = tempfile::tempdir().unwrap();
    let example = root().join("examples/cuda");
    let source = std::fs::read_to_string(example.join("bias_gelu.cu")).unwrap();
    std::fs::write(
        tmp.path().join("bias_gelu.cu"),
        format!("#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n#if __USE_FAST_MATH__\n#error fast math was forced on the user's source\n#endif\n{source}"),
    )
    .unwrap();
    let spec = tmp.path().join("bias-gelu.yaml");
    std::fs::write(
        &spec,
        std::fs::read_to_string(example.join("bias-gelu.yaml"))
            .unwrap()
            .replace("rows: 8192, cols: 8192", "rows: 16, cols: 256"),
    )
    .unwrap();
    let o = run_cmd(sim, tmp.path(), &[spec], "cuda")
        .env("CUDA_HOME", &toolkit)
        .output()
        .unwrap();
    let out = text(&o);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{out}");
    let r = results(tmp.path());
    let s = &r["specs"][0];
    assert!(s["error"].is_null(), "{}", s["error"]);
    assert_eq!(check(s, "correctness")["status"], "pass", "{out}");
}

/// `cuda:` kernels that cheat the timed runs: one writes its output only on its first launch (it
/// skips whatever is already written), one answers from a table of earlier launches' results.
/// The checked run's output is filled with NaN before it and its inputs are new (a second
/// seed), so neither's stale result can pass for the run's, and correctness fails saying so.
#[test]
#[cfg_attr(
    not(has_cudasim),
    ignore = "needs the driver simulator (x86-64, g++, NVRTC)"
)]
fn cuda_kernels_that_keep_an_earlier_result_fail_correctness() {
    let Some(sim) = simulator() else { return };
    let example = root().join("examples/cuda");
    for (file, entry, says) in [
        ("first_launch_only.cu", "bias_gelu_first_launch_only", "NaN"),
        (
            "cached_result.cu",
            "bias_gelu_cached",
            "inputs new to both sides",
        ),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        // The simulator runs what it was built with; NVRTC compiles the same file for the spec.
        std::fs::copy(
            root().join("tests/cudasim").join(file),
            tmp.path().join("bias_gelu.cu"),
        )
        .unwrap();
        let spec_text = std::fs::read_to_string(example.join("bias-gelu.yaml"))
            .unwrap()
            .replace("rows: 8192, cols: 8192", "rows: 16, cols: 256")
            .replace("entry: bias_gelu_fused", &format!("entry: {entry}"))
            .replace(
                "grid: [\"min(ceil_div(rows * cols / 4, 256), 65535)\"]",
                "grid: [\"min(ceil_div(rows * cols, 256), 65535)\"]",
            );
        assert!(spec_text.contains(entry), "{spec_text}");
        let spec = tmp.path().join("bias-gelu.yaml");
        std::fs::write(&spec, spec_text).unwrap();
        let o = run(sim, tmp.path(), std::slice::from_ref(&spec), "cuda");
        let out = text(&o);
        assert_eq!(o.status.code(), Some(1), "{entry}: {out}");
        let r = results(tmp.path());
        let c = check(&r["specs"][0], "correctness");
        assert_eq!(c["status"], "fail", "{entry}: {out}");
        assert!(c["detail"].as_str().unwrap().contains(says), "{entry}: {c}");
    }
}

/// A `cuda:` GEMM that keeps each result keyed by a sample of its inputs and copies it when the
/// key matches: right every time, and fast on every launch but the first on new inputs. That
/// launch is the checked run; many times the others, twice (a third set of inputs confirms it),
/// the spec FAILs naming it. Its outputs pass correctness: only that run's time tells.
#[test]
#[cfg_attr(
    not(has_cudasim),
    ignore = "needs the driver simulator (x86-64, g++, NVRTC)"
)]
fn a_cuda_kernel_that_keeps_its_result_across_launches_fails() {
    let Some(sim) = simulator() else { return };
    let tmp = tempfile::tempdir().unwrap();
    std::fs::copy(
        root().join("tests/cudasim/memo_gemm.cu"),
        tmp.path().join("memo_gemm.cu"),
    )
    .unwrap();
    let spec = tmp.path().join("memo.yaml");
    std::fs::write(
        &spec,
        "name: cuda-memo-gemm\ntitle: a GEMM kernel that keeps its results\nworkload: {kind: gemm, m: 32, n: 32, k: 2048}\nvariants:\n  before: naive\n  after:\n    implements: tiled\n    cuda: {source: memo_gemm.cu, entry: gemm_memo, block: [16, 16], grid: [\"ceil_div(n, 16)\", \"ceil_div(m, 16)\"], args: [C, A, B, m, n, k]}\nexpect: {bound: compute}\n",
    )
    .unwrap();
    let o = run(sim, tmp.path(), std::slice::from_ref(&spec), "cuda");
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    let r = results(tmp.path());
    let s = &r["specs"][0];
    assert_eq!(check(s, "correctness")["status"], "pass", "{out}");
    let c = check(s, "checked_run");
    assert_eq!(c["status"], "fail", "{out}");
    assert!(
        c["detail"]
            .as_str()
            .unwrap()
            .contains("tiled: result kept across calls"),
        "{c}"
    );
}

/// A folder holding a stand-in `ncu`: it answers `--version`, runs the command it is given
/// after its options (the marked pass, whose kernels the simulator really runs) and writes the
/// export named by `NCU_FIXTURE` as its log, as Nsight Compute writes the counters it read.
fn stand_in_ncu(dir: &Path) -> PathBuf {
    stand_in(
        dir,
        "ncu",
        r#"#!/bin/bash
if [ "$1" = "--version" ]; then
  echo "NVIDIA (R) Nsight Compute Command Line Profiler"
  echo "Version 2025.3.1.0 (stand-in)"
  exit 0
fi
log=""
while [ $# -gt 0 ]; do
  case "$1" in
    --log-file) log="$2"; shift 2 ;;
    --csv) shift ;;
    --page|--metrics|--cache-control|--clock-control|--print-units) shift 2 ;;
    *) break ;;
  esac
done
"$@" || exit $?
cp "$NCU_FIXTURE" "$log"
"#,
    )
}

/// A stand-in program `name` (an executable `script`) in `dir/bin`, which it returns.
fn stand_in(dir: &Path, name: &str, script: &str) -> PathBuf {
    let bin_dir = dir.join("bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    let program = bin_dir.join(name);
    std::fs::write(&program, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin_dir
}

/// `run --ncu` end to end on the simulator, with a stand-in `ncu` that runs the marked pass it
/// is given (the marker kernel compiles and launches between the variants) and writes the
/// documented-format export of the tiny chain as its log: the counters land in the run.
#[test]
#[cfg_attr(
    not(has_cudasim),
    ignore = "needs the driver simulator (x86-64, g++, NVRTC)"
)]
fn run_ncu_profiles_the_marked_pass_and_attaches_the_counters() {
    let Some(sim) = simulator() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let bin_dir = stand_in_ncu(tmp.path());
    let mut c = Command::new(env!("CARGO_BIN_EXE_opledger"));
    with_simulator(&mut c, sim);
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let o = c
        .current_dir(tmp.path())
        .env("PATH", path)
        .env("NCU_FIXTURE", root().join("tests/fixtures/ncu/raw.csv"))
        .arg("run")
        .arg(root().join("tests/fixtures/good/tiny-chain.yaml"))
        .args(["--backend", "cuda", "--ncu"])
        .args(["--probe-mib", "8", "--min-pairs", "3", "--max-pairs", "4"])
        .args(["--time-cap-secs", "1"])
        .arg("--baselines")
        .arg(tmp.path().join("baselines"))
        .arg("--runs-dir")
        .arg(tmp.path().join("runs"))
        .output()
        .unwrap();
    let out = text(&o);
    // The run's own exit code comes through: on the simulator's ceilings the chain's bound
    // check fails (its compute roof is a CPU's), so 1; the counters are within the bounds.
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("profiling the marked pass"), "{out}");
    assert!(
        out.contains("ok      tiny-chain before: DRAM read 2.491 MB"),
        "{out}"
    );
    let r = results(tmp.path());
    assert_eq!(r["specs"][0]["counters"]["before"]["launches"], 7);
    assert_eq!(r["specs"][0]["counters"]["source"], "ncu.csv");
}

/// Counts mode on the CUDA backend end to end on the simulator: without `ncu` a clear refusal
/// (exit 3, never a time passed off as counts); with the stand-in, the counts are the export's,
/// the counted calls' outputs (computed by the simulated kernels) are checked, a counts
/// baseline is accepted under the GPU's key, the same counts pass it, and an after side that
/// moves 2.7% more DRAM bytes fails the 1% gate, naming the kernel.
#[test]
#[cfg_attr(
    not(has_cudasim),
    ignore = "needs the driver simulator (x86-64, g++, NVRTC)"
)]
fn counts_on_the_cuda_backend_are_read_by_nsight_compute() {
    let Some(sim) = simulator() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let bin_dir = stand_in_ncu(tmp.path());
    let fixture = root().join("tests/fixtures/ncu/counts.csv");
    let more = tmp.path().join("more.csv");
    let export = std::fs::read_to_string(&fixture).unwrap();
    // The after side's one launch (the warm-up's, before the markers, is left as it is): a
    // kernel that does more work and reads more.
    let after_line = r#""11","4711","opledger","gpu-node","ew_fused","1","7","(256, 1, 1)","(270, 1, 1)","0","9.0","840,100","251,020","11,380","6,912","1,092,000","120,960""#;
    assert!(export.contains(after_line));
    let worse = after_line
        .replace("840,100", "870,000")
        .replace("120,960", "125,000");
    std::fs::write(&more, export.replace(after_line, &worse)).unwrap();
    let run = |path_dir: &Path, export: &Path, extra: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_opledger"));
        with_simulator(&mut c, sim);
        let path = format!("{}:/usr/bin:/bin", path_dir.display(),);
        c.current_dir(tmp.path())
            .env("PATH", path)
            .env("NCU_FIXTURE", export)
            .arg("run")
            .arg(root().join("tests/fixtures/good/tiny-chain.yaml"))
            .args(["--backend", "cuda", "--measure", "counts", "--no-store"])
            .args(["--probe-mib", "8"])
            .arg("--baselines")
            .arg(tmp.path().join("baselines"))
            .arg("--runs-dir")
            .arg(tmp.path().join("runs"))
            .args(extra)
            .output()
            .unwrap()
    };
    let o = run(&empty, &fixture, &[]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(3), "{out}");
    assert!(
        out.contains("read by Nsight Compute, and `ncu` is not on PATH"),
        "{out}"
    );
    assert!(!tmp.path().join("runs").exists(), "nothing measured: {out}");

    let o = run(&bin_dir, &fixture, &["--accept"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains("spec under Nsight Compute, 1 at a time"),
        "{out}"
    );
    let r = results(tmp.path());
    let s = &r["specs"][0];
    let counts = &s["counts"];
    assert_eq!(
        counts["engine"]["gpu"]["profiler"],
        "Version 2025.3.1.0 (stand-in)"
    );
    // The export's launches between the markers, those before the first left out.
    assert_eq!(counts["before"]["counts"]["instructions"], 368_550);
    assert_eq!(counts["before"]["counts"]["dram_read_bytes"], 2_490_800);
    assert_eq!(counts["after"]["counts"]["instructions"], 120_960);
    assert_eq!(counts["after"]["counts"]["dram_read_bytes"], 840_100);
    assert_eq!(counts["before"]["functions"][0]["function"], "ew_unary");
    // The counted calls' outputs are the simulated kernels' own, checked.
    assert_eq!(check(s, "correctness")["status"], "pass");
    let key = counts["engine"]["gpu"]["device_key"].as_str().unwrap();
    let baseline = tmp
        .path()
        .join(format!("baselines/counts-{key}/tiny-chain.json"));
    assert!(baseline.is_file(), "{out}");
    std::fs::remove_dir_all(tmp.path().join("runs")).unwrap();

    let o = run(&bin_dir, &fixture, &[]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    let r = results(tmp.path());
    assert_eq!(r["specs"][0]["counts_gate"]["metric"], "dram_bytes");
    assert_eq!(check(&r["specs"][0], "counts_regression")["status"], "pass");
    std::fs::remove_dir_all(tmp.path().join("runs")).unwrap();

    let o = run(&bin_dir, &more, &[]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    let r = results(tmp.path());
    let gate = &r["specs"][0]["counts_gate"];
    assert_eq!(gate["state"], "fail", "{gate}");
    assert!(out.contains("REGRESSION"), "{out}");
    assert_eq!(gate["functions"][0]["function"], "ew_fused", "{gate}");
}

/// A fault that leaves the context unusable (an illegal address, as the simulator makes one of
/// a kernel named by CUDASIM_FAULT_KERNEL): its spec fails with the driver's error, and every
/// spec after it says that the context was lost, naming the fault, instead of reporting the
/// same error as its own.
#[test]
#[cfg_attr(
    not(has_cudasim),
    ignore = "needs the driver simulator (x86-64, g++, NVRTC)"
)]
fn a_sticky_fault_stops_the_specs_after_it_with_context_lost() {
    let Some(sim) = simulator() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let kinds = root().join("tests/fixtures/kinds");
    let mut c = Command::new(env!("CARGO_BIN_EXE_opledger"));
    with_simulator(&mut c, sim);
    let o = c
        .current_dir(tmp.path())
        .env("CUDASIM_FAULT_KERNEL", "gemm_tiled")
        .arg("run")
        .arg(kinds.join("tiny-gemm.yaml"))
        .arg(kinds.join("tiny-softmax.yaml"))
        .args(["--backend", "cuda", "--probe-mib", "8", "--min-pairs", "3"])
        .args([
            "--max-pairs",
            "4",
            "--time-cap-secs",
            "1",
            "--runs-dir",
            "runs",
        ])
        .args(["--baselines", "baselines"])
        .output()
        .unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    let r = results(tmp.path());
    let specs = r["specs"].as_array().unwrap();
    let error = |i: usize| specs[i]["error"].as_str().unwrap_or("").to_string();
    assert!(
        error(0).contains("CUDA_ERROR_ILLEGAL_ADDRESS"),
        "{}",
        error(0)
    );
    assert!(
        error(1).contains("not run: the CUDA context was lost to an earlier fault")
            && error(1).contains("CUDA_ERROR_ILLEGAL_ADDRESS"),
        "{}",
        error(1)
    );
}

/// One timing rule for every sample, read from the simulator's call trace (its times are the
/// CPU's, its order is the backend's): each timed sample starts behind a hold kernel launched
/// just before its start event — a cold sample's flush (a read) right before that, with no
/// synchronisation between the flush and the start — and ends with the whole context
/// synchronised before its end event; a warm-up hold precedes each spec's first sample.
#[test]
#[cfg_attr(
    not(has_cudasim),
    ignore = "needs the driver simulator (x86-64, g++, NVRTC)"
)]
fn every_sample_starts_behind_the_flush_and_ends_after_all_its_work() {
    let Some(sim) = simulator() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let trace = tmp.path().join("trace.txt");
    let spec = root().join("tests/fixtures/kinds/tiny-softmax.yaml");
    let o = run_cmd(sim, tmp.path(), &[spec], "cuda")
        .env("CUDASIM_TRACE", &trace)
        .output()
        .unwrap();
    // The simulator's times judge nothing (its bound check fails): the spec ran to its end.
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    assert!(
        results(tmp.path())["specs"][0]["error"].is_null(),
        "{}",
        text(&o)
    );
    let calls: Vec<String> = std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let (mut samples, mut cold, mut warm_ups) = (0, 0, 0);
    let mut i = 0;
    while i < calls.len() {
        if calls[i] != "launch opledger_hold" {
            i += 1;
            continue;
        }
        let next = calls.get(i + 1).map(String::as_str);
        if next == Some("stream_sync") {
            // The warm-up: a hold waited for, before the spec's first sample.
            warm_ups += 1;
            i += 2;
            continue;
        }
        assert_eq!(
            next,
            Some("record"),
            "a hold not right before a start event, at call {i}"
        );
        // A cold sample's flush: launched right before the hold, nothing between.
        if i > 0 && calls[i - 1] == "launch probe_flush_read" {
            cold += 1;
        }
        // The sample: its launches, then the context synchronised, then the end event.
        let end = calls[i + 2..]
            .iter()
            .position(|c| c == "record")
            .map(|k| i + 2 + k)
            .unwrap_or_else(|| panic!("no end event after call {i}"));
        let inside = &calls[i + 2..end];
        assert!(
            inside.len() >= 2 && inside.last().map(String::as_str) == Some("ctx_sync"),
            "a sample not ended by synchronising the context: {inside:?}"
        );
        assert!(
            inside[..inside.len() - 1]
                .iter()
                .all(|c| c.starts_with("launch ") && !c.ends_with("probe_flush_read")),
            "a sample with a synchronisation or a flush inside: {inside:?}"
        );
        assert_eq!(calls.get(end + 1).map(String::as_str), Some("event_sync"));
        samples += 1;
        i = end + 1;
    }
    // The probe's samples, then the spec's: two warm-up pairs, at least three timed pairs and the
    // checked pair, the timed ones cold (the default).
    assert!(warm_ups >= 1, "no warm-up hold");
    assert!(samples >= 2 * (2 + 3 + 1), "{samples} samples");
    assert!(cold >= 2 * 3, "{cold} cold samples of {samples}");
    // Every flush is a cold sample's, right before its hold.
    let flushes = calls
        .iter()
        .filter(|c| *c == "launch probe_flush_read")
        .count();
    assert_eq!(flushes, cold, "a flush not followed by its sample's hold");
}

/// The GPU's clocks, power and clock limits are read while each spec's samples run (a
/// `nvidia-smi` query for the opened device by its PCI address), kept in the results and the
/// report, and a GPU held down by its power limit or temperature is a warning. The stand-in
/// `nvidia-smi` refuses the newer name of the reasons field, as drivers before 2023 do: the
/// older name is asked next.
#[test]
#[cfg_attr(
    not(has_cudasim),
    ignore = "needs the driver simulator (x86-64, g++, NVRTC)"
)]
fn the_gpus_clocks_and_power_are_recorded_per_spec() {
    let Some(sim) = simulator() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let bin_dir = stand_in(
        tmp.path(),
        "nvidia-smi",
        r#"#!/bin/bash
case "$*" in
  *clocks_event_reasons*) echo 'Field "clocks_event_reasons.active" is not a valid field to query.' >&2; exit 2 ;;
esac
case "$1" in --id=0000*) ;; *) echo "no --id=PCI address: $1" >&2; exit 3 ;; esac
echo "1755, 1980, 3201, 698.12, 71, 0x0000000000000004"
"#,
    );
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let spec = root().join("tests/fixtures/kinds/tiny-softmax.yaml");
    let o = run_cmd(sim, tmp.path(), &[spec], "cuda")
        .env("PATH", path)
        .output()
        .unwrap();
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    let r = results(tmp.path());
    let s = &r["specs"][0];
    let state = &s["device_state"];
    assert_eq!(state["sm_clock_mhz"], 1755.0, "{}", text(&o));
    assert_eq!(state["max_sm_clock_mhz"], 1980.0);
    assert_eq!(state["power_watts"], 698.12);
    assert_eq!(state["clock_limits"], serde_json::json!(["sw_power_cap"]));
    let warned = s["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w.as_str().unwrap().starts_with("the GPU's clocks were held down while the samples ran (sw power cap; SM clock 1755 of 1980 MHz, 698 W, 71 °C)"));
    assert!(warned, "{}", s["warnings"]);
    let report = std::fs::read_to_string(results_dir(tmp.path()).join("report.md")).unwrap();
    assert!(
        report.contains("GPU while sampling: SM clock 1755 of 1980 MHz, 698 W, 71 °C, clocks limited by: sw_power_cap"),
        "{report}"
    );
}
