//! `kind: attention`: scaled dot-product attention forward, O = softmax(QKᵀ/√d)·V per (batch,
//! head); standard (S and P materialized in memory) against flash (tiles, online softmax).

use super::tensors::{uniform, Tensors};
use super::{DType, FromRaw, Invalid, Kind, RawWorkload, Variant};
use crate::ledger::{mv, Tiling, VariantLedger};
use serde::{Deserialize, Serialize};

/// Scaled dot-product attention forward, O = softmax(QKᵀ/√d)·V per (batch, head).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Attention {
    pub batch: u64,
    pub heads: u64,
    pub seq_len: u64,
    pub head_dim: u64,
    pub causal: bool,
    pub dtype: DType,
}

impl Attention {
    pub fn heads_total(&self) -> u64 {
        self.batch * self.heads
    }
    /// The softmax scale 1/√d, in f32 as every kernel applies it.
    pub fn softmax_scale(&self) -> f32 {
        1.0 / (self.head_dim as f32).sqrt()
    }
    /// Elements of Q (and of K, V and O).
    pub fn qkv_elements(&self) -> u64 {
        self.heads_total() * self.seq_len * self.head_dim
    }
    /// Elements of S (and of P) of the standard variant.
    pub fn score_elements(&self) -> u64 {
        self.heads_total() * self.seq_len * self.seq_len
    }
    /// Of `tiles` tiles along one side of the score matrix, how many reach a tile of the other
    /// side: all of them, or about half when causal (those above the diagonal are skipped).
    fn tiles_reaching(&self, tiles: u64) -> u64 {
        if self.causal {
            tiles.div_ceil(2).max(1)
        } else {
            tiles
        }
    }
}

impl FromRaw for Attention {
    const KEYS: (&'static [&'static str], &'static [&'static str]) = (
        &["batch", "heads", "seq_len", "head_dim"],
        &["causal", "dtype"],
    );
    const DTYPES: &'static [DType] = &[DType::F32, DType::Bf16];
    fn from_raw(raw: &RawWorkload) -> Result<Self, Invalid> {
        raw.elements(&["batch", "heads", "seq_len", "head_dim"], "head_dim")?;
        let a = Attention {
            batch: raw.dim("batch"),
            heads: raw.dim("heads"),
            seq_len: raw.dim("seq_len"),
            head_dim: raw.dim("head_dim"),
            causal: raw.causal.unwrap_or(false),
            dtype: raw.dtype(),
        };
        if a.head_dim > 512 {
            return Err(Invalid::at(
                "head_dim",
                format!("workload.head_dim {}: at most 512 is supported", a.head_dim),
            ));
        }
        Ok(a)
    }
}

impl Kind for Attention {
    fn variants(&self) -> Vec<Variant> {
        vec![Variant::Standard, Variant::Flash]
    }
    fn dtype(&self) -> DType {
        self.dtype
    }
    fn describe(&self) -> String {
        format!(
            "attention b={} h={} N={} d={}{} {}",
            self.batch,
            self.heads,
            self.seq_len,
            self.head_dim,
            if self.causal { " causal" } else { "" },
            self.dtype.name()
        )
    }
    fn reduction_len(&self) -> u64 {
        self.seq_len.max(self.head_dim)
    }
    fn ledger(&self, variant: Variant, tiling: &Tiling) -> VariantLedger {
        attention_ledger(self, variant, tiling)
    }
    fn output_len(&self) -> u64 {
        self.qkv_elements()
    }
    fn output_name(&self) -> String {
        "O".into()
    }
    fn output_shape(&self) -> Vec<u64> {
        vec![self.batch, self.heads, self.seq_len, self.head_dim]
    }
    fn input_bytes(&self) -> u64 {
        3 * self.qkv_elements() * 4
    }
    /// Q, K and V; in bf16 workloads rounded to bf16 values, so that the f64 reference is
    /// computed from exactly the inputs a bf16 kernel reads.
    fn inputs(&self, seed: u64) -> Tensors {
        let n = self.qkv_elements() as usize;
        let mut t = Tensors::new();
        let shape = vec![self.batch, self.heads, self.seq_len, self.head_dim];
        t.put_shaped("Q", shape.clone(), uniform(n, seed, 0, -1.0, 1.0));
        t.put_shaped("K", shape.clone(), uniform(n, seed, 1, -1.0, 1.0));
        t.put_shaped("V", shape, uniform(n, seed, 2, -1.0, 1.0));
        if self.dtype == DType::Bf16 {
            t.round_to_bf16();
        }
        t
    }
    fn reference(&self, t: &Tensors, _: Variant, idx: usize) -> f64 {
        let (q, k, v) = (t.get("Q"), t.get("K"), t.get("V"));
        let (n, d) = (self.seq_len as usize, self.head_dim as usize);
        let (row, c) = (idx / d, idx % d);
        let (h, i) = (row / n, row % n);
        let last = if self.causal { i + 1 } else { n };
        let qi = &q[(h * n + i) * d..(h * n + i + 1) * d];
        let scores: Vec<f64> = (0..last)
            .map(|j| {
                let kj = &k[(h * n + j) * d..(h * n + j + 1) * d];
                qi.iter()
                    .zip(kj)
                    .map(|(a, b)| *a as f64 * *b as f64)
                    .sum::<f64>()
                    / (d as f64).sqrt()
            })
            .collect();
        let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
        let z: f64 = w.iter().sum();
        (0..last)
            .map(|j| w[j] * v[(h * n + j) * d + c] as f64)
            .sum::<f64>()
            / z
    }
    fn reference_samples(&self) -> usize {
        // Each reference element costs O(N·d): sample fewer than for cheap kernels.
        256
    }
}

