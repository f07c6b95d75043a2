//! `kind: add_rmsnorm`: the residual add and RMSNorm at the seam of two transformer blocks,
//! s = x + residual (the updated residual stream, kept for the next block) and
//! y = s / √(mean(s²) + ε) · w. Unfused runs an add kernel and an RMSNorm kernel (s goes through
//! memory between them); fused runs one kernel per row that writes s and y from one read of x
//! and the residual. Both variants write s; y is the output checked against the reference.

use super::rows::RowOp;
use super::tensors::{uniform, Tensors};
use super::{DType, FromRaw, Invalid, Kind, RawWorkload, Variant, UNFUSED_FUSED};
use crate::ledger::{mv, Tiling, VariantLedger, SPECIAL_FN_FLOPS};
use serde::{Deserialize, Serialize};

/// Residual add and RMSNorm over `rows` rows of `cols` values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(transparent)]
pub struct AddRmsnorm(pub RowOp);

impl FromRaw for AddRmsnorm {
    const KEYS: (&'static [&'static str], &'static [&'static str]) =
        (&["rows", "cols"], &["dtype", "eps"]);
    fn from_raw(raw: &RawWorkload) -> Result<Self, Invalid> {
        RowOp::from_raw(raw).map(AddRmsnorm)
    }
}

impl Kind for AddRmsnorm {
    fn variants(&self) -> Vec<Variant> {
        UNFUSED_FUSED.to_vec()
    }
    fn dtype(&self) -> DType {
        self.0.dtype
    }
    fn describe(&self) -> String {
        self.0.describe("add_rmsnorm")
    }
    fn reduction_len(&self) -> u64 {
        self.0.cols
    }
    fn ledger(&self, variant: Variant, _: &Tiling) -> VariantLedger {
        let r = &self.0;
        let (t, w) = (r.elements() * 4, r.cols * 4);
        // add (1), square and sum (2), scale and weight (2) per element; mean, ε and rsqrt per row.
        let flops = r.elements() * 5 + r.rows * (2 + SPECIAL_FN_FLOPS);
        let (sum, launches) = match variant {
            // The add kernel writes s; the RMSNorm kernel reads it back.
            Variant::Unfused => (mv("sum", t, 1, 1), 2),
            // One pass per row writes s while the row's statistics accumulate.
            _ => (mv("sum", t, 0, 1), 1),
        };
        VariantLedger::new(
            variant,
            vec![
                mv("x", t, 1, 0),
                mv("residual", t, 1, 0),
                sum,
                mv("weight", w, 1, 0),
                mv("y", t, 0, 1),
            ],
            flops,
            launches,
        )
    }
    fn output_len(&self) -> u64 {
        self.0.elements()
    }
    fn output_shape(&self) -> Vec<u64> {
        vec![self.0.rows, self.0.cols]
    }
    fn input_bytes(&self) -> u64 {
        2 * self.0.elements() * 4 + self.0.cols * 4
    }
    fn inputs(&self, seed: u64) -> Tensors {
        let (n, cols) = (self.0.elements() as usize, self.0.cols as usize);
        let mut t = Tensors::new();
        let shape = vec![self.0.rows, self.0.cols];
        t.put_shaped("x", shape.clone(), uniform(n, seed, 0, -3.0, 3.0));
        t.put_shaped("residual", shape, uniform(n, seed, 3, -1.0, 1.0));
        t.put("weight", uniform(cols, seed, 1, 0.5, 1.5));
        t
    }
    fn reference(&self, t: &Tensors, _: Variant, i: usize) -> f64 {
        let c = self.0.cols as usize;
        let (r, j) = (i / c, i % c);
        let (x, res) = (&t.get("x")[r * c..(r + 1) * c], &t.get("residual")[r * c..]);
        // The sum as the kernels store it (f32), then the norm in f64.
        let s: Vec<f64> = x.iter().zip(res).map(|(a, b)| (a + b) as f64).collect();
        let ms = s.iter().map(|v| v * v).sum::<f64>() / c as f64;
        s[j] / (ms + self.0.eps).sqrt() * t.get("weight")[j] as f64
    }
}
