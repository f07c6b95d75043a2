//! The `OPLEDGER_*` environment variables that change what opledger measures, read once when a
//! command starts: a bad value of any of them is bad input (exit 2) before anything runs, and
//! what they say travels from there in the run's options. (`OPLEDGER_THREADS` and
//! `GITHUB_STEP_SUMMARY` are flags' defaults, read by the command-line parser; `OPLEDGER_SHARD`
//! and `OPLEDGER_SHARD_TOTAL` are what `--shard auto` reads; the worker protocol's variables are
//! set by opledger for its workers, never read.)

use crate::error::{Error, Result};

/// The variable that caps the SIMD level of the CPU kernels.
pub const SIMD_VAR: &str = "OPLEDGER_SIMD";
/// The variable of the gate experiment's deliberate slowdown.
pub const SLOWDOWN_VAR: &str = "OPLEDGER_EXPERIMENT_SLOWDOWN";
/// The largest experiment slowdown: outputs computed again after the first.
pub const MAX_SLOWDOWN: f64 = 8.0;
/// The variable that bounds the wait on one counted process (seconds).
pub const COUNTS_TIMEOUT_VAR: &str = "OPLEDGER_COUNTS_TIMEOUT_SECS";
/// How long one counted process may run when the variable is not set: an hour (the largest
/// counted sides of the shipped specs take seconds; a real kernel at a size made for timing,
/// a few minutes under the simulator).
pub const COUNTS_TIMEOUT_SECS: f64 = 3600.0;
/// The variable naming the history store (as `--store` does).
pub const STORE_VAR: &str = "OPLEDGER_STORE";

/// How far `OPLEDGER_SIMD` lets the CPU kernels go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SimdCap {
    /// Portable loops only.
    Scalar,
    /// AVX2 without FMA instructions (what counted sides run at).
    Avx2NoFma,
    /// AVX2+FMA at most.
    Avx2,
    /// Whatever the CPU has (unset, empty, `native` or `avx512`).
    #[default]
    Native,
}

/// What the environment asks of a run.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Settings {
    /// The history store's URL (`OPLEDGER_STORE`), when set and not empty.
    pub store: Option<String>,
    pub simd: SimdCap,
    /// How much of its output the fused elementwise variant computes again, in outputs (0:
    /// none; 0.25: its first quarter once more; 3: the whole output three more times): a real
    /// slowdown of the code under test, for checking that the gate catches one.
    pub experiment_slowdown: f64,
    /// How long one counted process may run (`OPLEDGER_COUNTS_TIMEOUT_SECS`; `None`:
    /// [`COUNTS_TIMEOUT_SECS`]).
    pub counts_timeout_secs: Option<f64>,
}

impl Settings {
    /// Reads every variable; the first bad one is an error naming it and what it expects.
    pub fn from_env() -> Result<Settings> {
        Ok(Settings {
            store: var(STORE_VAR)?,
            simd: simd_cap(var(SIMD_VAR)?)?,
            experiment_slowdown: slowdown(var(SLOWDOWN_VAR)?)?,
            counts_timeout_secs: counts_timeout(var(COUNTS_TIMEOUT_VAR)?)?,
        })
    }

    /// How long one counted process may run.
    pub fn counts_limit(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.counts_timeout_secs.unwrap_or(COUNTS_TIMEOUT_SECS))
    }
}

fn counts_timeout(v: Option<String>) -> Result<Option<f64>> {
    let Some(v) = v else {
        return Ok(None);
    };
    match v.trim().parse::<f64>() {
        Ok(f) if f > 0.0 && f <= 7.0 * 86_400.0 => Ok(Some(f)),
        _ => Err(Error::Env {
            var: COUNTS_TIMEOUT_VAR,
            value: v,
            expected: "seconds in (0, 604800]",
        }),
    }
}

/// A variable's value (`None` when unset or empty, as a shell's `VAR=` means "not set"); one
/// that is not UTF-8 is refused.
fn var(name: &'static str) -> Result<Option<String>> {
    match std::env::var(name) {
        Ok(v) if v.trim().is_empty() => Ok(None),
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => Err(Error::Env {
            var: name,
            value: v.to_string_lossy().into_owned(),
            expected: "valid UTF-8",
        }),
    }
}

fn simd_cap(v: Option<String>) -> Result<SimdCap> {
    let Some(v) = v else {
        return Ok(SimdCap::Native);
    };
    match v.trim() {
        "scalar" => Ok(SimdCap::Scalar),
        "avx2" => Ok(SimdCap::Avx2),
        "avx2-nofma" => Ok(SimdCap::Avx2NoFma),
        "avx512" | "native" => Ok(SimdCap::Native),
        _ => Err(Error::Env {
            var: SIMD_VAR,
            value: v,
            expected: "scalar, avx2, avx2-nofma, avx512 or native",
        }),
    }
}

fn slowdown(v: Option<String>) -> Result<f64> {
    let Some(v) = v else {
        return Ok(0.0);
    };
    match v.trim().parse::<f64>() {
        Ok(f) if (0.0..=MAX_SLOWDOWN).contains(&f) => Ok(f),
        _ => Err(Error::Env {
            var: SLOWDOWN_VAR,
            value: v,
            expected: "a number of outputs computed again, between 0 and 8",
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_read_or_refused_with_what_is_expected() {
        assert_eq!(simd_cap(None).unwrap(), SimdCap::Native);
        assert_eq!(simd_cap(Some(" avx2 ".into())).unwrap(), SimdCap::Avx2);
        assert_eq!(simd_cap(Some("scalar".into())).unwrap(), SimdCap::Scalar);
        let e = simd_cap(Some("avx-2".into())).unwrap_err().to_string();
        assert!(
            e.contains("OPLEDGER_SIMD") && e.contains("avx-2") && e.contains("scalar, avx2"),
            "{e}"
        );
        assert_eq!(slowdown(None).unwrap(), 0.0);
        // Empty is unset, for every variable.
        for name in [SIMD_VAR, SLOWDOWN_VAR, STORE_VAR] {
            std::env::set_var(name, " ");
            assert_eq!(var(name).unwrap(), None, "{name}");
            std::env::remove_var(name);
        }
        assert_eq!(slowdown(Some("0.25".into())).unwrap(), 0.25);
        assert_eq!(slowdown(Some("3".into())).unwrap(), 3.0);
        for bad in ["8.5", "-0.1", "x", "NaN", "inf"] {
            let e = slowdown(Some(bad.into())).unwrap_err();
            assert_eq!(e.exit_code(), crate::error::ExitCode::BadInput, "{bad}");
        }
    }
}
