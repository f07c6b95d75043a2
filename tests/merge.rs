//! `opledger merge`: the archives of a sharded run merged into one sign-off.

use crate::common;
use common::{bin, fixture, only_run_dir, run_in, text};
use std::path::{Path, PathBuf};

fn shard_runs(root: &Path, shards: u64) -> Vec<PathBuf> {
    let suite = [fixture("kinds"), fixture("good/tiny-chain.yaml")];
    (1..=shards)
        .map(|m| {
            let dir = root.join(format!("shard-{m}"));
            std::fs::create_dir_all(&dir).unwrap();
            let o = run_in(&dir, &suite, &["--shard", &format!("count:{m}/{shards}")]);
            assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
            only_run_dir(&dir)
        })
        .collect()
}

fn names(results: &Path) -> Vec<String> {
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(results).unwrap()).unwrap();
    r["specs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn merged_shards_are_the_suite_once_with_every_manifest_and_one_report() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = shard_runs(tmp.path(), 3);
    let out = tmp.path().join("merged");
    let store = tmp.path().join("history.sqlite");
    let o = bin()
        .arg("merge")
        .args(&runs)
        .arg("--out")
        .arg(&out)
        .arg("--store")
        .arg(&store)
        .output()
        .unwrap();
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    assert!(!text(&o).contains("ran in no shard"), "{}", text(&o));
    // The merged sign-off is recorded into the history store: every case, once.
    let o = bin()
        .args(["history", "--format", "json", "--store"])
        .arg(&store)
        .output()
        .unwrap();
    let points: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(points.as_array().unwrap().len(), 9, "{points}");
    let mut merged = names(&out.join("results.json"));
    let mut expected: Vec<String> = runs
        .iter()
        .flat_map(|r| names(&r.join("results.json")))
        .collect();
    merged.sort();
    expected.sort();
    assert_eq!(merged, expected);
    assert_eq!(merged.len(), 9, "the whole suite");
    for f in [
        "report.md",
        "report.html",
        "junit.xml",
        "summary.md",
        "roofline.svg",
        "specs/tiny-gemm.yaml",
    ] {
        assert!(out.join(f).is_file(), "{f}");
    }
    for n in 1..=3 {
        assert!(out.join(format!("shards/{n}/environment.json")).is_file());
    }
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        report.contains("merged from 3 shards"),
        "the report says it was merged"
    );
    // Case by case, the merged archive has what one run of the whole suite has: the same
    // ledgers and the same checks.
    let whole = tmp.path().join("whole");
    std::fs::create_dir_all(&whole).unwrap();
    run_in(
        &whole,
        &[fixture("kinds"), fixture("good/tiny-chain.yaml")],
        &[],
    );
    let load = |p: &Path| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
    };
    let (m, w) = (
        load(&out.join("results.json")),
        load(&only_run_dir(&whole).join("results.json")),
    );
    for ws in w["specs"].as_array().unwrap() {
        let ms = m["specs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == ws["name"])
            .unwrap();
        for key in ["io_saving", "workload"] {
            assert_eq!(ms[key], ws[key], "{}: {key}", ws["name"]);
        }
        for side in ["before", "after"] {
            assert_eq!(ms[side]["ledger"], ws[side]["ledger"], "{}", ws["name"]);
        }
        let checks = |s: &serde_json::Value| -> Vec<String> {
            s["checks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["name"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(checks(ms), checks(ws), "{}", ws["name"]);
    }
    assert_eq!(
        m["checklist"].as_array().unwrap().len(),
        w["checklist"].as_array().unwrap().len()
    );
    // The merged archive re-renders like any run's.
    let o = bin().arg("report").arg(&out).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn merge_names_missing_cases_and_refuses_duplicates() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = shard_runs(tmp.path(), 2);
    // One shard only: the other's cases are named; exit 1 unless partial results are allowed.
    let o = bin()
        .arg("merge")
        .arg("--no-store")
        .arg(&runs[0])
        .arg("--out")
        .arg(tmp.path().join("partial"))
        .output()
        .unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    let missing = names(&runs[1].join("results.json"));
    assert!(
        out.contains(&format!(
            "{} cases of the suite ran in no shard",
            missing.len()
        )),
        "{out}"
    );
    for m in &missing {
        assert!(out.contains(m.as_str()), "{m}: {out}");
    }
    let o = bin()
        .arg("merge")
        .arg("--no-store")
        .arg(&runs[0])
        .args(["--allow-partial", "--out"])
        .arg(tmp.path().join("partial-ok"))
        .output()
        .unwrap();
    assert!(text(&o).contains("ran in no shard"));
    // The same case in two archives is refused (exit 2).
    let copy = tmp.path().join("copy");
    std::fs::create_dir_all(copy.join("specs")).unwrap();
    for f in ["results.json", "environment.json"] {
        std::fs::copy(runs[0].join(f), copy.join(f)).unwrap();
    }
    let o = bin()
        .arg("merge")
        .arg("--no-store")
        .arg(&runs[0])
        .arg(&copy)
        .arg("--out")
        .arg(tmp.path().join("dup"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("was measured twice with the same results"),
        "{}",
        text(&o)
    );
}

#[test]
fn shards_of_different_devices_stay_apart() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = shard_runs(tmp.path(), 2);
    // The second shard as if measured on another machine.
    let path = runs[1].join("results.json");
    let mut r: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    r["device"]["key"] = serde_json::json!("cpu-other-machine-avx2-fma-8c-32m");
    std::fs::write(&path, serde_json::to_vec_pretty(&r).unwrap()).unwrap();
    // Sealed as the other machine's run would be.
    opledger::archive::seal(&runs[1], "run", Vec::new()).unwrap();
    let out = tmp.path().join("merged");
    let o = bin()
        .arg("merge")
        .arg("--no-store")
        .args(&runs)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    let index = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        index.contains("cpu-other-machine-avx2-fma-8c-32m/report.md"),
        "{index}"
    );
    // The index as a page too, linking each device's HTML report, which is there.
    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        page.contains("href=\"cpu-other-machine-avx2-fma-8c-32m/report.html\""),
        "{page}"
    );
    assert!(out
        .join("cpu-other-machine-avx2-fma-8c-32m/report.html")
        .is_file());
    assert_eq!(
        names(&out.join("cpu-other-machine-avx2-fma-8c-32m/results.json")),
        names(&runs[1].join("results.json"))
    );
}

