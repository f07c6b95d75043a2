//! The commands, one file each: what a command does once the command line is parsed (`cli`)
//! into its options. `run` itself is the pipeline (`pipeline::run`); its file here adds what
//! wraps it (profiling under Nsight Compute, the exit status).

pub mod accept;
pub mod calibrate;
pub mod check;
pub mod compare;
pub mod counters;
pub mod counts;
pub mod history;
pub mod ledger;
pub mod merge;
pub mod render;
pub mod rerecord;
pub mod roofline;
pub mod run;
pub mod schema;
pub mod site;
pub mod verify;
pub mod worker_test;
