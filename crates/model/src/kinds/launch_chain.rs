//! `kind: launch_chain`: a decode-like chain of `n_ops` small elementwise kernels (each
//! `v·a + b`), launched one by one (eager) against replayed as one recorded graph. Both variants
//! move the same bytes; they differ in launches, so the per-launch overhead is measured.

use super::tensors::{uniform, Tensors};
use super::{DType, FromRaw, Invalid, Kind, RawWorkload, Variant};
use crate::ledger::{mv, Tiling, VariantLedger};
use serde::{Deserialize, Serialize};

/// A decode-like chain of `n_ops` small elementwise kernels on a tensor of `elements` values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LaunchChain {
    pub n_ops: u64,
    pub elements: u64,
    pub dtype: DType,
}

/// FLOPs per element of one op: v·a + b.
pub const LAUNCH_OP_FLOPS: u64 = 2;

/// Coefficients of op `i`: values stay bounded over thousands of ops.
pub fn coeffs(i: u64) -> (f32, f32) {
    (0.999 - 0.001 * (i % 3) as f32, 0.001 * (i % 7) as f32)
}

/// The buffers op `i` of an `ops`-long chain reads and writes: it reads x (first op) or the
/// buffer the previous op wrote, and writes the other of t0/t1, or `out` (last op). Every
/// variant and backend rotates its buffers this way, so they compute the same chain.
pub fn chain_buffers<'a, T: ?Sized>(
    i: u64,
    ops: u64,
    x: &'a T,
    t0: &'a mut T,
    t1: &'a mut T,
    out: &'a mut T,
) -> (&'a T, &'a mut T) {
    match (i, i == ops - 1, i % 2) {
        (0, true, _) => (x, out),
        (0, false, _) => (x, t0),
        (_, true, 1) => (t0, out),
        (_, true, _) => (t1, out),
        (_, false, 1) => (t0, t1),
        (_, false, _) => (t1, t0),
    }
}

impl FromRaw for LaunchChain {
    const KEYS: (&'static [&'static str], &'static [&'static str]) =
        (&["n_ops", "elements"], &["dtype"]);
    fn from_raw(raw: &RawWorkload) -> Result<Self, Invalid> {
        let l = LaunchChain {
            n_ops: raw.dim("n_ops"),
            elements: raw.dim("elements"),
            dtype: raw.dtype(),
        };
        if l.n_ops < 2 || l.n_ops > 100_000 {
            return Err(Invalid::at(
                "n_ops",
                format!("workload.n_ops {}: expected 2 to 100000 (the overhead is (T_eager - T_graph)/(n_ops - 1))", l.n_ops),
            ));
        }
        raw.elements(&["elements"], "elements")?;
        Ok(l)
    }
}

impl Kind for LaunchChain {
    fn variants(&self) -> Vec<Variant> {
        vec![Variant::Eager, Variant::Graph]
    }
    fn dtype(&self) -> DType {
        self.dtype
    }
    fn describe(&self) -> String {
        format!(
            "launch_chain {} ops on {} elements {}",
            self.n_ops,
            self.elements,
            self.dtype.name()
        )
    }
    fn reduction_len(&self) -> u64 {
        self.n_ops
    }
    fn ledger(&self, variant: Variant, _: &Tiling) -> VariantLedger {
        chain_ledger(self, variant)
    }
    fn output_len(&self) -> u64 {
        self.elements
    }
    fn input_bytes(&self) -> u64 {
        self.elements * 4
    }
    fn inputs(&self, seed: u64) -> Tensors {
        let mut t = Tensors::new();
        t.put("x", uniform(self.elements as usize, seed, 0, -2.0, 2.0));
        t
    }
    fn reference(&self, t: &Tensors, _: Variant, idx: usize) -> f64 {
        (0..self.n_ops).fold(t.get("x")[idx] as f64, |v, i| {
            let (a, b) = coeffs(i);
            v * a as f64 + b as f64
        })
    }
    fn launch_chain_ops(&self) -> Option<u64> {
        Some(self.n_ops)
    }
}

/// A chain of n small kernels: both variants run the same kernels and move the same bytes; they
/// differ in launches (dispatches): n eager, 1 replayed graph.
fn chain_ledger(l: &LaunchChain, variant: Variant) -> VariantLedger {
    let t = l.elements * 4;
    let movements = vec![
        mv("x", t, 1, 0),
        mv(
            &format!("t1..t{}", l.n_ops - 1),
            t,
            l.n_ops - 1,
            l.n_ops - 1,
        ),
        mv("y", t, 0, 1),
    ];
    let launches = if variant == Variant::Eager {
        l.n_ops
    } else {
        1
    };
    VariantLedger::new(
        variant,
        movements,
        l.n_ops * l.elements * LAUNCH_OP_FLOPS,
        launches,
    )
}
