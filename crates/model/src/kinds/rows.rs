//! The row-wise kinds: `rmsnorm`, `layernorm` and `softmax` over `rows` rows of `cols` values.
//! Unfused runs one kernel per step (each intermediate through memory); fused makes one pass
//! per row. They share their parameters and inputs; each is a kind of its own.

use super::tensors::{uniform, Tensors};
use super::{DType, FromRaw, Invalid, Kind, RawWorkload, Variant, UNFUSED_FUSED};
use crate::ledger::{mv, Tiling, VariantLedger, SPECIAL_FN_FLOPS};
use serde::{Deserialize, Serialize};

/// A row-wise operator (RMSNorm, LayerNorm, softmax) over `rows` rows of `cols` values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RowOp {
    pub rows: u64,
    pub cols: u64,
    pub dtype: DType,
    /// Epsilon of the norms (unused by softmax).
    pub eps: f64,
}

impl RowOp {
    pub fn elements(&self) -> u64 {
        self.rows * self.cols
    }

    pub(super) fn from_raw(raw: &RawWorkload) -> Result<Self, Invalid> {
        let eps = raw.eps.map_or(1e-5, |e| e.0);
        if eps <= 0.0 {
            return Err(Invalid::at(
                "eps",
                format!("workload.eps {eps}: expected a number > 0"),
            ));
        }
        raw.elements(&["rows", "cols"], "cols")?;
        Ok(RowOp {
            rows: raw.dim("rows"),
            cols: raw.dim("cols"),
            dtype: raw.dtype(),
            eps,
        })
    }

    pub(super) fn describe(&self, kind: &str) -> String {
        format!("{kind} {}x{} {}", self.rows, self.cols, self.dtype.name())
    }

    /// Host bytes of x, weight and bias.
    fn input_bytes(&self) -> u64 {
        self.elements() * 4 + 2 * self.cols * 4
    }

    /// x, and the weight and bias of the norms (softmax reads x only; all three are generated
    /// so that every row kind computes on the same numbers).
    fn inputs(&self, seed: u64) -> Tensors {
        let (n, cols) = (self.elements() as usize, self.cols as usize);
        let mut t = Tensors::new();
        t.put_shaped(
            "x",
            vec![self.rows, self.cols],
            uniform(n, seed, 0, -3.0, 3.0),
        );
        t.put("weight", uniform(cols, seed, 1, 0.5, 1.5));
        t.put("bias", uniform(cols, seed, 2, -0.5, 0.5));
        t
    }

    /// Row `r` of x in f64, and the weight and bias of column `j`.
    fn row_f64(&self, t: &Tensors, i: usize) -> (Vec<f64>, usize, f64, f64) {
        let c = self.cols as usize;
        let (r, j) = (i / c, i % c);
        let row = t.get("x")[r * c..(r + 1) * c]
            .iter()
            .map(|&v| v as f64)
            .collect();
        (row, j, t.get("weight")[j] as f64, t.get("bias")[j] as f64)
    }
}

/// The three row kinds: a row operator under the name of its function. Serialized as the
/// [`RowOp`] they wrap.
macro_rules! row_kind {
    ($(#[$doc:meta])* $name:ident, $kind:literal, $optional:expr, $ledger:ident, |$op:ident, $t:ident, $i:ident| $reference:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
        #[serde(transparent)]
        pub struct $name(pub RowOp);

        impl FromRaw for $name {
            const KEYS: (&'static [&'static str], &'static [&'static str]) =
                (&["rows", "cols"], $optional);
            fn from_raw(raw: &RawWorkload) -> Result<Self, Invalid> {
                RowOp::from_raw(raw).map($name)
            }
        }

        impl Kind for $name {
            fn variants(&self) -> Vec<Variant> {
                UNFUSED_FUSED.to_vec()
            }
            fn dtype(&self) -> DType {
                self.0.dtype
            }
            fn describe(&self) -> String {
                self.0.describe($kind)
            }
            fn reduction_len(&self) -> u64 {
                self.0.cols
            }
            fn ledger(&self, variant: Variant, _: &Tiling) -> VariantLedger {
                $ledger(&self.0, variant)
            }
            fn output_len(&self) -> u64 {
                self.0.elements()
            }
            fn output_shape(&self) -> Vec<u64> {
                vec![self.0.rows, self.0.cols]
            }
            fn input_bytes(&self) -> u64 {
                self.0.input_bytes()
            }
            fn inputs(&self, seed: u64) -> Tensors {
                self.0.inputs(seed)
            }
            fn reference(&self, $t: &Tensors, _: Variant, $i: usize) -> f64 {
                let $op = &self.0;
                $reference
            }
        }
    };
}

