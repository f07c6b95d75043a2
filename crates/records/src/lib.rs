//! What a run leaves behind and what it is compared with: the baselines (`baseline`), the
//! history store (`store`), where a run came from (`provenance`) and the evidence of one spec
//! (`evidence`).

pub mod baseline;
pub mod evidence;
pub mod provenance;
pub mod store;

// The lower crates' modules, reached as `crate::…` in this crate's files.
use opledger_backend as backend;
use opledger_measure as measure;
use opledger_model::device;
use opledger_model::error;
use opledger_model::files;
use opledger_model::kinds;
use opledger_model::ledger;
use opledger_model::rng;
use opledger_model::secret;
use opledger_model::spec;
use opledger_results as results;
use opledger_results::gate;
use opledger_results::verdict;
