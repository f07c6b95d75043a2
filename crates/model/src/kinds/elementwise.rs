//! `kind: elementwise`: a chain of elementwise ops, `y = op_n(…op_1(x))`, unfused (one kernel
//! per op, every intermediate through memory) against fused (one kernel).

use super::tensors::{uniform, Tensors};
use super::{DType, FromRaw, Invalid, Kind, RawWorkload, Variant, UNFUSED_FUSED};
use crate::ledger::{Movement, Tiling, VariantLedger, SPECIAL_FN_FLOPS};
use serde::{Deserialize, Serialize};

/// One elementwise op of a chain. Binary ops (`add`, `mul`) read a tensor of the same shape of
/// their own (a residual, a gate); `bias_add` reads a bias vector of `cols` elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ElemOp {
    BiasAdd,
    Add,
    Mul,
    Scale,
    Relu,
    Gelu,
    Silu,
}

impl ElemOp {
    pub const ALL: [ElemOp; 7] = [
        ElemOp::BiasAdd,
        ElemOp::Add,
        ElemOp::Mul,
        ElemOp::Scale,
        ElemOp::Relu,
        ElemOp::Gelu,
        ElemOp::Silu,
    ];
    pub fn name(self) -> &'static str {
        match self {
            ElemOp::BiasAdd => "bias_add",
            ElemOp::Add => "add",
            ElemOp::Mul => "mul",
            ElemOp::Scale => "scale",
            ElemOp::Relu => "relu",
            ElemOp::Gelu => "gelu",
            ElemOp::Silu => "silu",
        }
    }
    /// True for ops that read a second full-size tensor.
    pub fn reads_tensor(self) -> bool {
        matches!(self, ElemOp::Add | ElemOp::Mul)
    }
}

/// FLOPs per element of one elementwise op, under the ledger's convention (a special function
/// counts [`SPECIAL_FN_FLOPS`]).
pub fn op_flops(op: ElemOp) -> u64 {
    match op {
        ElemOp::BiasAdd | ElemOp::Add | ElemOp::Mul | ElemOp::Scale | ElemOp::Relu => 1,
        // 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))): x³ (2), ·0.044715, +x, ·√(2/π), +1, ·x, ·0.5
        ElemOp::Gelu => 8 + SPECIAL_FN_FLOPS,
        // x / (1 + exp(−x)): +1, ÷
        ElemOp::Silu => 2 + SPECIAL_FN_FLOPS,
    }
}

/// A validated elementwise chain: `y = op_n(...op_1(x))`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Elementwise {
    pub ops: Vec<ElemOp>,
    pub rows: u64,
    pub cols: u64,
    pub dtype: DType,
    pub scale: f64,
}

impl Elementwise {
    pub fn elements(&self) -> u64 {
        self.rows * self.cols
    }
}

/// The name of op `k`'s second tensor (the ledger's and the inputs' name).
pub fn operand_name(op: ElemOp, k: usize) -> String {
    format!("{}_operand{k}", op.name())
}

/// The inputs of a chain, borrowed from its tensors: x, the bias (empty without a `bias_add`)
/// and, per op, its second tensor (empty for ops without one).
pub struct ChainInputs<'a> {
    pub x: &'a [f32],
    pub bias: &'a [f32],
    pub operands: Vec<&'a [f32]>,
}

impl<'a> ChainInputs<'a> {
    pub fn of(w: &Elementwise, t: &'a Tensors) -> Self {
        ChainInputs {
            x: t.get("x"),
            bias: t.get("bias"),
            operands: w
                .ops
                .iter()
                .enumerate()
                .map(|(k, &op)| {
                    if op.reads_tensor() {
                        t.get(&operand_name(op, k))
                    } else {
                        &[]
                    }
                })
                .collect(),
        }
    }
}

impl FromRaw for Elementwise {
    const KEYS: (&'static [&'static str], &'static [&'static str]) =
        (&["ops", "rows", "cols"], &["dtype", "scale"]);

    fn from_raw(raw: &RawWorkload) -> Result<Self, Invalid> {
        let ops = raw.ops.clone().unwrap_or_default();
        if ops.is_empty() {
            return Err(Invalid::at(
                "ops",
                format!(
                    "workload.ops is empty: expected a chain of at least one op ({})",
                    ElemOp::ALL.map(ElemOp::name).join(", ")
                ),
            ));
        }
        if ops.len() > 256 {
            return Err(Invalid::at(
                "ops",
                format!(
                    "workload.ops has {} ops: at most 256 are supported",
                    ops.len()
                ),
            ));
        }
        raw.elements(&["rows", "cols"], "cols")?;
        Ok(Elementwise {
            ops,
            rows: raw.dim("rows"),
            cols: raw.dim("cols"),
            dtype: raw.dtype(),
            scale: raw.scale.map_or(0.5, |s| s.0),
        })
    }
}

