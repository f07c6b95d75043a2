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

use crate::spec::{
    Attention, Bound, ElemOp, Elementwise, Gemm, LaunchChain, ProbeWorkload, RowOp, Variant,
    Workload,
};
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Ledger {
    pub before: VariantLedger,
    pub after: VariantLedger,
}

impl Ledger {
    /// The ledger of the CPU kernels' tiling.
    pub fn new(workload: &Workload, before: Variant, after: Variant) -> Self {
        Self::with_tiling(workload, before, after, Tiling::CPU)
    }
    /// The ledger of a backend's kernels: tiled variants re-read what their tiles make them
    /// re-read.
    pub fn with_tiling(workload: &Workload, before: Variant, after: Variant, t: Tiling) -> Self {
        Ledger {
            before: variant_ledger_tiled(workload, before, t),
            after: variant_ledger_tiled(workload, after, t),
        }
    }
    /// 1 − bytes(after)/bytes(before).
    pub fn io_saving(&self) -> f64 {
        1.0 - self.after.bytes_moved() as f64 / self.before.bytes_moved().max(1) as f64
    }
}

/// Blocking of the tiled GEMM (the CPU kernel uses these): C is computed in MC×NC blocks over KC
/// slices of k, with A and B packed per block.
pub const GEMM_MC: u64 = 128;
pub const GEMM_NC: u64 = 512;
pub const GEMM_KC: u64 = 256;
/// Tile of FlashAttention: Q rows per tile (Br) and K/V rows per tile (Bc). On the CPU the
/// Q tile and its accumulator (Br×d each) live in L2, the "SRAM" of the CPU: 256 rows of d = 128
/// are 128 KiB each.
pub const FLASH_BR: u64 = 256;
pub const FLASH_BC: u64 = 256;

/// The tile sizes of one backend's tiled kernels, which decide how often tiled variants re-read
/// their inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tiling {
    /// GEMM: C block rows (B is re-read once per block row).
    pub gemm_mc: u64,
    /// GEMM: C block columns (A is re-read once per block column).
    pub gemm_nc: u64,
    /// GEMM: depth of a k slice; C is read back for every slice after the first. `u64::MAX`
    /// when the accumulators stay on chip across the whole k loop (C written once).
    pub gemm_kc: u64,
    /// Flash attention: Q rows per tile (K and V are re-read once per tile).
    pub flash_br: u64,
    /// Flash attention: K/V rows per tile.
    pub flash_bc: u64,
    /// Flash attention in bf16 (tensor-core kernel): Q rows per tile.
    pub flash_bf16_br: u64,
    /// A cache between the tiles and device memory that serves re-reads (a GPU's L2), in
    /// bytes; 0 models none. Flash attention's K and V are re-read once per query tile; when
    /// one head's K and V take at most a quarter of it, the re-reads hit it and device memory
    /// sees K and V once (the blocks in flight at any time work on a head or two, so a quarter
    /// leaves room for them and the streaming Q and O).
    pub reuse_cache_bytes: u64,
}

impl Tiling {
    /// The CPU kernels (`src/backend/cpu/{gemm,attention}.rs` use these constants).
    pub const CPU: Tiling = Tiling {
        gemm_mc: GEMM_MC,
        gemm_nc: GEMM_NC,
        gemm_kc: GEMM_KC,
        flash_br: FLASH_BR,
        flash_bc: FLASH_BC,
        // The CPU backend runs f32 only; bf16 specs are refused before they are measured.
        flash_bf16_br: FLASH_BR,
        // The CPU's K/V re-reads are counted in full: the established model of this backend.
        reuse_cache_bytes: 0,
    };
    /// The CUDA kernels (`kernels/gemm.cu`: 64×64 C tiles, accumulators in registers over all
    /// of k; `kernels/attention.cu`: 32 Q rows and 16 K/V rows per tile in f32, 64 and 64 in
    /// the bf16 tensor-core kernel).
    pub const CUDA: Tiling = Tiling {
        gemm_mc: 64,
        gemm_nc: 64,
        gemm_kc: u64::MAX,
        flash_br: 32,
        flash_bc: 16,
        flash_bf16_br: 64,
        // The device's L2 is filled in by the CUDA backend (`opledger ledger --tiling cuda`
        // shows the model without it: every re-read from device memory).
        reuse_cache_bytes: 0,
    };
}

