//! opledger: the operator ledger of GPU optimizations.
//!
//! A workspace of crates by concern, each depending only on those below it (the compiler keeps
//! the order; `docs/contributing.md` says why each crate exists): `opledger-model` (spec, kinds,
//! ledger, device) → `opledger-cpu` (the CPU kernels) → `opledger-backend` (the `Backend` trait,
//! CPU, CUDA and workers) → `opledger-measure` (timing, counts, statistics) →
//! `opledger-results` (verdicts, the gate's vocabulary, what `results.json` holds) →
//! `opledger-records` (baselines, the history store, provenance, evidence) → `opledger-gate`
//! (the regression gate) → `opledger-report` (every word and picture) → this crate: a run's
//! archive (`archive`), the `run` pipeline (`pipeline`), one file a command (`commands`) and the
//! command line (`cli`).
//!
//! Every lower crate's modules are re-exported here under the names they have always had
//! (`opledger::spec`, `opledger::gate`, …), so a path into the library reads the same whichever
//! crate holds it.

pub use opledger_backend as backend;
pub use opledger_gate as gate;
pub use opledger_measure as measure;
pub use opledger_model::{
    device, error, expr, files, kinds, ledger, rng, secret, settings, shard, spec, stop, untrusted,
    values,
};
pub use opledger_records::{baseline, evidence, provenance, store};
pub use opledger_report as report;
pub use opledger_results as results;
pub use opledger_results::verdict;

pub mod archive;
pub mod cli;
pub mod commands;
pub mod pipeline;
