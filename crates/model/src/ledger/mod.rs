//! The analytic IO ledger: FLOPs and the bytes each variant moves through device memory.
//!
//! Pure arithmetic, no I/O. Conventions (documented in docs/ledger.md):
//! - a tensor "moves" each time a kernel reads it from or writes it to device memory; the ledger
//!   lists every tensor with its size and how many times it is read and written. Write-allocate
//!   (read-for-ownership) traffic of CPU caches is not counted: the ledger models device memory.
//! - unfused chains write every intermediate once and read it once; fused chains move only their
//!   inputs and the output.
//! - FLOPs: add, mul, max and divide count 1 each; a special function (exp, tanh, erf, rsqrt)
//!   counts [`SPECIAL_FN_FLOPS`] — one SFU instruction on a GPU. A CPU evaluates it as a
//!   polynomial of ~15 operations, which the measured bound (not the ledger) reveals.

use crate::values::Variant;
use serde::{Deserialize, Serialize};

/// FLOPs charged for one special-function evaluation (exp, tanh, erf, rsqrt).
pub const SPECIAL_FN_FLOPS: u64 = 1;

/// One tensor's traffic through device memory in one execution of a variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Movement {
    pub tensor: String,
    pub bytes: u64,
    pub reads: u64,
    pub writes: u64,
}

impl Movement {
    /// Saturating: a ledger that would overflow (refused when a spec is validated) reads as
    /// the largest count, never as a wrapped small one.
    pub fn traffic_bytes(&self) -> u64 {
        self.bytes
            .saturating_mul(self.reads.saturating_add(self.writes))
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
    /// A tiled kernel's working set (its tiles and scratch, one worker's), where its re-reads
    /// decide its bytes: the ledger predicts them for a reuse cache that holds the tiles, and
    /// says nothing where the tiles do not fit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tile_bytes: Option<u64>,
    /// The working set (tiles and the operands they re-read) where it comes within a quarter
    /// of the reuse cache without exceeding it: whether the re-reads hit the cache is then up
    /// to its replacement, which the ledger does not model, and counts are not held to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub near_cache_bytes: Option<u64>,
}

impl VariantLedger {
    pub fn new(variant: Variant, movements: Vec<Movement>, flops: u64, launches: u64) -> Self {
        VariantLedger {
            variant,
            movements,
            flops,
            launches,
            tile_bytes: None,
            near_cache_bytes: None,
        }
    }
    /// The same ledger, of a tiled kernel whose working set is `bytes`.
    pub fn with_tile_bytes(self, bytes: u64) -> Self {
        VariantLedger {
            tile_bytes: Some(bytes),
            ..self
        }
    }
    /// The same ledger, whose re-reads are undecided in a working set of `bytes` (see
    /// [`VariantLedger::near_cache_bytes`]).
    pub fn near_cache(self, bytes: Option<u64>) -> Self {
        VariantLedger {
            near_cache_bytes: bytes,
            ..self
        }
    }
    pub fn bytes_moved(&self) -> u64 {
        self.movements
            .iter()
            .map(Movement::traffic_bytes)
            .fold(0u64, u64::saturating_add)
    }
    /// The traffic no cache can spare a cold run: its inputs (tensors it reads and never writes)
    /// read once and its output written once, as (read bytes, write bytes); `None` where the
    /// ledger has no input or does not hold `output`.
    pub fn compulsory_bytes(&self, output: &str) -> Option<(u64, u64)> {
        let out = self.movements.iter().find(|m| m.tensor == output)?;
        let read = self
            .movements
            .iter()
            .filter(|m| m.reads > 0 && m.writes == 0)
            .map(|m| m.bytes)
            .fold(0u64, u64::saturating_add);
        (read > 0).then_some((read, out.bytes))
    }
    /// Arithmetic intensity, FLOP per byte moved.
    pub fn intensity(&self) -> f64 {
        self.flops as f64 / self.bytes_moved().max(1) as f64
    }
}

/// What one variant's kernels really execute on the SIMD level a backend runs them at, where
/// that differs from the nominal count above: a special function costs its polynomial there,
/// not [`SPECIAL_FN_FLOPS`], and the compares, clamps and exponent-bit arithmetic around it
/// are instructions too.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Executed {
    /// The level the kernels ran at (`avx2+fma`, `avx512f`).
    pub level: String,
    /// f32 lanes of one vector at that level.
    pub lanes: u64,
    /// FLOPs of the instructions issued: a fused multiply-add counts 2 per lane, every other
    /// arithmetic, compare, logic or integer vector instruction 1 per lane.
    pub flops: u64,
    /// Vector arithmetic instructions issued (loads, stores and prefetches not counted: they
    /// go to the load/store units, not the FP pipes).
    pub vector_instructions: u64,
}

