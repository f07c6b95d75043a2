//! The integration tests, one module a concern (`tests/<concern>.rs`, listed in
//! docs/contributing.md), in one test binary: they share one build and one link of the library
//! (`cargo test --release --test integration <concern>::` runs one concern). The tests of the
//! user's code as a side (`tests/workers.rs`) are a binary of their own: their verdicts time
//! worker processes, so they share the machine only with each other.

mod common;

mod archives;
mod branch_history;
mod browser;
mod counters;
mod counts;
#[cfg(feature = "cuda")]
mod cudasim;
mod documented;
mod exports;
mod gate;
mod github_action;
mod history;
mod hostile;
mod layers;
mod ledger;
mod merge;
#[cfg(feature = "cuda")]
mod nvrtc;
mod output;
mod parts;
mod published;
mod report;
mod runs;
mod schema;
mod site;
mod spec_errors;
