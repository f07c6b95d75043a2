//! The conformance check of a worker (`opledger worker-test`): the protocol's conversation
//! driven without a run — hello, setup of each function on the spec's workload, cold and warm
//! runs, the output, the failure paths (a function it does not serve, a case never set up, an
//! unknown op, a line that is not JSON), shutdown — each step a [`Finding`] against the
//! protocol's rule it tests ([`Rule`]). Data only; `report::conformance` writes the words.

use super::worker::{Request, TensorFile, Worker, FLOOR_SECS};
use crate::spec::{WorkerCommand, Workload};
use std::path::Path;
use std::time::{Duration, Instant};

/// A rule of the protocol (docs/workers.md) that a step of the check tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// The program starts and answers `hello` with `ok`, protocol 1, its name, its device and
    /// its functions.
    Hello,
    /// Every function the spec names is among those it registered.
    Serves,
    /// `setup` of a function on the workload's inputs answers `ok` within its limit.
    Setup,
    /// `run` answers `ok` with one time per run asked, each finite, above the physical floor
    /// and no longer than the request took.
    Run,
    /// `output` writes a float32 `.npy` of the output's shape, C order, finite, not one value
    /// everywhere.
    Output,
    /// `setup` again of a case already set up, on other inputs, replaces it: what the next
    /// run writes is computed on the new inputs (opledger sets every worker side up again so
    /// before its checked run).
    SetupAgain,
    /// A failed request answers `ok: false` with an `error`, and the worker serves on.
    Refuses,
    /// `shutdown` answers `ok`, and the process exits.
    Shutdown,
    /// Under Valgrind, a `run` with `counted: true` marks its call (counting on around it, a
    /// dump after it and after the flush), and a second such run on the same inputs does the
    /// work again (at least a third of the first's instructions).
    Counted,
}

/// What a step found.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Finding {
    pub rule: Rule,
    /// What was asked (`setup c_fused`, `run c_fused cold ×1`, …).
    pub step: String,
    pub ok: bool,
    /// What was seen: the reply's figures, or what broke the rule.
    pub detail: String,
}

/// The check of one worker command on a spec's workload, for each of `functions` (the
/// functions the spec's sides name with that command). Never fails: what goes wrong is a
/// finding, and a step that cannot go on ends the check there.
pub fn check(
    cmd: &WorkerCommand,
    spec_dir: &Path,
    workload: &Workload,
    functions: &[(String, String)],
) -> Vec<Finding> {
    let mut out = Vec::new();
    let Some(mut c) = Checked::start(cmd, spec_dir, workload, &mut out) else {
        return out;
    };
    for (f, _) in functions {
        let ok = c.worker.functions.contains(f);
        note(
            &mut out,
            Rule::Serves,
            &format!("function {f}"),
            ok,
            if ok {
                "registered".into()
            } else {
                format!("not registered (it has: {})", c.worker.functions.join(", "))
            },
        );
    }
    let mut ready = None;
    for (k, (f, variant)) in functions.iter().enumerate() {
        if c.worker.functions.contains(f) && c.function(&format!("case{k}"), f, variant, &mut out) {
            ready.get_or_insert(format!("case{k}"));
        }
    }
    // The failure paths: each must be refused, and the worker must answer the next request.
    if !c.refusals(&mut out) {
        // The channel is gone or out of step: nothing more can be asked.
        return out;
    }
    if let Some(id) = &ready {
        let step = "run after the refusals";
        let run = Request::Run {
            id: id.clone(),
            count: 1,
            cold: false,
            counted: false,
        };
        match c.worker.request(&run, c.limit) {
            Ok(_) => note(&mut out, Rule::Refuses, step, true, "still serving".into()),
            Err(e) => note(&mut out, Rule::Refuses, step, false, e.to_string()),
        };
    }
    c.shutdown(&mut out);
    out
}

/// A worker under check: its process, the folder of its files, the inputs it is set up on and
/// the limits of a request.
struct Checked {
    worker: Worker,
    dir: crate::stop::PrivateDir,
    inputs: std::collections::BTreeMap<String, TensorFile>,
    other_inputs: std::collections::BTreeMap<String, TensorFile>,
    workload_json: serde_json::Value,
    output_shape: Vec<u64>,
    limit: Duration,
    setup_limit: Duration,
}

