//! The analytic IO ledger: FLOPs and the bytes each variant moves through device memory.
//!
//! Pure arithmetic, no I/O. Conventions (documented in the README):
//! - a tensor "moves" each time a kernel reads it from or writes it to device memory; the ledger
//!   lists every tensor with its size and how many times it is read and written. Write-allocate
//!   (read-for-ownership) traffic of CPU caches is not counted: the ledger models device memory.
//! - unfused chains write every intermediate once and read it once; fused chains move only their
//!   inputs and the output.
//! - FLOPs: add, mul, max and divide count 1 each; a special function (exp, tanh, erf, rsqrt)
//!   counts [`SPECIAL_FN_FLOPS`] — one SFU instruction on a GPU. A CPU evaluates it as a
//!   polynomial of ~15 operations, which the measured bound (not the ledger) reveals.

use crate::spec::{Bound, ElemOp, Elementwise, Variant, Workload};
use serde::{Deserialize, Serialize};

/// FLOPs charged for one special-function evaluation (exp, tanh, erf, rsqrt).
pub const SPECIAL_FN_FLOPS: u64 = 1;

/// FLOPs per element of one elementwise op, under the convention above.
pub fn op_flops(op: ElemOp) -> u64 {
    match op {
        ElemOp::BiasAdd | ElemOp::Add | ElemOp::Mul | ElemOp::Scale | ElemOp::Relu => 1,
        // 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))): x³ (2), ·0.044715, +x, ·√(2/π), +1, ·x, ·0.5
        ElemOp::Gelu => 8 + SPECIAL_FN_FLOPS,
        // x / (1 + exp(−x)): +1, ÷
        ElemOp::Silu => 2 + SPECIAL_FN_FLOPS,
    }
}

/// One tensor's traffic through device memory in one execution of a variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Movement {
    pub tensor: String,
    pub bytes: u64,
    pub reads: u64,
    pub writes: u64,
}

impl Movement {
    pub fn traffic_bytes(&self) -> u64 {
        self.bytes * (self.reads + self.writes)
    }
}

/// The ledger of one variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantLedger {
    pub variant: Variant,
    pub movements: Vec<Movement>,
    pub flops: u64,
    /// Kernel launches (dispatches) per execution.
    pub launches: u64,
}

impl VariantLedger {
    pub fn bytes_moved(&self) -> u64 {
        self.movements.iter().map(Movement::traffic_bytes).sum()
    }
    /// Arithmetic intensity, FLOP per byte moved.
    pub fn intensity(&self) -> f64 {
        self.flops as f64 / self.bytes_moved().max(1) as f64
    }
}

/// The ledger of a spec: both variants.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ledger {
    pub before: VariantLedger,
    pub after: VariantLedger,
}

impl Ledger {
    pub fn new(workload: &Workload, before: Variant, after: Variant) -> Self {
        Ledger {
            before: variant_ledger(workload, before),
            after: variant_ledger(workload, after),
        }
    }
    /// 1 − bytes(after)/bytes(before).
    pub fn io_saving(&self) -> f64 {
        1.0 - self.after.bytes_moved() as f64 / self.before.bytes_moved().max(1) as f64
    }
}

/// The ledger of one variant of a workload.
pub fn variant_ledger(workload: &Workload, variant: Variant) -> VariantLedger {
    match workload {
        Workload::Elementwise(e) => elementwise(e, variant),
    }
}

fn elementwise(e: &Elementwise, variant: Variant) -> VariantLedger {
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
                tensor: format!("{}_operand{}", op.name(), i),
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
        Variant::Unfused => {
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
        Variant::Fused => 1,
    };
    movements.push(Movement {
        tensor: "y".into(),
        bytes: tensor_bytes,
        reads: 0,
        writes: 1,
    });
    VariantLedger {
        variant,
        movements,
        flops,
        launches,
    }
}

