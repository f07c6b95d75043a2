//! The model of opledger: a spec read and checked (`spec`), each workload kind with its inputs,
//! references and analytic ledger (`kinds`, `ledger`), the device and its ceilings (`device`),
//! and what every layer above shares: errors, checked values, the seeded generator, the
//! expression language, secrets, stopping, untrusted text, settings, bounded file access and
//! sharding. Pure data and rules: nothing here runs a kernel.

pub mod cache;
pub mod device;
pub mod error;
pub mod expr;
pub mod files;
pub mod kinds;
pub mod ledger;
pub mod rng;
pub mod secret;
pub mod settings;
pub mod shard;
pub mod spec;
pub mod stop;
pub mod untrusted;
pub mod values;