/// Dependent FMAs per element of the `fma` probe.
pub const PROBE_FMA_ITERS: u64 = 256;

/// The probes as ledgers: copy (read x, write y), triad (read b and c, write a; 2 FLOPs per
/// element), fma (read x, write y, 2·PROBE_FMA_ITERS FLOPs per element: compute-bound).
fn probe(p: &ProbeWorkload, variant: Variant) -> VariantLedger {
    let t = p.elements * 4;
    match variant {
        Variant::Copy => ledger(variant, vec![mv("x", t, 1, 0), mv("y", t, 0, 1)], 0, 1),
        Variant::Triad => ledger(
            variant,
            vec![mv("b", t, 1, 0), mv("c", t, 1, 0), mv("a", t, 0, 1)],
            2 * p.elements,
            1,
        ),
        _ => ledger(
            variant,
            vec![mv("x", t, 1, 0), mv("y", t, 0, 1)],
            2 * PROBE_FMA_ITERS * p.elements,
            1,
        ),
    }
}

/// FLOPs per element of one launch_chain op: v·a + b.
pub const LAUNCH_OP_FLOPS: u64 = 2;

fn mv(tensor: &str, bytes: u64, reads: u64, writes: u64) -> Movement {
    Movement {
        tensor: tensor.into(),
        bytes,
        reads,
        writes,
    }
}

/// The ledger of one variant of a workload.
pub fn variant_ledger(workload: &Workload, variant: Variant) -> VariantLedger {
    variant_ledger_tiled(workload, variant, Tiling::CPU)
}

/// The ledger of one variant with a backend's tiling.
pub fn variant_ledger_tiled(workload: &Workload, variant: Variant, t: Tiling) -> VariantLedger {
    match workload {
        Workload::Elementwise(e) => elementwise(e, variant),
        Workload::Rmsnorm(r) => rmsnorm(r, variant),
        Workload::Layernorm(r) => layernorm(r, variant),
        Workload::Softmax(r) => softmax(r, variant),
        Workload::Gemm(g) => gemm(g, variant, t),
        Workload::Attention(a) => attention(a, variant, t),
        Workload::LaunchChain(l) => launch_chain(l, variant),
        Workload::Probe(p) => probe(p, variant),
    }
}

fn ledger(variant: Variant, movements: Vec<Movement>, flops: u64, launches: u64) -> VariantLedger {
    VariantLedger {
        variant,
        movements,
        flops,
        launches,
    }
}