/// A merged (or any archived) run becomes the baseline without measuring again, and a later run
/// is compared with it.
#[test]
fn an_archived_run_is_accepted_as_the_baseline() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = shard_runs(tmp.path(), 2);
    let out = tmp.path().join("merged");
    bin()
        .arg("merge")
        .arg("--no-store")
        .args(&runs)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let store = tmp.path().join("store");
    let o = bin()
        .arg("accept")
        .arg(&out)
        .arg("--baselines")
        .arg(&store)
        .output()
        .unwrap();
    let said = text(&o);
    assert_eq!(o.status.code(), Some(0), "{said}");
    let r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("results.json")).unwrap()).unwrap();
    let key = r["device"]["key"].as_str().unwrap();
    for s in r["specs"].as_array().unwrap() {
        let file = store
            .join(key)
            .join(format!("{}.json", s["name"].as_str().unwrap()));
        assert_eq!(
            file.is_file(),
            s["status"] == "pass",
            "{}: {said}",
            s["name"]
        );
    }
    assert!(said.contains("accepted") && said.contains(key), "{said}");
    // A run against that store is compared, not "no baseline".
    let again = tmp.path().join("again");
    std::fs::create_dir_all(&again).unwrap();
    let o = bin()
        .current_dir(&again)
        .arg("run")
        .arg(fixture("good/tiny-chain.yaml"))
        .args(common::FAST)
        .args(common::FEW_PAIRS)
        .args(["--backend", "cpu", "--baselines"])
        .arg(&store)
        .args(["--runs-dir"])
        .arg(again.join("runs"))
        .output()
        .unwrap();
    let tiny_passed = r["specs"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["name"] == "tiny-chain" && s["status"] == "pass");
    if tiny_passed {
        assert!(!text(&o).contains("no baseline"), "{}", text(&o));
    }
}