/// Attention forward per (batch, head), FLOPs by the FlashAttention convention: 4·N²·d (QKᵀ and
/// PV), halved when causal. Standard materializes S and P (N² each) in memory; flash keeps them
/// in the tile and re-reads K and V once per Q tile of Br rows (about half as often when
/// causal, since tiles above the diagonal are skipped).
fn attention_ledger(a: &Attention, variant: Variant, t: &Tiling) -> VariantLedger {
    let (bh, n, d) = (a.heads_total(), a.seq_len, a.head_dim);
    // Every tensor in the workload's dtype: bf16 standard attention stores S and P in bf16 too
    // (its softmax reads and writes bf16), as framework eager attention does.
    let elem = a.dtype.bytes();
    let qkvo = bh * n * d * elem;
    let s = bh * n * n * elem;
    let full = 4 * bh * n * n * d;
    let flops = if a.causal { full / 2 } else { full };
    if t.attention_packs_kv {
        return cpu_ledger(a, variant, t, flops);
    }
    match variant {
        Variant::Standard => VariantLedger::new(
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
            // The GPU's kernels read K and V where they are: once per query tile, from memory
            // unless one head's K and V take at most a quarter of the reuse cache (its L2).
            let br = match a.dtype {
                DType::Bf16 => t.flash_bf16_br,
                DType::F32 => t.flash_br,
            };
            let kv_head_bytes = 2 * n * d * elem;
            let fits = t.reuse_cache_bytes > 0 && kv_head_bytes <= t.reuse_cache_bytes / 4;
            let kv_reads = if fits {
                1
            } else {
                a.tiles_reaching(n.div_ceil(br))
            };
            let ledger = VariantLedger::new(
                variant,
                vec![
                    mv("Q", qkvo, 1, 0),
                    mv("K", qkvo, kv_reads, 0),
                    mv("V", qkvo, kv_reads, 0),
                    mv("O", qkvo, 0, 1),
                ],
                flops,
                1,
            );
            // With a reuse cache the ledger predicts the re-reads (held two-sided by counts):
            // a block's tiles (its Q rows, a K and a V tile) live in shared memory, far under
            // any L2.
            if t.reuse_cache_bytes > 0 {
                let bc = match a.dtype {
                    DType::Bf16 => t.flash_bf16_bc,
                    DType::F32 => t.flash_bc,
                };
                ledger.with_tile_bytes((br + 2 * bc) * d * elem)
            } else {
                ledger
            }
        }
    }
}

