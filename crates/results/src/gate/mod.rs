//! The gate's vocabulary, below the results that hold it: the statistics of a comparison
//! (`stats`), its findings (`outcome`) and the one rule of how a spec's gates combine (`rule`).
//! The gate itself, which reads baselines and the store, is the `opledger-gate` crate.

pub mod outcome;
pub mod rule;
pub mod stats;