/// The Slurm example, run as a task of `--array=1-3:2` would run it (a faked Slurm environment).
#[test]
fn the_slurm_example_runs_its_array_tasks_shard() {
    let tmp = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let o = std::process::Command::new("bash")
        .current_dir(tmp.path())
        .arg(root.join("examples/slurm/opledger-array.sbatch"))
        .args(common::FAST)
        .args(common::FEW_PAIRS)
        .arg("--baselines")
        .arg(tmp.path().join("b"))
        .env("OPLEDGER", env!("CARGO_BIN_EXE_opledger"))
        .env("SPECS", fixture("kinds"))
        .env("OUT", tmp.path().join("runs"))
        .env("BACKEND", "cpu")
        .env("SLURM_ARRAY_TASK_ID", "3")
        .env("SLURM_ARRAY_TASK_MIN", "1")
        .env("SLURM_ARRAY_TASK_STEP", "2")
        .env("SLURM_ARRAY_TASK_COUNT", "2")
        .env_remove("JOB_COMPLETION_INDEX")
        .env_remove("OPLEDGER_SHARD")
        .output()
        .unwrap();
    let out = text(&o);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{out}");
    assert!(out.contains("shard 2/2 (hash, Slurm array)"), "{out}");
    let runs: Vec<_> = std::fs::read_dir(tmp.path().join("runs/shard-3"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(runs.len(), 1);
    assert!(runs[0].join("results.json").is_file());
}

/// The Kubernetes example is an Indexed Job whose shard total matches its completions, and whose
/// pods run `--shard auto`.
#[test]
fn the_kubernetes_example_is_an_indexed_job_with_its_total() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text =
        std::fs::read_to_string(root.join("examples/k8s/opledger-indexed-job.yaml")).unwrap();
    let job: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    assert_eq!(job["kind"], "Job");
    assert_eq!(job["spec"]["completionMode"], "Indexed");
    let completions = job["spec"]["completions"].as_u64().unwrap();
    let container = &job["spec"]["template"]["spec"]["containers"][0];
    let total = container["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "OPLEDGER_SHARD_TOTAL")
        .and_then(|e| e["value"].as_str())
        .unwrap();
    assert_eq!(total.parse::<u64>().unwrap(), completions);
    let command = serde_yaml::to_string(&container["args"]).unwrap();
    assert!(
        command.contains("--shard auto") && command.contains("JOB_COMPLETION_INDEX"),
        "{command}"
    );
}

/// The GitHub example shards the suite over its matrix (as many shards as the matrix has jobs)
/// and merges them in a job that needs them.
#[test]
fn the_github_example_shards_over_its_matrix_and_merges() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("examples/github/opledger.yml")).unwrap();
    let wf: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    let shards = wf["jobs"]["shard"]["strategy"]["matrix"]["shard"]
        .as_sequence()
        .unwrap()
        .len();
    let steps = serde_yaml::to_string(&wf["jobs"]["shard"]["steps"]).unwrap();
    assert!(
        steps.contains(&format!("--shard hash:${{{{ matrix.shard }}}}/{shards}")),
        "{steps}"
    );
    assert_eq!(wf["jobs"]["merge"]["needs"], "shard");
    let merge = serde_yaml::to_string(&wf["jobs"]["merge"]["steps"]).unwrap();
    assert!(merge.contains("opledger merge") && merge.contains("GITHUB_STEP_SUMMARY"));
    assert!(merge.contains("--markdown comment.md") && merge.contains("<!-- opledger-compare -->"));
}

/// The per-GPU script: one shard per device in parallel, then one merged archive (run here with
/// two "devices" on the CPU backend).
#[test]
fn the_per_gpu_script_runs_a_shard_per_device_and_merges() {
    let tmp = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = tmp.path().join("per-gpu");
    let o = std::process::Command::new("bash")
        .current_dir(tmp.path())
        .arg(root.join("examples/multi-gpu/run-per-gpu.sh"))
        .arg(fixture("kinds"))
        .args(common::FAST)
        .args(common::FEW_PAIRS)
        .arg("--baselines")
        .arg(tmp.path().join("b"))
        .env("OPLEDGER", env!("CARGO_BIN_EXE_opledger"))
        .env("NGPUS", "2")
        .env("BACKEND", "cpu")
        .env("OUT", &out)
        .output()
        .unwrap();
    let said = text(&o);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{said}");
    assert!(said.contains("2 shards, 8 specs"), "{said}");
    assert_eq!(names(&out.join("merged/results.json")).len(), 8);
}