/// How often a tiled pass re-reads an operand from memory, with the reuse cache `cache_bytes`
/// (0: none): not at all where the `tiles` and every head's copy (`all_bytes`) take at most
/// three quarters of it, once where one head's (`head_bytes`) do, at every tile (`tiles_over`)
/// where the tiles and one head's copy exceed it; and between, the working set that leaves the
/// outcome to the cache's replacement (the nearer count is taken, and the working set named).
fn re_read_count(
    cache_bytes: u64,
    tiles: u64,
    all_bytes: u64,
    head_bytes: u64,
    tiles_over: u64,
) -> (u64, Option<u64>) {
    let room = cache_bytes / 4 * 3;
    if cache_bytes == 0 || tiles + head_bytes > cache_bytes {
        (tiles_over, None)
    } else if tiles + all_bytes <= room {
        (0, None)
    } else if tiles + head_bytes <= room {
        (1, None)
    } else {
        (1, Some(tiles + head_bytes))
    }
}

/// The CPU kernels' ledgers. Both pack K and V once a call into the micro-kernel's panels (K
/// and V read once, the packed copies written once) and re-read the packed copies once per
/// query tile of `FLASH_BR` rows — from memory unless the reuse cache holds them beside what
/// streams between two reads ([`re_read_count`]).
///
/// Standard: pass 1 writes a query tile's S rows (Br × N) between two reads of the packed K;
/// pass 3 reads the tile's P rows while it accumulates the output rows over the key tiles, and
/// the P rows streaming through evict them: each output block is read back once per key tile
/// after the first (measured under the simulator: ×0.98–1.04 of this ledger at N = 1024–2048,
/// d = 64, a 1 MiB last level; docs/counts.md). Its scratch: packed Q and packed P.
///
/// Flash: one worker's tiles (packed Q, the score tile, packed P) written once — a cold call's
/// first touches of them — and nothing streams between the packed K and V reads but the tiles.
fn cpu_ledger(a: &Attention, variant: Variant, t: &Tiling, flops: u64) -> VariantLedger {
    let (bh, n, d) = (a.heads_total(), a.seq_len, a.head_dim);
    let elem = a.dtype.bytes();
    let qkvo = bh * n * d * elem;
    let s = bh * n * n * elem;
    let (br, bc) = (t.flash_br, t.flash_bc);
    let (r, c) = (br.min(n), bc.min(n));
    let (tr, tc) = (
        a.tiles_reaching(n.div_ceil(br)),
        a.tiles_reaching(n.div_ceil(bc)),
    );
    // What both kernels move to pack K and V and re-read the packed copies, then `rest`.
    let with_packed_kv = |kv_reads: u64, rest: Vec<crate::ledger::Movement>| {
        let mut movements = vec![
            mv("Q", qkvo, 1, 0),
            mv("K", qkvo, 1, 0),
            mv("V", qkvo, 1, 0),
            mv("K packed", qkvo, kv_reads, 1),
            mv("V packed", qkvo, kv_reads, 1),
        ];
        movements.extend(rest);
        movements
    };
    match variant {
        Variant::Standard => {
            // Packed Q and packed P of one task, and the key (value) tile it multiplies by.
            let scratch = (r * d + r * c) * elem;
            let tiles = scratch + c * d * elem;
            // What streams between two reads of the packed K: a query tile's S rows.
            let stream = tiles + r * n * elem;
            let (kv_reads, near) =
                re_read_count(t.reuse_cache_bytes, stream, 2 * qkvo, 2 * n * d * elem, tr);
            let (o_reads, o_writes) = if kv_reads > 1 { (tc - 1, tc) } else { (0, 1) };
            VariantLedger::new(
                variant,
                with_packed_kv(
                    kv_reads,
                    vec![
                        mv("S", s, 1, 1),
                        mv("P", s, 1, 1),
                        mv("O", qkvo, o_reads, o_writes),
                    ],
                ),
                flops,
                3,
            )
            .with_tile_bytes(tiles)
            .near_cache(near)
        }
        _ => {
            let scratch = (r * d + 2 * r * c) * elem;
            let tiles = scratch + 2 * c * d * elem;
            let (kv_reads, near) =
                re_read_count(t.reuse_cache_bytes, tiles, 2 * qkvo, 2 * n * d * elem, tr);
            VariantLedger::new(
                variant,
                with_packed_kv(
                    kv_reads,
                    vec![mv("tiles", scratch, 0, 1), mv("O", qkvo, 0, 1)],
                ),
                flops,
                1,
            )
            .with_tile_bytes(tiles)
            .near_cache(near)
        }
    }
}
