//! The integration tests, one module a concern (`tests/<concern>.rs`, listed in
//! docs/contributing.md), in one test binary: they share one build and one link of the library
//! (`cargo test --release --test integration <concern>::` runs one concern).

mod common;

mod archives;
mod branch_history;
mod browser;
mod counters;
mod counts;
mod cudasim;
mod exports;
mod gate;
mod github_action;
mod history;
mod hostile;
mod layers;
mod ledger;
mod merge;
mod nvrtc;
mod output;
mod parts;
mod published;
mod report;
mod runs;
mod schema;
mod site;
mod spec_errors;
mod workers;
