//! The CUDA backend of a build without the `cuda` feature: the entry points the other crates
//! use, each saying that this build has no CUDA (a spec asking for it is refused with that
//! reason, `auto` picks the CPU, the environment manifest records it).

use crate::error::{Error, Result};
use crate::kinds::Workload;

/// Why nothing CUDA runs in this build.
pub const NOT_BUILT: &str = "this opledger was built without CUDA (cargo feature `cuda`)";

pub fn cannot_run(_w: &Workload) -> Option<String> {
    Some(NOT_BUILT.into())
}

/// The CUDA driver for the environment manifest: none in this build.
pub fn driver_summary() -> String {
    format!("none: {NOT_BUILT}")
}

/// The kernels' compiler: none in this build.
pub mod nvrtc {
    use super::{Error, Result, NOT_BUILT};

    pub fn available() -> bool {
        false
    }

    pub fn version() -> Option<String> {
        None
    }

    pub fn compile_all(_arch: u32, _out: Option<&std::path::Path>) -> Result<bool> {
        Err(Error::BackendUnavailable(NOT_BUILT.into()))
    }
}

/// Opening the CUDA backend: refused in this build.
pub fn open_backend() -> Result<std::convert::Infallible> {
    Err(Error::BackendUnavailable(NOT_BUILT.into()))
}
