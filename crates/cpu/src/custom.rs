//! `kind: custom` has no CPU kernels: both sides of such a spec are the user's implementations.

use super::{CaseConfig, CpuKernels, Kernels};
use crate::error::{BackendError, Result};
use crate::kinds::custom::Custom;
use crate::kinds::Tensors;
use std::sync::Arc;

const REASON: &str = "kind custom has no built-in kernels: both sides are implementations";

impl CpuKernels for Custom {
    fn cannot_run(&self) -> Option<String> {
        Some(REASON.into())
    }
    fn kernels(&self, _: Arc<Tensors>, _: &CaseConfig) -> Result<Box<dyn Kernels>> {
        Err(BackendError::Unsupported {
            backend: "cpu",
            reason: REASON.into(),
        }
        .into())
    }
}