impl Kind for Elementwise {
    fn variants(&self) -> Vec<Variant> {
        UNFUSED_FUSED.to_vec()
    }
    fn dtype(&self) -> DType {
        self.dtype
    }
    fn describe(&self) -> String {
        format!(
            "elementwise [{}] {}x{} {}",
            self.ops
                .iter()
                .map(|o| o.name())
                .collect::<Vec<_>>()
                .join(" -> "),
            self.rows,
            self.cols,
            self.dtype.name()
        )
    }
    fn reduction_len(&self) -> u64 {
        self.ops.len() as u64
    }
    fn ledger(&self, variant: Variant, _: &Tiling) -> VariantLedger {
        chain_ledger(self, variant)
    }
    fn output_len(&self) -> u64 {
        self.elements()
    }
    fn output_shape(&self) -> Vec<u64> {
        vec![self.rows, self.cols]
    }
    fn input_bytes(&self) -> u64 {
        let t = self.elements() * 4;
        let operands = self.ops.iter().filter(|o| o.reads_tensor()).count() as u64;
        let bias = if self.ops.contains(&ElemOp::BiasAdd) {
            self.cols * 4
        } else {
            0
        };
        t * (1 + operands) + bias
    }
    fn inputs(&self, seed: u64) -> Tensors {
        let n = self.elements() as usize;
        let mut t = Tensors::new();
        let shape = vec![self.rows, self.cols];
        t.put_shaped("x", shape.clone(), uniform(n, seed, 0, -4.0, 4.0));
        if self.ops.contains(&ElemOp::BiasAdd) {
            t.put("bias", uniform(self.cols as usize, seed, 1, -1.0, 1.0));
        }
        for (k, &op) in self.ops.iter().enumerate() {
            let tensor = match op {
                ElemOp::Add => uniform(n, seed, 2 + k as u64, -2.0, 2.0),
                // Gates away from zero so relative errors stay meaningful.
                ElemOp::Mul => uniform(n, seed, 2 + k as u64, 0.25, 2.0),
                _ => continue,
            };
            t.put_shaped(operand_name(op, k), shape.clone(), tensor);
        }
        t
    }
    /// The chain evaluated in double precision on the same (f32) inputs.
    fn reference(&self, t: &Tensors, _: Variant, i: usize) -> f64 {
        let inputs = ChainInputs::of(self, t);
        let col = i % self.cols as usize;
        let scale = self.scale as f32 as f64;
        let mut v = inputs.x[i] as f64;
        for (k, op) in self.ops.iter().enumerate() {
            v = match op {
                ElemOp::BiasAdd => v + inputs.bias[col] as f64,
                ElemOp::Add => v + inputs.operands[k][i] as f64,
                ElemOp::Mul => v * inputs.operands[k][i] as f64,
                ElemOp::Scale => v * scale,
                ElemOp::Relu => {
                    if v < 0.0 {
                        0.0
                    } else {
                        v
                    }
                }
                ElemOp::Gelu => {
                    let c = (2.0 / std::f64::consts::PI).sqrt();
                    0.5 * v * (1.0 + (c * (v + 0.044715 * v * v * v)).tanh())
                }
                ElemOp::Silu => v / (1.0 + (-v).exp()),
            };
        }
        v
    }
}

fn chain_ledger(e: &Elementwise, variant: Variant) -> VariantLedger {
    let tensor_bytes = e.elements() * e.dtype.bytes();
    let bias_bytes = e.cols * e.dtype.bytes();
    let flops = e.elements() * e.ops.iter().map(|&op| op_flops(op)).sum::<u64>();
    let mut movements = vec![Movement {
        tensor: "x".into(),
        bytes: tensor_bytes,
        reads: 1,
        writes: 0,
    }];
    // Operands of each op: bias vectors and second tensors are inputs in both variants.
    let mut bias_reads = 0;
    for (i, op) in e.ops.iter().enumerate() {
        match op {
            ElemOp::BiasAdd => bias_reads += 1,
            ElemOp::Add | ElemOp::Mul => movements.push(Movement {
                tensor: operand_name(*op, i),
                bytes: tensor_bytes,
                reads: 1,
                writes: 0,
            }),
            _ => {}
        }
    }
    if bias_reads > 0 {
        movements.push(Movement {
            tensor: "bias".into(),
            bytes: bias_bytes,
            // Unfused reads the bias once per bias_add kernel; fused once.
            reads: if variant == Variant::Unfused {
                bias_reads
            } else {
                1
            },
            writes: 0,
        });
    }
    let launches = match variant {
        Variant::Unfused | Variant::Eager | Variant::Standard | Variant::Naive => {
            for i in 1..e.ops.len() {
                movements.push(Movement {
                    tensor: format!("t{i}"),
                    bytes: tensor_bytes,
                    reads: 1,
                    writes: 1,
                });
            }
            e.ops.len() as u64
        }
        _ => 1,
    };
    movements.push(Movement {
        tensor: "y".into(),
        bytes: tensor_bytes,
        reads: 0,
        writes: 1,
    });
    VariantLedger::new(variant, movements, flops, launches)
}
