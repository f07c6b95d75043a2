//! opledger: the operator ledger of GPU optimizations.
//!
//! The pipeline, one module per stage: `spec` (YAML → validated types) → `ledger` (FLOPs and
//! bytes) → `device` (ceilings) → `backend` (kernels) → `measure` (timing, statistics) →
//! `verdict` (checks) → `archive` (a run's folder, sealed and verified) and `baseline` (the store, compare) → `report` (render). `pipeline` runs the
//! stages, `cli` parses the command line.

pub mod accept;
pub mod archive;
pub mod backend;
pub mod baseline;
pub mod calibrate;
pub mod cli;
pub mod compare;
pub mod counters;
pub mod device;
pub mod error;
pub mod evidence;
pub mod expr;
pub mod files;
pub mod gate;
pub mod history;
pub mod kinds;
pub mod ledger;
pub mod measure;
pub mod merge;
pub mod pipeline;
pub mod provenance;
pub mod render;
pub mod report;
pub mod results;
pub mod rng;
pub mod secret;
pub mod settings;
pub mod shard;
pub mod site;
pub mod spec;
pub mod store;
pub mod values;
pub mod verdict;
pub mod worker_test;
