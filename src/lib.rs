//! opledger: the operator ledger of GPU optimizations.
//!
//! The pipeline, bottom to top (`tests/layers.rs` holds the order, `docs/contributing.md` says
//! what each layer holds): `spec` (YAML → validated types) and `kinds` (each workload's ledger)
//! → `device` (the machine and its ceilings) → `backend` (kernels) → `measure` (timing,
//! counts, statistics) → `verdict` (checks) and `gate` (the regression gate: statistics,
//! findings, reference and decision) → `results` (what `results.json` holds) → `baseline` and
//! `store` → `report` (every word and picture) → `archive` (a run's folder, sealed and verified)
//! → `pipeline` (`run`) → `commands` (one file a command) → `cli` (parsing).

pub mod archive;
pub mod backend;
pub mod baseline;
pub mod cli;
pub mod commands;
pub mod device;
pub mod error;
pub mod evidence;
pub mod expr;
pub mod files;
pub mod gate;
pub mod kinds;
pub mod ledger;
pub mod measure;
pub mod pipeline;
pub mod provenance;
pub mod report;
pub mod results;
pub mod rng;
pub mod secret;
pub mod settings;
pub mod shard;
pub mod spec;
pub mod stop;
pub mod store;
pub mod untrusted;
pub mod values;
pub mod verdict;
