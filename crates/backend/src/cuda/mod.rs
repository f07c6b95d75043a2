//! The CUDA backend (cudarc, libraries loaded at run time): driver detection that never panics
//! (here), NVRTC compilation of the embedded kernels ([`nvrtc`]) and the runtime backend that
//! launches and times them ([`runtime`]), and each kind's launches in a file of its own
//! (`gemm.rs` for `kind: gemm`).
//!
//! cudarc with `dynamic-loading` panics if a symbol is used while its library is missing, so
//! presence is checked first with `is_culib_present`.

mod add_rmsnorm;
mod attention;
mod custom;
mod elementwise;
mod gemm;
pub mod gpu;
mod launch_chain;
pub mod nvrtc;
mod probe;
mod rows;
pub mod runtime;
mod user;

pub use runtime::cannot_run;

use crate::error::{Error, Result};

/// What was found on this machine.
#[derive(Debug, Clone)]
pub struct Driver {
    pub device_count: i32,
}

impl Driver {
    /// Opens the driver; `BackendUnavailable` when there is no driver library or no device.
    pub fn open() -> Result<Self> {
        // SAFETY: is_culib_present only tries to dlopen the driver library and reports success.
        let present = unsafe { cudarc::driver::sys::is_culib_present() };
        if !present {
            return Err(Error::BackendUnavailable(
                "no CUDA driver found (libcuda.so.1 could not be loaded); this machine has no NVIDIA GPU driver".into(),
            ));
        }
        cudarc::driver::result::init().map_err(|e| {
            Error::BackendUnavailable(format!("the CUDA driver failed to initialise: {e:?}"))
        })?;
        let device_count = cudarc::driver::result::device::get_count()
            .map_err(|e| Error::BackendUnavailable(format!("cannot count CUDA devices: {e:?}")))?;
        if device_count < 1 {
            return Err(Error::BackendUnavailable(
                "the CUDA driver reports no device".into(),
            ));
        }
        Ok(Driver { device_count })
    }
}

/// The driver's CUDA version (`13.0`), once a [`Driver`] has been opened.
pub fn driver_version() -> Option<String> {
    let mut version: std::ffi::c_int = 0;
    // SAFETY: only called after `Driver::open` loaded and initialised the driver library; the
    // call writes one int through a valid pointer.
    let rc = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut version) };
    (rc == cudarc::driver::sys::CUresult::CUDA_SUCCESS)
        .then(|| format!("{}.{}", version / 1000, (version % 1000) / 10))
}

/// The CUDA driver for the environment manifest: its version and devices, or why there is none.
pub fn driver_summary() -> String {
    let b = match Driver::open() {
        Ok(b) => b,
        Err(Error::BackendUnavailable(why)) => return format!("none: {why}"),
        Err(e) => return format!("none: {e}"),
    };
    let version = driver_version().unwrap_or_else(|| "unknown".into());
    let names: Vec<String> = (0..b.device_count)
        .map(|i| {
            cudarc::driver::result::device::get(i)
                .and_then(cudarc::driver::result::device::get_name)
                .unwrap_or_else(|e| format!("device {i}: {e:?}"))
        })
        .collect();
    format!("CUDA driver {version}; devices: {}", names.join(", "))
}