impl Checked {
    /// The worker module and the workload's inputs written as a run writes them, the worker
    /// started and its hello noted; `None` (with the finding) when any step fails.
    fn start(
        cmd: &WorkerCommand,
        spec_dir: &Path,
        workload: &Workload,
        out: &mut Vec<Finding>,
    ) -> Option<Checked> {
        let dir = match crate::stop::private_dir("opledger-worker-test-", None) {
            Ok(d) => d,
            Err(e) => {
                note(
                    out,
                    Rule::Hello,
                    "start",
                    false,
                    format!("cannot make a folder: {e}"),
                );
                return None;
            }
        };
        let kind = workload.as_kind();
        let python = dir.path().join("python");
        let files = super::pair::write_worker_files(dir.path(), &python, &kind.inputs(7)).and_then(
            |first| {
                Ok((
                    first,
                    super::pair::write_inputs(dir.path(), "again", &kind.inputs(8))?,
                ))
            },
        );
        let (inputs, other_inputs) = match files {
            Ok(i) => i,
            Err(e) => {
                note(out, Rule::Hello, "start", false, e.to_string());
                return None;
            }
        };
        let worker = match Worker::start(cmd, spec_dir, &python) {
            Ok(w) => w,
            Err(e) => {
                note(out, Rule::Hello, "hello", false, e.to_string());
                return None;
            }
        };
        note(
            out,
            Rule::Hello,
            "hello",
            true,
            format!(
                "{}; functions: {}",
                worker.about,
                worker.functions.join(", ")
            ),
        );
        let limit = Duration::from_secs_f64(cmd.timeout_secs);
        Some(Checked {
            worker,
            dir,
            inputs,
            other_inputs,
            workload_json: serde_json::to_value(workload).unwrap_or(serde_json::Value::Null),
            output_shape: kind.output_shape(),
            limit,
            setup_limit: limit * 10,
        })
    }

    /// The setup request of one case on `inputs` (the first set, or the other).
    fn setup(
        &self,
        other: bool,
        id: &str,
        function: &str,
        variant: &str,
        output: &Path,
    ) -> Request {
        Request::Setup {
            id: id.to_string(),
            function: function.to_string(),
            variant: variant.to_string(),
            workload: self.workload_json.clone(),
            inputs: if other {
                self.other_inputs.clone()
            } else {
                self.inputs.clone()
            },
            output: TensorFile {
                path: output.to_path_buf(),
                shape: self.output_shape.clone(),
                dtype: "float32".into(),
            },
            flush_bytes: 8 << 20,
            ready: true,
        }
    }

    /// One function through setup, a cold and a warm run, its output, and a setup again on
    /// other inputs; true when its case was set up (a later run may use it).
    fn function(&mut self, id: &str, f: &str, variant: &str, out: &mut Vec<Finding>) -> bool {
        let output = self.dir.path().join(format!("output-{id}.npy"));
        let step = format!("setup {f}");
        let request = self.setup(false, id, f, variant, &output);
        match self.worker.request(&request, self.setup_limit) {
            Ok(_) => note(out, Rule::Setup, &step, true, "ok".into()),
            Err(e) => {
                note(out, Rule::Setup, &step, false, e.to_string());
                return false;
            }
        };
        for (count, cold) in [(1u64, true), (3, false)] {
            let step = format!("run {f} {} ×{count}", if cold { "cold" } else { "warm" });
            let started = Instant::now();
            let run = Request::Run {
                id: id.to_string(),
                count,
                cold,
                counted: false,
            };
            let reply = self.worker.request(&run, self.limit * count as u32);
            let wall = started.elapsed().as_secs_f64();
            match reply {
                Err(e) => note(out, Rule::Run, &step, false, e.to_string()),
                Ok(r) => {
                    let (ok, detail) = judge_secs(&r.secs.unwrap_or_default(), count, wall);
                    note(out, Rule::Run, &step, ok, detail)
                }
            };
        }
        let step = format!("output {f}");
        let asked = Request::Output { id: id.to_string() };
        let first = match self.worker.request(&asked, self.limit) {
            Err(e) => {
                note(out, Rule::Output, &step, false, e.to_string());
                None
            }
            Ok(_) => {
                let (ok, detail) = judge_output(&output, &self.output_shape);
                note(out, Rule::Output, &step, ok, detail);
                ok.then(|| super::worker::read_npy(&output, &self.output_shape).ok())
                    .flatten()
            }
        };
        if let Some(first) = first {
            let step = format!("setup {f} again on other inputs, run, output");
            let again = self.setup(true, id, f, variant, &output);
            let (ok, detail) = match setup_again(
                &mut self.worker,
                &again,
                id,
                (self.limit, self.setup_limit),
                (&output, &self.output_shape),
                &first,
            ) {
                Ok(()) => (true, "the output follows the new inputs".into()),
                Err(why) => (false, why),
            };
            note(out, Rule::SetupAgain, &step, ok, detail);
        }
        true
    }

