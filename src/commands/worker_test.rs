//! `opledger worker-test SPEC [-- CMD…]`: the conformance check of the spec's workers (or of
//! `CMD`, standing in for the command of every worker side), without a run: each step of the
//! protocol against its rule (`backend::conformance`), listed with what it found; exit 0 when
//! every step kept the protocol, 1 when one broke it, 2 when the spec has no worker.

use crate::error::{Error, ExitCode, Result};
use crate::spec::{Implementation, WorkerCommand};
use std::path::Path;

pub fn worker_test(spec: &Path, command: &[String], timeout_secs: Option<f64>) -> Result<ExitCode> {
    let specs = crate::spec::load_all(&[spec.to_path_buf()])?;
    let Some(s) = specs.first() else {
        return Err(Error::Flag(format!(
            "worker-test: {}: no spec",
            spec.display()
        )));
    };
    // Each distinct command with the functions (and the variants they implement) it serves.
    let mut workers: Vec<(WorkerCommand, Vec<(String, String)>)> = Vec::new();
    for (implementation, variant) in [
        (&s.implementations.before, s.variants.before),
        (&s.implementations.after, s.variants.after),
    ] {
        let Some(Implementation::Worker(cmd)) = implementation else {
            continue;
        };
        let mut cmd = cmd.clone();
        if !command.is_empty() {
            cmd.command = command.to_vec();
        }
        if let Some(t) = timeout_secs {
            cmd.timeout_secs = t;
        }
        let function = (cmd.function.clone(), variant.name().to_string());
        match workers.iter_mut().find(|(c, _)| c.command == cmd.command) {
            // A function is tested once, whichever variants it implements.
            Some((_, fs)) if !fs.iter().any(|(f, _)| *f == function.0) => fs.push(function),
            Some(_) => {}
            None => workers.push((cmd, vec![function])),
        }
    }
    if workers.is_empty() {
        return Err(Error::Flag(format!(
            "worker-test: {}: no side of spec `{}` is a worker (`command:`): nothing to test",
            spec.display(),
            s.name
        )));
    }
    let mut failed = false;
    for (cmd, functions) in &workers {
        let found = crate::backend::conformance::check(cmd, s.dir(), &s.workload, functions);
        failed |= found.iter().any(|f| !f.ok);
        print!(
            "{}",
            crate::report::conformance::table(&cmd.command.join(" "), &found)
        );
    }
    Ok(if failed {
        ExitCode::GateFailed
    } else {
        ExitCode::Pass
    })
}
