//! `kind: probe`: the machine's ceilings as cases of a spec: STREAM copy and triad and an FMA
//! kernel that runs [`PROBE_FMA_ITERS`] dependent FMAs on every element. Each variant computes
//! its own function, so each is checked against its own reference.

use super::tensors::{uniform, Tensors};
use super::{DType, FromRaw, Invalid, Kind, RawWorkload, Variant};
use crate::ledger::{mv, Tiling, VariantLedger};
use serde::{Deserialize, Serialize};

/// The machine's ceilings as a spec: copy, triad and FMA probes over arrays of `elements`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProbeWorkload {
    pub elements: u64,
    pub dtype: DType,
}

/// Dependent FMAs per element of the `fma` probe.
pub const PROBE_FMA_ITERS: u64 = 256;
/// The triad's scalar: a = b + s·c.
pub const TRIAD_S: f32 = 3.0;
/// The FMA probe's coefficients: v ← v·a + b, bounded over the iterations.
pub const FMA_A: f32 = 0.999;
pub const FMA_B: f32 = 0.001;

impl FromRaw for ProbeWorkload {
    const KEYS: (&'static [&'static str], &'static [&'static str]) = (&["elements"], &["dtype"]);
    fn from_raw(raw: &RawWorkload) -> Result<Self, Invalid> {
        raw.elements(&["elements"], "elements")?;
        Ok(ProbeWorkload {
            elements: raw.dim("elements"),
            dtype: raw.dtype(),
        })
    }
}

impl Kind for ProbeWorkload {
    fn variants(&self) -> Vec<Variant> {
        vec![Variant::Copy, Variant::Triad, Variant::Fma]
    }
    fn dtype(&self) -> DType {
        self.dtype
    }
    fn describe(&self) -> String {
        format!("probe {} elements {}", self.elements, self.dtype.name())
    }
    fn reduction_len(&self) -> u64 {
        // The FMA probe chains PROBE_FMA_ITERS dependent FMAs per element.
        PROBE_FMA_ITERS
    }
    fn ledger(&self, variant: Variant, _: &Tiling) -> VariantLedger {
        probe_ledger(self, variant)
    }
    fn output_len(&self) -> u64 {
        self.elements
    }
    fn input_bytes(&self) -> u64 {
        2 * self.elements * 4
    }
    fn inputs(&self, seed: u64) -> Tensors {
        let n = self.elements as usize;
        let mut t = Tensors::new();
        t.put("b", uniform(n, seed, 0, -1.0, 1.0));
        t.put("c", uniform(n, seed, 1, -1.0, 1.0));
        t
    }
    /// The f64 value variant `v` must produce at element `i`: the copy copies b.
    fn reference(&self, t: &Tensors, v: Variant, i: usize) -> f64 {
        let (b, c) = (t.get("b")[i] as f64, t.get("c")[i] as f64);
        match v {
            Variant::Copy => b,
            Variant::Triad => b + TRIAD_S as f64 * c,
            _ => (0..PROBE_FMA_ITERS).fold(b, |v, _| v * FMA_A as f64 + FMA_B as f64),
        }
    }
    fn variants_agree(&self) -> bool {
        false
    }
}

/// The probes as ledgers: copy (read x, write y), triad (read b and c, write a; 2 FLOPs per
/// element), fma (read x, write y, 2·PROBE_FMA_ITERS FLOPs per element: compute-bound).
fn probe_ledger(p: &ProbeWorkload, variant: Variant) -> VariantLedger {
    let t = p.elements * 4;
    match variant {
        Variant::Copy => {
            VariantLedger::new(variant, vec![mv("x", t, 1, 0), mv("y", t, 0, 1)], 0, 1)
        }
        Variant::Triad => VariantLedger::new(
            variant,
            vec![mv("b", t, 1, 0), mv("c", t, 1, 0), mv("a", t, 0, 1)],
            2 * p.elements,
            1,
        ),
        _ => VariantLedger::new(
            variant,
            vec![mv("x", t, 1, 0), mv("y", t, 0, 1)],
            2 * PROBE_FMA_ITERS * p.elements,
            1,
        ),
    }
}