    /// Requests it must refuse, each answered with `ok: false` and a message; false when the
    /// channel broke (nothing more can be asked).
    fn refusals(&mut self, out: &mut Vec<Finding>) -> bool {
        let missing = "opledger-worker-test-no-such-function";
        let unknown_output = self.dir.path().join("output-unknown.npy");
        let attempts: Vec<(String, String)> = vec![
            (
                format!("setup of a function it does not serve ({missing})"),
                serde_json::to_string(&self.setup(false, "unknown", missing, "fused", &unknown_output))
                    .unwrap_or_default(),
            ),
            (
                "run of a case never set up".into(),
                r#"{"op": "run", "id": "opledger-worker-test-no-such-case", "count": 1, "cold": false}"#
                    .into(),
            ),
            (
                "an op of no protocol".into(),
                r#"{"op": "opledger-worker-test-unknown-op"}"#.into(),
            ),
            ("a line that is not JSON".into(), "{not json".into()),
        ];
        for (step, line) in attempts {
            let (ok, detail) = match self
                .worker
                .exchange(&line, "a request to refuse", self.limit)
            {
                Err(e) => {
                    note(out, Rule::Refuses, &step, false, e.to_string());
                    return false;
                }
                Ok(r) if r.ok => (
                    false,
                    "answered ok: true to a request it cannot serve".into(),
                ),
                Ok(r) if r.error.as_deref().is_none_or(|e| e.trim().is_empty()) => {
                    (false, "answered ok: false without an error message".into())
                }
                Ok(r) => (
                    true,
                    format!("refused: {}", first_line(r.error.as_deref().unwrap_or(""))),
                ),
            };
            note(out, Rule::Refuses, &step, ok, detail);
        }
        true
    }

    /// Shutdown answered, and the process gone within two seconds.
    fn shutdown(&mut self, out: &mut Vec<Finding>) {
        match self.worker.request(&Request::Shutdown, self.limit) {
            Err(e) => {
                note(out, Rule::Shutdown, "shutdown", false, e.to_string());
            }
            Ok(_) => {
                let exited = self.worker.exited_within(Duration::from_secs(2));
                note(
                    out,
                    Rule::Shutdown,
                    "shutdown",
                    exited.is_some(),
                    match exited {
                        Some(s) => format!("answered ok and exited ({s})"),
                        None => "answered ok but was still running 2 s later".into(),
                    },
                );
            }
        };
    }
}

/// The case set up again on other inputs, run once and its output read: it must differ from
/// `first`, the output on the first inputs.
fn setup_again(
    w: &mut Worker,
    setup: &Request,
    id: &str,
    (limit, setup_limit): (Duration, Duration),
    (output, shape): (&Path, &[u64]),
    first: &[f32],
) -> Result<(), String> {
    w.request(setup, setup_limit).map_err(|e| e.to_string())?;
    let run = Request::Run {
        id: id.to_string(),
        count: 1,
        cold: false,
        counted: false,
    };
    w.request(&run, limit).map_err(|e| e.to_string())?;
    w.request(&Request::Output { id: id.to_string() }, limit)
        .map_err(|e| e.to_string())?;
    let again = super::worker::read_npy(output, shape)?;
    if again == first {
        return Err("the output on the new inputs is the output on the first ones: the case kept its first inputs, or a result of them".into());
    }
    Ok(())
}

/// Records a step; returns whether it kept the rule.
fn note(out: &mut Vec<Finding>, rule: Rule, step: &str, ok: bool, detail: String) -> bool {
    out.push(Finding {
        rule,
        step: step.to_string(),
        ok,
        detail,
    });
    ok
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").chars().take(200).collect()
}

/// The times a `run` reported, against what is possible: one per run, each finite, above
/// [`FLOOR_SECS`], and all together no more than the request's own wall time.
pub fn judge_secs(secs: &[f64], count: u64, wall_secs: f64) -> (bool, String) {
    if secs.len() as u64 != count {
        return (false, format!("{} times for {count} runs", secs.len()));
    }
    if let Some(bad) = secs.iter().find(|s| !s.is_finite() || **s < FLOOR_SECS) {
        return (
            false,
            format!(
                "a run of {bad:e} s: below the {FLOOR_SECS:e} s floor no kernel of a workload runs in (a timer that does not time)"
            ),
        );
    }
    let total: f64 = secs.iter().sum();
    if total > wall_secs {
        return (
            false,
            format!(
                "its runs claim {total:.6} s in all, more than the {wall_secs:.6} s the whole request took"
            ),
        );
    }
    (
        true,
        format!(
            "{} (request {:.3} ms)",
            secs.iter()
                .map(|s| format!("{:.3} ms", s * 1e3))
                .collect::<Vec<_>>()
                .join(", "),
            wall_secs * 1e3
        ),
    )
}

/// The output file as the protocol asks for it.
fn judge_output(path: &Path, shape: &[u64]) -> (bool, String) {
    match super::worker::read_npy(path, shape) {
        Err(e) => (false, e),
        Ok(v) => {
            if let Some(bad) = v.iter().find(|x| !x.is_finite()) {
                return (false, format!("the output holds {bad}"));
            }
            if v.len() > 1 && v.iter().all(|x| *x == v[0]) {
                return (
                    false,
                    format!("every element is {}: a buffer never written", v[0]),
                );
            }
            (true, format!("{shape:?} float32"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reported_times_must_be_possible() {
        assert!(judge_secs(&[0.001], 1, 0.002).0);
        assert!(!judge_secs(&[0.001, 0.001], 3, 0.01).0, "one time per run");
        assert!(
            !judge_secs(&[0.003], 1, 0.002).0,
            "more than the request took"
        );
        assert!(
            !judge_secs(&[0.0], 1, 0.002).0,
            "a timer that does not time"
        );
        assert!(!judge_secs(&[f64::NAN], 1, 0.002).0);
    }
}