/// Every concrete `opledger merge` command of the docs and the examples (an example's comment,
/// a workflow's `run:` step, a doc's inline command), read from where it is written
/// (`documented::written_commands`). Synopses (`RUN_DIR…`, `runs/<shard>/...`) name no glob and
/// are not commands to run.
fn documented_merge_commands() -> Vec<(PathBuf, String)> {
    crate::documented::written_commands()
        .into_iter()
        .filter(|w| w.rest.starts_with("merge ") && w.rest.contains('*') && !w.synopsis)
        .map(|w| {
            let file = w
                .place
                .rsplit_once(':')
                .map_or(w.place.as_str(), |(f, _)| f);
            let command = format!("opledger {}", w.rest.split(" # ").next().unwrap_or(&w.rest));
            (PathBuf::from(file), command)
        })
        .collect()
}

/// Each documented merge command runs as written, with `opledger` on PATH, over two shards laid
/// out where that command's glob looks (`runs/shard-*`, a volume's `/archive/shard-*` — its
/// mount point rebased into the test's folder —, a workflow's downloaded `shards/*`): each
/// shard's runs folder as `run --runs-dir` leaves it, its history store beside its archive.
#[test]
fn every_documented_merge_command_runs_as_written() {
    let commands = documented_merge_commands();
    let from: Vec<String> = commands
        .iter()
        .map(|(f, _)| f.display().to_string())
        .collect();
    for place in [
        "examples/slurm/opledger-array.sbatch",
        "examples/k8s/opledger-indexed-job.yaml",
        "examples/github/opledger.yml",
        "docs/scale-out.md",
    ] {
        assert!(
            from.iter().any(|f| f == place),
            "no merge command found in {place}: {commands:?}"
        );
    }
    let tmp = tempfile::tempdir().unwrap();
    let path_dir = tmp.path().join("bin");
    std::fs::create_dir_all(&path_dir).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_opledger"), path_dir.join("opledger")).unwrap();
    // Two shards, run once and copied into each command's layout.
    let suite = [fixture("kinds"), fixture("good/tiny-chain.yaml")];
    let made = tmp.path().join("made");
    for m in 1..=2 {
        let o = bin()
            .current_dir(tmp.path())
            .arg("run")
            .args(&suite)
            .args(common::FAST)
            .args(common::FEW_PAIRS)
            .args(["--backend", "cpu", "--shard", &format!("count:{m}/2")])
            .arg("--baselines")
            .arg(tmp.path().join("baselines"))
            .arg("--runs-dir")
            .arg(made.join(m.to_string()))
            .output()
            .unwrap();
        assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
        assert!(made.join(m.to_string()).join("history.sqlite").is_file());
    }
    // The cases of both shards: the merged archive holds each once.
    let shard_cases: usize = (1..=2)
        .map(|m| {
            let run = std::fs::read_dir(made.join(m.to_string()))
                .unwrap()
                .map(|e| e.unwrap().path())
                .find(|p| p.is_dir())
                .unwrap();
            names(&run.join("results.json")).len()
        })
        .sum();
    for (i, (file, command)) in commands.iter().enumerate() {
        let here = tmp.path().join(format!("c{i}"));
        std::fs::create_dir_all(&here).unwrap();
        // The volume's absolute mount point, here a folder of the test's.
        let command = command.replace(" /archive/", &format!(" {}/archive/", here.display()));
        let words: Vec<&str> = command.split_whitespace().collect();
        let glob = words[2];
        let out = words[words.iter().position(|w| *w == "--out").unwrap() + 1];
        let shard_pattern = Path::new(glob).parent().unwrap().to_str().unwrap();
        for m in 1..=2 {
            let shard = here.join(shard_pattern.replace('*', &m.to_string()));
            std::fs::create_dir_all(shard.parent().unwrap()).unwrap();
            let o = std::process::Command::new("cp")
                .arg("-r")
                .arg(made.join(m.to_string()))
                .arg(&shard)
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", text(&o));
        }
        let path = format!(
            "{}:{}",
            path_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let o = std::process::Command::new("bash")
            .current_dir(&here)
            .arg("-c")
            .arg(&command)
            .env("PATH", path)
            .output()
            .unwrap();
        let said = text(&o);
        assert!(
            matches!(o.status.code(), Some(0 | 1)),
            "{}: `{command}`: {said}",
            file.display()
        );
        assert!(
            said.contains("history.sqlite passed over"),
            "{}: `{command}`: {said}",
            file.display()
        );
        let merged = here.join(out).join("results.json");
        assert_eq!(
            names(&merged).len(),
            shard_cases,
            "{}: `{command}`",
            file.display()
        );
    }
}