/// RMSNorm y = x / √(mean(x²) + ε) · w. Unfused: square, mean, rsqrt, scale, weight as five
/// kernels; fused: one pass per row (the row stays on chip between its two sweeps).
fn rmsnorm(r: &RowOp, variant: Variant) -> VariantLedger {
    let (t, v, w) = (r.elements() * 4, r.rows * 4, r.cols * 4);
    let flops = r.elements() * 4 + r.rows * (2 + SPECIAL_FN_FLOPS);
    match variant {
        Variant::Unfused => ledger(
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
        _ => ledger(
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
        Variant::Unfused => ledger(
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
        _ => ledger(
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
        Variant::Unfused => ledger(
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
        _ => ledger(variant, vec![mv("x", t, 1, 0), mv("y", t, 0, 1)], flops, 1),
    }
}

/// GEMM. Naive (i, j, k loops): a row of A stays in cache across j, but B is streamed once per
/// row of C. Tiled: A is re-read once per NC-wide block column, B once per MC-tall block row, and
/// C is read back for every KC slice after the first.
fn gemm(g: &Gemm, variant: Variant, t: Tiling) -> VariantLedger {
    let (a, b, c) = (g.m * g.k * 4, g.k * g.n * 4, g.m * g.n * 4);
    let flops = 2 * g.m * g.n * g.k;
    match variant {
        Variant::Naive => ledger(
            variant,
            vec![mv("A", a, 1, 0), mv("B", b, g.m, 0), mv("C", c, 0, 1)],
            flops,
            1,
        ),
        _ => {
            let k_slices = g.k.div_ceil(t.gemm_kc);
            ledger(
                variant,
                vec![
                    mv("A", a, g.n.div_ceil(t.gemm_nc), 0),
                    mv("B", b, g.m.div_ceil(t.gemm_mc), 0),
                    mv("C", c, k_slices - 1, k_slices),
                ],
                flops,
                1,
            )
        }
    }
}

/// Attention forward per (batch, head), FLOPs by the FlashAttention convention: 4·N²·d (QKᵀ and
/// PV), halved when causal. Standard materializes S and P (N² each) in memory; flash keeps them
/// in the tile and re-reads K and V once per Q tile of Br rows (about half as often when
/// causal, since tiles above the diagonal are skipped).
fn attention(a: &Attention, variant: Variant, t: Tiling) -> VariantLedger {
    let (bh, n, d) = (a.heads_total(), a.seq_len, a.head_dim);
    // Every tensor in the workload's dtype: bf16 standard attention stores S and P in bf16 too
    // (its softmax reads and writes bf16), as framework eager attention does.
    let elem = a.dtype.bytes();
    let qkvo = bh * n * d * elem;
    let s = bh * n * n * elem;
    let full = 4 * bh * n * n * d;
    let flops = if a.causal { full / 2 } else { full };
    match variant {
        Variant::Standard => ledger(
            variant,
            vec![
                mv("Q", qkvo, 1, 0),
                mv("K", qkvo, 1, 0),
                mv("S", s, 1, 1),
                mv("P", s, 1, 1),
                mv("V", qkvo, 1, 0),
                mv("O", qkvo, 0, 1),
            ],
            flops,
            3,
        ),
        _ => {
            let br = match a.dtype {
                crate::spec::DType::Bf16 => t.flash_bf16_br,
                crate::spec::DType::F32 => t.flash_br,
            };
            let tr = n.div_ceil(br);
            let kv_head_bytes = 2 * n * d * elem;
            let kv_reads = if t.reuse_cache_bytes > 0 && kv_head_bytes <= t.reuse_cache_bytes / 4 {
                1
            } else if a.causal {
                tr.div_ceil(2).max(1)
            } else {
                tr
            };
            ledger(
                variant,
                vec![
                    mv("Q", qkvo, 1, 0),
                    mv("K", qkvo, kv_reads, 0),
                    mv("V", qkvo, kv_reads, 0),
                    mv("O", qkvo, 0, 1),
                ],
                flops,
                1,
            )
        }
    }
}

/// A chain of n small kernels: both variants run the same kernels and move the same bytes; they
/// differ in launches (dispatches): n eager, 1 replayed graph.
fn launch_chain(l: &LaunchChain, variant: Variant) -> VariantLedger {
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
    ledger(
        variant,
        movements,
        l.n_ops * l.elements * LAUNCH_OP_FLOPS,
        launches,
    )
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
    VariantLedger {
        variant,
        movements,
        flops,
        launches,
    }
}

/// The roofline model: `T = max(FLOPs/Peak, Bytes/BW)`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
    fn norms_and_softmax_save_their_intermediates() {
        let r = RowOp {
            rows: 8,
            cols: 16,
            dtype: DType::F32,
            eps: 1e-5,
        };
        let t = 8 * 16 * 4;
        let v = 8 * 4;
        let w = 16 * 4;
        let rms = Ledger::new(
            &Workload::Rmsnorm(r.clone()),
            Variant::Unfused,
            Variant::Fused,
        );
        assert_eq!(
            rms.before.bytes_moved(),
            2 * t + 2 * t + 2 * v + 2 * v + 2 * t + w + t
        );
        assert_eq!(rms.after.bytes_moved(), 2 * t + w);
        let sm = Ledger::new(
            &Workload::Softmax(r.clone()),
            Variant::Unfused,
            Variant::Fused,
        );
        assert_eq!(sm.before.bytes_moved(), 2 * t + 2 * v + 3 * t + 2 * v + t);
        assert_eq!(sm.after.bytes_moved(), 2 * t);
        let ln = Ledger::new(&Workload::Layernorm(r), Variant::Unfused, Variant::Fused);
        assert_eq!(ln.after.bytes_moved(), 2 * t + 2 * w);
        assert!(ln.io_saving() > rms.io_saving() * 0.9);
    }

    #[test]
    fn bf16_attention_moves_half_the_bytes_and_follows_the_bf16_tiles() {
        let at = |dtype| Attention {
            batch: 1,
            heads: 2,
            seq_len: 1024,
            head_dim: 128,
            dtype,
            causal: false,
        };
        let w = |dtype| Workload::Attention(at(dtype));
        let std32 = variant_ledger(&w(DType::F32), Variant::Standard);
        let std16 = variant_ledger(&w(DType::Bf16), Variant::Standard);
        assert_eq!(std16.bytes_moved() * 2, std32.bytes_moved());
        assert_eq!(std16.flops, std32.flops);
        // CUDA bf16 flash: Q + O once, K and V once per 64-row Q tile (1024/64 = 16).
        let qkvo = 2 * 1024 * 128 * 2;
        let f = variant_ledger_tiled(&w(DType::Bf16), Variant::Flash, Tiling::CUDA);
        assert_eq!(f.bytes_moved(), 2 * qkvo + 2 * 16 * qkvo);
        // With an L2 of 50 MiB one head's K and V (512 KiB) fit in a quarter: read once.
        let l2 = Tiling {
            reuse_cache_bytes: 50 << 20,
            ..Tiling::CUDA
        };
        let f = variant_ledger_tiled(&w(DType::Bf16), Variant::Flash, l2);
        assert_eq!(f.bytes_moved(), 4 * qkvo);
        // An L2 of 1 MiB is too small for that: the re-reads count again.
        let small = Tiling {
            reuse_cache_bytes: 1 << 20,
            ..Tiling::CUDA
        };
        let f = variant_ledger_tiled(&w(DType::Bf16), Variant::Flash, small);
        assert_eq!(f.bytes_moved(), 2 * qkvo + 2 * 16 * qkvo);
    }

    #[test]
    fn attention_standard_is_quadratic_flash_linear() {
        let at = |n, causal| Attention {
            batch: 1,
            heads: 2,
            seq_len: n,
            head_dim: 64,
            dtype: DType::F32,
            causal,
        };
        let bytes = |n, v| variant_ledger(&Workload::Attention(at(n, false)), v).bytes_moved();
        // Standard: doubling N roughly quadruples the bytes once N² dominates.
        let (s1, s2) = (
            bytes(4096, Variant::Standard),
            bytes(8192, Variant::Standard),
        );
        assert!(s2 as f64 / s1 as f64 > 3.9);
        // Flash with K,V re-read once per Q tile: bytes = Q+O + 2·(N/Br)·KV: grows as N²/Br,
        // but with a coefficient d/Br·... far below standard.
        let f1 = bytes(4096, Variant::Flash);
        assert!(f1 * 4 < s1, "{f1} vs {s1}");
        // FLOPs: 4·N²·d per head, halved when causal.
        let l = variant_ledger(&Workload::Attention(at(1024, false)), Variant::Flash);
        assert_eq!(l.flops, 4 * 2 * 1024 * 1024 * 64);
        let c = variant_ledger(&Workload::Attention(at(1024, true)), Variant::Flash);
        assert_eq!(c.flops, l.flops / 2);
    }

    #[test]
    fn cuda_tiling_rereads_more_than_the_cpu_tiles() {
        let a = Workload::Attention(Attention {
            batch: 1,
            heads: 2,
            seq_len: 4096,
            head_dim: 128,
            causal: false,
            dtype: DType::F32,
        });
        let qkvo = 2 * 4096 * 128 * 4;
        let cpu = Ledger::new(&a, Variant::Standard, Variant::Flash);
        let gpu = Ledger::with_tiling(&a, Variant::Standard, Variant::Flash, Tiling::CUDA);
        // Q read once, O written once, K and V once per Q tile: 4096/256 = 16 tiles on the CPU,
        // 4096/32 = 128 with the CUDA kernel's tiles.
        assert_eq!(cpu.after.bytes_moved(), qkvo * (2 + 2 * 16));
        assert_eq!(gpu.after.bytes_moved(), qkvo * (2 + 2 * 128));
        assert_eq!(cpu.before, gpu.before, "standard attention does not tile");
        let g = Workload::Gemm(Gemm {
            m: 1024,
            n: 1024,
            k: 1024,
            dtype: DType::F32,
        });
        let l = Ledger::with_tiling(&g, Variant::Naive, Variant::Tiled, Tiling::CUDA);
        let mat = 1024 * 1024 * 4;
        // A and B once per 64-wide block, C written once (accumulated in registers).
        assert_eq!(l.after.bytes_moved(), mat * 16 + mat * 16 + mat);
    }

    #[test]
    fn gemm_naive_rereads_b_tiled_by_blocks() {
        let g = Gemm {
            m: 1024,
            n: 1024,
            k: 1024,
            dtype: DType::F32,
        };
        let mat = 1024 * 1024 * 4;
        let naive = variant_ledger(&Workload::Gemm(g.clone()), Variant::Naive);
        assert_eq!(naive.bytes_moved(), mat + 1024 * mat + mat);
        let tiled = variant_ledger(&Workload::Gemm(g), Variant::Tiled);
        let expect = mat * 1024u64.div_ceil(GEMM_NC)
            + mat * 1024u64.div_ceil(GEMM_MC)
            + mat * (2 * 1024u64.div_ceil(GEMM_KC) - 1);
        assert_eq!(tiled.bytes_moved(), expect);
        assert_eq!(tiled.flops, 2 * 1024 * 1024 * 1024);
    }

    #[test]
    fn launch_chain_differs_only_in_launches() {
        let l = LaunchChain {
            n_ops: 200,
            elements: 4096,
            dtype: DType::F32,
        };
        let e = variant_ledger(&Workload::LaunchChain(l.clone()), Variant::Eager);
        let g = variant_ledger(&Workload::LaunchChain(l), Variant::Graph);
        assert_eq!(e.bytes_moved(), g.bytes_moved());
        assert_eq!((e.launches, g.launches), (200, 1));
    }

    #[test]
    fn probes_move_stream_bytes_and_fma_is_compute_bound() {
        let p = ProbeWorkload {
            elements: 1000,
            dtype: DType::F32,
        };
        let l = |v| variant_ledger(&Workload::Probe(p.clone()), v);
        assert_eq!(l(Variant::Copy).bytes_moved(), 8000);
        assert_eq!(l(Variant::Triad).bytes_moved(), 12000);
        assert_eq!(l(Variant::Triad).flops, 2000);
        assert_eq!(l(Variant::Fma).flops, 2 * PROBE_FMA_ITERS * 1000);
        assert!(l(Variant::Fma).intensity() > 50.0);
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