/// The roofline model: `T = max(FLOPs/Peak, Bytes/BW)`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Roofline {
    pub compute_secs: f64,
    pub memory_secs: f64,
    /// The predicted time, the larger of the two.
    pub secs: f64,
    pub bound: Bound,
    /// Arithmetic intensity, FLOP/byte.
    pub intensity: f64,
    /// Ridge point Peak/BW, FLOP/byte.
    pub ridge: f64,
}

/// Predicts time and bound of `flops` and `bytes` on a device with the given ceilings.
pub fn roofline(
    peak_flops_per_sec: f64,
    bw_bytes_per_sec: f64,
    flops: f64,
    bytes: f64,
) -> Roofline {
    let compute_secs = flops / peak_flops_per_sec;
    let memory_secs = bytes / bw_bytes_per_sec;
    Roofline {
        compute_secs,
        memory_secs,
        secs: compute_secs.max(memory_secs),
        bound: if compute_secs > memory_secs {
            Bound::Compute
        } else {
            Bound::Bandwidth
        },
        intensity: if bytes > 0.0 {
            flops / bytes
        } else {
            f64::INFINITY
        },
        ridge: peak_flops_per_sec / bw_bytes_per_sec,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::DType;

    fn ew(ops: &[ElemOp], rows: u64, cols: u64) -> Workload {
        Workload::Elementwise(Elementwise {
            ops: ops.to_vec(),
            rows,
            cols,
            dtype: DType::F32,
            scale: 0.5,
        })
    }

    #[test]
    fn bias_gelu_8192x4096_exact_bytes() {
        let w = ew(&[ElemOp::BiasAdd, ElemOp::Gelu], 8192, 4096);
        let l = Ledger::new(&w, Variant::Unfused, Variant::Fused);
        let t = 8192u64 * 4096 * 4; // 134_217_728
        assert_eq!(l.before.bytes_moved(), 4 * t + 4096 * 4);
        assert_eq!(l.before.bytes_moved(), 536_887_296);
        assert_eq!(l.after.bytes_moved(), 2 * t + 4096 * 4);
        assert_eq!(l.after.bytes_moved(), 268_451_840);
        assert_eq!(l.before.flops, 8192 * 4096 * 10);
        assert_eq!(l.after.flops, l.before.flops);
        assert_eq!(l.before.launches, 2);
        assert_eq!(l.after.launches, 1);
        let s = l.io_saving();
        assert!(
            (s - (1.0 - 268_451_840.0 / 536_887_296.0)).abs() < 1e-12,
            "{s}"
        );
    }

    #[test]
    fn chain_with_operands_counts_every_tensor() {
        let w = ew(
            &[ElemOp::Scale, ElemOp::Add, ElemOp::Relu, ElemOp::Mul],
            4,
            8,
        );
        let l = Ledger::new(&w, Variant::Unfused, Variant::Fused);
        let t = 4 * 8 * 4;
        // unfused: x r, add operand r, mul operand r, t1..t3 r+w, y w
        assert_eq!(l.before.bytes_moved(), (1 + 1 + 1 + 6 + 1) * t);
        // fused: x, two operands, y
        assert_eq!(l.after.bytes_moved(), 4 * t);
        assert!((l.io_saving() - 0.6).abs() < 1e-12);
    }

    #[test]
    fn seed_roofline_example() {
        // The seed: roofline(362, 864, 2e12, 8e9) -> (9.3e-3 s, bandwidth)
        let r = roofline(362e12, 864e9, 2e12, 8e9);
        assert!((r.secs - 9.259259e-3).abs() < 1e-8, "{}", r.secs);
        assert_eq!(r.bound, Bound::Bandwidth);
        assert!((r.ridge - 418.98).abs() < 0.01);
        assert!((r.intensity - 250.0).abs() < 1e-9);
        let c = roofline(362e12, 864e9, 2e15, 8e9);
        assert_eq!(c.bound, Bound::Compute);
    }
}
