//! `opledger ledger`: each spec's IO ledger and its roofline, with the tiling of a backend's
//! kernels.

use crate::device::DeviceKind;
use crate::error::{Error, ExitCode, Result};
use crate::report;
use crate::spec;
use std::path::PathBuf;

/// `opledger ledger`: each spec's IO ledger and roofline, with the tiling of a backend's kernels.
pub fn ledger(paths: &[PathBuf], tiling: DeviceKind, l2_mib: Option<u64>) -> Result<ExitCode> {
    let mut t = tiling.tiling();
    if let Some(mib) = l2_mib {
        if !tiling.models_l2() {
            return Err(Error::Flag(
                "--l2-mib models a GPU's L2: use it with --tiling cuda".into(),
            ));
        }
        t.reuse_cache_bytes = mib.saturating_mul(1 << 20);
    }
    for s in spec::load_all(paths)? {
        print!("{}", report::text::ledger(&s, t));
    }
    Ok(ExitCode::Pass)
}