row_kind!(
    /// RMSNorm: y = x / √(mean(x²) + ε) · w.
    Rmsnorm, "rmsnorm", &["dtype", "eps"], rmsnorm, |r, t, i| {
        let (row, j, w, _) = r.row_f64(t, i);
        let ms = row.iter().map(|v| v * v).sum::<f64>() / row.len() as f64;
        row[j] / (ms + r.eps).sqrt() * w
    }
);

row_kind!(
    /// LayerNorm: y = (x − μ)/√(σ² + ε) · w + b.
    Layernorm, "layernorm", &["dtype", "eps"], layernorm, |r, t, i| {
        let (row, j, w, b) = r.row_f64(t, i);
        let n = row.len() as f64;
        let mean = row.iter().sum::<f64>() / n;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
        (row[j] - mean) / (var + r.eps).sqrt() * w + b
    }
);

row_kind!(
    /// Row softmax: y = exp(x − max) / Σ exp(x − max).
    Softmax, "softmax", &["dtype"], softmax, |r, t, i| {
        let (row, j, _, _) = r.row_f64(t, i);
        let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
        (row[j] - m).exp() / s
    }
);

/// RMSNorm y = x / √(mean(x²) + ε) · w. Unfused: square, mean, rsqrt, scale, weight as five
/// kernels; fused: one pass per row (the row stays on chip between its two sweeps).
fn rmsnorm(r: &RowOp, variant: Variant) -> VariantLedger {
    let (t, v, w) = (r.elements() * 4, r.rows * 4, r.cols * 4);
    let flops = r.elements() * 4 + r.rows * (2 + SPECIAL_FN_FLOPS);
    match variant {
        Variant::Unfused => VariantLedger::new(
            variant,
            vec![
                mv("x", t, 2, 0),
                mv("sq", t, 1, 1),
                mv("mean_sq", v, 1, 1),
                mv("rstd", v, 1, 1),
                mv("normed", t, 1, 1),
                mv("weight", w, 1, 0),
                mv("y", t, 0, 1),
            ],
            flops,
            5,
        ),
        _ => VariantLedger::new(
            variant,
            vec![mv("x", t, 1, 0), mv("weight", w, 1, 0), mv("y", t, 0, 1)],
            flops,
            1,
        ),
    }
}

/// LayerNorm y = (x − μ)/√(σ² + ε) · w + b. Unfused: mean, center, variance, rstd, normalize,
/// affine as six kernels; fused: one pass per row.
fn layernorm(r: &RowOp, variant: Variant) -> VariantLedger {
    let (t, v, w) = (r.elements() * 4, r.rows * 4, r.cols * 4);
    let flops = r.elements() * 7 + r.rows * (3 + SPECIAL_FN_FLOPS);
    match variant {
        Variant::Unfused => VariantLedger::new(
            variant,
            vec![
                mv("x", t, 2, 0),
                mv("mean", v, 1, 1),
                mv("centered", t, 2, 1),
                mv("var", v, 1, 1),
                mv("rstd", v, 1, 1),
                mv("normed", t, 1, 1),
                mv("weight", w, 1, 0),
                mv("bias", w, 1, 0),
                mv("y", t, 0, 1),
            ],
            flops,
            6,
        ),
        _ => VariantLedger::new(
            variant,
            vec![
                mv("x", t, 1, 0),
                mv("weight", w, 1, 0),
                mv("bias", w, 1, 0),
                mv("y", t, 0, 1),
            ],
            flops,
            1,
        ),
    }
}

/// Row softmax. Unfused: max, exp(x − max), sum, divide as four kernels; fused: online softmax,
/// one read and one write.
fn softmax(r: &RowOp, variant: Variant) -> VariantLedger {
    let (t, v) = (r.elements() * 4, r.rows * 4);
    // max, subtract, exp, add, divide
    let flops = r.elements() * (4 + SPECIAL_FN_FLOPS);
    match variant {
        Variant::Unfused => VariantLedger::new(
            variant,
            vec![
                mv("x", t, 2, 0),
                mv("row_max", v, 1, 1),
                mv("exp", t, 2, 1),
                mv("row_sum", v, 1, 1),
                mv("y", t, 0, 1),
            ],
            flops,
            4,
        ),
        _ => VariantLedger::new(variant, vec![mv("x", t, 1, 0), mv("y", t, 0, 1)], flops, 1),
    }
}
