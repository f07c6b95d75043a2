//! The roofline checks: what a variant achieved against the ceilings, its level roofline, the
//! prediction from the ledger, and the bound predicted and measured against the expected one.

use super::{Check, CheckName, Status};
use crate::device::Ceilings;
use crate::ledger::{roofline, Roofline, VariantLedger};
use crate::spec::Bound;
use serde::{Deserialize, Serialize};

/// Achieved rates of one variant against the measured ceilings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Achieved {
    pub bytes_per_sec: f64,
    pub flops_per_sec: f64,
    /// Fraction of the bandwidth ceiling (triad).
    pub frac_bandwidth: f64,
    /// Fraction of the compute ceiling (FMA peak).
    pub frac_compute: f64,
    /// The wall the variant is closest to: the larger fraction.
    pub measured_bound: Bound,
}

pub fn achieved(ledger: &VariantLedger, median_secs: f64, c: &Ceilings) -> Achieved {
    let bytes_per_sec = ledger.bytes_moved() as f64 / median_secs;
    let flops_per_sec = ledger.flops as f64 / median_secs;
    let frac_bandwidth = bytes_per_sec / c.bandwidth();
    let frac_compute = flops_per_sec / c.peak_flops();
    Achieved {
        bytes_per_sec,
        flops_per_sec,
        frac_bandwidth,
        frac_compute,
        measured_bound: wall_of(frac_bandwidth, frac_compute),
    }
}

/// The wall a variant is closest to: the ceiling of which it achieved the larger fraction.
pub(crate) fn wall_of(frac_bandwidth: f64, frac_compute: f64) -> Bound {
    if frac_compute > frac_bandwidth {
        Bound::Compute
    } else {
        Bound::Bandwidth
    }
}

/// A variant judged against what its kernels execute on the level they ran at
/// ([`crate::ledger::Executed`]): the time of those FLOPs at the FMA peak, the time the
/// kernels' arithmetic measured alone (operands in L1), the time of the ledger's bytes at the
/// bandwidth ceiling; the longest is the roof the kernel really has there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OnLevel {
    pub executed: crate::ledger::Executed,
    /// The executed FLOPs at the FMA peak.
    pub flops_secs: f64,
    /// The kernels' arithmetic alone on every thread with the operands in L1: where the
    /// instructions' latencies, not their count, set the pace (none where not measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arithmetic_secs: Option<f64>,
    /// The ledger's bytes at the bandwidth ceiling.
    pub memory_secs: f64,
    /// The roof on this level: the longest of the three.
    pub secs: f64,
    /// Compute when the FLOPs or the measured arithmetic take longer than the memory.
    pub bound: Bound,
    /// The roof's time over the measured median (1 = at the roof); none before measuring.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reached: Option<f64>,
}

/// The level roofline of a variant whose kernels execute `executed`, their arithmetic alone
/// measured at `arithmetic_secs`.
pub fn on_level(
    executed: crate::ledger::Executed,
    arithmetic_secs: Option<f64>,
    ledger: &VariantLedger,
    c: &Ceilings,
) -> OnLevel {
    let flops_secs = executed.flops as f64 / c.peak_flops();
    let memory_secs = ledger.bytes_moved() as f64 / c.bandwidth();
    let compute_secs = flops_secs.max(arithmetic_secs.unwrap_or(0.0));
    OnLevel {
        executed,
        flops_secs,
        arithmetic_secs,
        memory_secs,
        secs: compute_secs.max(memory_secs),
        bound: Bound::of_times(compute_secs, memory_secs),
        reached: None,
    }
}

impl OnLevel {
    /// With the measured median: the fraction of the roof reached.
    pub fn measured(mut self, median_secs: f64) -> OnLevel {
        self.reached = (median_secs > 0.0).then(|| self.secs / median_secs);
        self
    }
}

/// Prediction of a variant on the measured ceilings.
pub fn predict(ledger: &VariantLedger, c: &Ceilings) -> Roofline {
    roofline(
        c.peak_flops(),
        c.bandwidth(),
        ledger.flops as f64,
        ledger.bytes_moved() as f64,
    )
}

/// How far apart the two sides of the roofline must be for the bound check to read a wall from
/// them: the arithmetic intensity against the ridge, and the achieved fractions of the two
/// ceilings against each other. Within this factor a kernel sits near the ridge, where the
/// probe's own spread decides which wall it reads — one reading of the FMA peak at half (a
/// host running a VM's cores at half rate for a while, docs/measurement.md) halves the ridge —
/// and either wall may bound it on this machine.
pub const NEAR_RIDGE_FACTOR: f64 = 1.5;

/// Whether `a` and `b` (positive) lie within [`NEAR_RIDGE_FACTOR`] of each other.
fn near(a: f64, b: f64) -> bool {
    a > 0.0 && b > 0.0 && a.max(b) < NEAR_RIDGE_FACTOR * a.min(b)
}

/// The bound check: predicted (AI vs ridge) and measured (larger fraction of a ceiling) must both
/// be the expected bound. Where either differs from it only near the ridge ([`near`]) and
/// neither differs beyond, the check warns instead of failing: the claim may hold on a machine
/// whose walls are that close, and this run cannot tell.
pub fn bound_check(expected: Bound, predicted: &Roofline, measured: &Achieved) -> Check {
    let predicted_near = near(predicted.intensity, predicted.ridge);
    let measured_near = near(measured.frac_bandwidth, measured.frac_compute);
    let predicted_ok = predicted.bound == expected;
    let measured_ok = measured.measured_bound == expected;
    let status = if predicted_ok && measured_ok {
        Status::Pass
    } else if (predicted_ok || predicted_near) && (measured_ok || measured_near) {
        Status::Warn
    } else {
        Status::Fail
    };
    let mut detail = format!(
        "expected {}; predicted {} (AI {:.3} FLOP/B vs ridge {:.2} FLOP/B); measured {} ({:.0}% of bandwidth ceiling, {:.1}% of compute ceiling)",
        expected.name(),
        predicted.bound.name(),
        predicted.intensity,
        predicted.ridge,
        measured.measured_bound.name(),
        measured.frac_bandwidth * 100.0,
        measured.frac_compute * 100.0
    );
    if status == Status::Warn {
        detail.push_str(&format!(
            "; near the ridge (within ×{NEAR_RIDGE_FACTOR}): either wall may bound it on this machine"
        ));
    }
    Check::new(CheckName::Bound, status, detail)
}