impl Executed {
    /// `vectors` vectors of `lanes` lanes at `level`, each issuing `instructions` vector
    /// instructions of `flops_per_lane` FLOPs per lane in all.
    pub fn of_vectors(
        level: &str,
        lanes: u64,
        vectors: u64,
        (instructions, flops_per_lane): (u64, u64),
    ) -> Executed {
        Executed {
            level: level.into(),
            lanes,
            flops: vectors.saturating_mul(lanes).saturating_mul(flops_per_lane),
            vector_instructions: vectors.saturating_mul(instructions),
        }
    }
}

/// The ledger of a spec: both variants.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Ledger {
    pub before: VariantLedger,
    pub after: VariantLedger,
}

impl Ledger {
    /// 1 − bytes(after)/bytes(before).
    pub fn io_saving(&self) -> f64 {
        1.0 - self.after.bytes_moved() as f64 / self.before.bytes_moved().max(1) as f64
    }
}

/// Blocking of the tiled GEMM (the CPU kernel uses these): C is computed in MC×NC blocks over KC
/// slices of k, with A and B packed per block. KC is 512, not the 256 whose B micro-panel would
/// fit a 48 KiB L1 at AVX-512's 32 columns: a k step's 24 multiply-adds outlast the 128 bytes
/// of B it loads even from L2, and half the slices are half the passes over C (the two timed
/// side by side at both SIMD levels: `cargo bench --bench kernels -- blocks`,
/// docs/performance.md).
pub const GEMM_MC: u64 = 128;
pub const GEMM_NC: u64 = 512;
pub const GEMM_KC: u64 = 512;
/// Rows of A up to which the CPU's tiled GEMM runs as a decode product: B streamed once against
/// A's rows held transposed, the sums in cache (`crates/cpu/src/gemm/decode.rs`).
pub const GEMM_DECODE_MAX_M: u64 = 16;
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
    /// Flash attention in bf16: K/V rows per tile.
    pub flash_bf16_bc: u64,
    /// The tiled GEMM packs each KC slice of A (all of its rows) and each KC×NC block of B into
    /// buffers it re-reads (the CPU kernel); a GPU's kernel reads its tiles in place.
    pub gemm_packs: bool,
    /// Rows of A up to which the tiled GEMM is a decode product instead (0: never): A held
    /// transposed, B read once, C written once, nothing packed (the CPU kernel).
    pub gemm_decode_max_m: u64,
    /// Attention (flash and standard alike) packs K and V once a call into the micro-kernel's
    /// panels and re-reads the packed copies (the CPU kernels); a GPU's kernels read K and V
    /// where they are.
    pub attention_packs_kv: bool,
    /// A cache between the tiles and device memory that serves re-reads (a GPU's L2), in
    /// bytes; 0 models none. Flash attention's K and V are re-read once per query tile; when
    /// one head's K and V take at most a quarter of it, the re-reads hit it and device memory
    /// sees K and V once (the blocks in flight at any time work on a head or two, so a quarter
    /// leaves room for them and the streaming Q and O).
    pub reuse_cache_bytes: u64,
}

impl Tiling {
    /// The CPU kernels (`crates/cpu/src/{gemm,attention}.rs` use these constants).
    pub const CPU: Tiling = Tiling {
        gemm_mc: GEMM_MC,
        gemm_nc: GEMM_NC,
        gemm_kc: GEMM_KC,
        flash_br: FLASH_BR,
        flash_bc: FLASH_BC,
        // The CPU backend runs f32 only; bf16 specs are refused before they are measured.
        flash_bf16_br: FLASH_BR,
        flash_bf16_bc: FLASH_BC,
        gemm_packs: true,
        gemm_decode_max_m: GEMM_DECODE_MAX_M,
        attention_packs_kv: true,
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
        flash_bf16_bc: 64,
        gemm_packs: false,
        gemm_decode_max_m: 0,
        attention_packs_kv: false,
        // The device's L2 is filled in by the CUDA backend (`opledger ledger --tiling cuda`
        // shows the model without it: every re-read from device memory).
        reuse_cache_bytes: 0,
    };
}

/// One tensor's movement: `reads` and `writes` of `bytes` each.
pub fn mv(tensor: &str, bytes: u64, reads: u64, writes: u64) -> Movement {
    Movement {
        tensor: tensor.into(),
        bytes,
        reads,
        writes,
    }
}

/// Which ceiling bounds a kernel (roofline).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    Bandwidth,
    Compute,
}

impl Bound {
    /// The roofline's rule: compute-bound when the compute takes longer than the memory.
    pub fn of_times(compute_secs: f64, memory_secs: f64) -> Bound {
        if compute_secs > memory_secs {
            Bound::Compute
        } else {
            Bound::Bandwidth
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Bound::Bandwidth => "bandwidth",
            Bound::Compute => "compute",
        }
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
        bound: Bound::of_times(compute_secs, memory_secs),
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
