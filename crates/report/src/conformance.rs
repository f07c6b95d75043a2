//! The words of `opledger worker-test`: each step of the conformance check with the protocol's
//! rule it tested, and the verdict.

use crate::backend::conformance::{Finding, Rule};

/// The rule, as docs/workers.md states it.
pub fn rule_text(r: Rule) -> &'static str {
    match r {
        Rule::Hello => "hello: ok, protocol 1, the worker's name, its device and its functions",
        Rule::Serves => "every function the spec names is registered",
        Rule::Setup => "setup answers ok within ten times timeout_secs",
        Rule::Run => "run: one time per run, each finite, at least 10 ns, all within the request's own time",
        Rule::Output => "output: a float32 .npy of the output's shape, C order, finite, not one value everywhere",
        Rule::SetupAgain => "setup of a case already set up, on other inputs, replaces it: the next output is computed on them",
        Rule::Refuses => "a request it cannot serve is answered ok: false with an error, and it serves on",
        Rule::Shutdown => "shutdown answers ok and the process exits",
        Rule::Counted => "a counted run under Valgrind marks its call, and a second one on the same inputs does the work again (a third of the instructions at least)",
    }
}

/// One line per step, then the verdict: `worker-test: PASS (N steps)` or the broken rules.
pub fn table(command: &str, findings: &[Finding]) -> String {
    let mut out = format!("worker {command}\n");
    for f in findings {
        out.push_str(&format!(
            "  {} {:<44} {}\n",
            if f.ok { "ok  " } else { "FAIL" },
            f.step,
            f.detail.lines().next().unwrap_or("")
        ));
        if !f.ok {
            out.push_str(&format!("       rule: {}\n", rule_text(f.rule)));
            for l in f.detail.lines().skip(1).take(20) {
                out.push_str(&format!("       | {l}\n"));
            }
        }
    }
    let failed = findings.iter().filter(|f| !f.ok).count();
    if failed == 0 {
        out.push_str(&format!(
            "PASS: {} steps kept the protocol\n",
            findings.len()
        ));
    } else {
        out.push_str(&format!(
            "FAIL: {failed} of {} steps broke the protocol\n",
            findings.len()
        ));
    }
    out
}
