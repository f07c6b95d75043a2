//! The CUDA backend (cudarc, libraries loaded at run time). This build detects the driver and a
//! device without ever panicking; the kernels themselves are the CUDA issue's work.
//!
//! cudarc with `dynamic-loading` panics if a symbol is used while its library is missing, so
//! presence is checked first with `is_culib_present`.

use crate::error::{Error, Result};

/// What was found on this machine.
#[derive(Debug, Clone)]
pub struct CudaBackend {
    pub device_count: i32,
}

impl CudaBackend {
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
        Ok(CudaBackend { device_count })
    }
}
