//! `kind: gemm`: C[m×n] = A[m×k] · B[k×n], a textbook triple loop against a cache-blocked,
//! register-tiled kernel.

use super::tensors::{uniform, Tensors};
use super::{DType, FromRaw, Invalid, Kind, RawWorkload, Variant};
use crate::ledger::{mv, Tiling, VariantLedger};
use serde::{Deserialize, Serialize};

/// C[m×n] = A[m×k] · B[k×n].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Gemm {
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub dtype: DType,
}

impl FromRaw for Gemm {
    const KEYS: (&'static [&'static str], &'static [&'static str]) = (&["m", "n", "k"], &["dtype"]);
    fn from_raw(raw: &RawWorkload) -> Result<Self, Invalid> {
        raw.elements(&["m", "k"], "k")?;
        raw.elements(&["k", "n"], "n")?;
        raw.elements(&["m", "n"], "n")?;
        Ok(Gemm {
            m: raw.dim("m"),
            n: raw.dim("n"),
            k: raw.dim("k"),
            dtype: raw.dtype(),
        })
    }
}

impl Kind for Gemm {
    fn variants(&self) -> Vec<Variant> {
        vec![Variant::Naive, Variant::Tiled]
    }
    fn dtype(&self) -> DType {
        self.dtype
    }
    fn describe(&self) -> String {
        format!(
            "gemm {}x{}x{} {}",
            self.m,
            self.n,
            self.k,
            self.dtype.name()
        )
    }
    fn reduction_len(&self) -> u64 {
        self.k
    }
    fn ledger(&self, variant: Variant, tiling: &Tiling) -> VariantLedger {
        gemm_ledger(self, variant, tiling)
    }
    fn output_len(&self) -> u64 {
        self.m * self.n
    }
    fn output_name(&self) -> String {
        "C".into()
    }
    fn output_shape(&self) -> Vec<u64> {
        vec![self.m, self.n]
    }
    fn input_bytes(&self) -> u64 {
        4 * (self.m * self.k + self.k * self.n)
    }
    fn inputs(&self, seed: u64) -> Tensors {
        let (m, n, k) = (self.m as usize, self.n as usize, self.k as usize);
        let mut t = Tensors::new();
        t.put_shaped(
            "A",
            vec![self.m, self.k],
            uniform(m * k, seed, 0, -1.0, 1.0),
        );
        t.put_shaped(
            "B",
            vec![self.k, self.n],
            uniform(k * n, seed, 1, -1.0, 1.0),
        );
        t
    }
    fn reference(&self, t: &Tensors, _: Variant, idx: usize) -> f64 {
        let (a, b) = (t.get("A"), t.get("B"));
        let (n, k) = (self.n as usize, self.k as usize);
        let (i, j) = (idx / n, idx % n);
        (0..k)
            .map(|p| a[i * k + p] as f64 * b[p * n + j] as f64)
            .sum()
    }
}

/// GEMM. Naive (i, j, k loops): a row of A stays in cache across j, but B is streamed once per
/// row of C. Tiled: A is re-read once per NC-wide block column, B once per MC-tall block row, and
/// C is read back for every KC slice after the first; up to `gemm_decode_max_m` rows of A, the
/// decode product: A, B and C once each.
fn gemm_ledger(g: &Gemm, variant: Variant, t: &Tiling) -> VariantLedger {
    let (a, b, c) = (g.m * g.k * 4, g.k * g.n * 4, g.m * g.n * 4);
    let flops = 2 * g.m * g.n * g.k;
    match variant {
        Variant::Naive if t.gemm_packs && t.reuse_cache_bytes > 0 => {
            // The CPU's naive loop with a reuse cache: each row of C sweeps the whole of B (a
            // row of A and of C beside it), so B comes from memory once where it fits three
            // quarters of the cache, once per row of C where it exceeds the cache (an LRU
            // cache keeps none of a cyclic sweep larger than itself), and in between the
            // outcome is the replacement's.
            let rows = (g.k + g.n) * 4;
            let room = t.reuse_cache_bytes / 4 * 3;
            let (b_reads, near) = if b + rows <= room {
                (1, None)
            } else if b + rows > t.reuse_cache_bytes {
                (g.m, None)
            } else {
                (1, Some(b + rows))
            };
            VariantLedger::new(
                variant,
                vec![mv("A", a, 1, 0), mv("B", b, b_reads, 0), mv("C", c, 0, 1)],
                flops,
                1,
            )
            .with_tile_bytes(rows)
            .near_cache(near)
        }
        Variant::Naive => VariantLedger::new(
            variant,
            vec![mv("A", a, 1, 0), mv("B", b, g.m, 0), mv("C", c, 0, 1)],
            flops,
            1,
        ),
        _ if g.m <= t.gemm_decode_max_m => {
            // The decode product: A copied transposed (written once, re-read from cache), B
            // read once in 16-row stretches that the row groups after the first re-read from
            // L1, C's sums kept in cache across the stretches (a column block's at most 256 KiB)
            // and written once. One thread sums straight into C; several split B's rows and add
            // their partial sums at the end, a few m × n more that this model leaves out.
            VariantLedger::new(
                variant,
                vec![
                    mv("A", a, 1, 0),
                    mv("B", b, 1, 0),
                    mv("A transposed", a, 0, 1),
                    mv("C", c, 0, 1),
                ],
                flops,
                1,
            )
            .with_tile_bytes(a + c)
        }
        _ => {
            let k_slices = g.k.div_ceil(t.gemm_kc);
            let blocked = VariantLedger::new(
                variant,
                vec![
                    mv("A", a, g.n.div_ceil(t.gemm_nc), 0),
                    mv("B", b, g.m.div_ceil(t.gemm_mc), 0),
                    mv("C", c, k_slices - 1, k_slices),
                ],
                flops,
                1,
            );
            if !t.gemm_packs || t.reuse_cache_bytes == 0 {
                // Without a reuse cache every re-read of a packed panel is memory's: the
                // blocked model above.
                return blocked;
            }
            // The CPU kernel's buffers: one KC slice of A (every row), one KC×NC block of B,
            // and the C block a task writes; its working set is twice that (A's and B's rows
            // being packed and C's rows stream through the same cache). Where it fits the reuse
            // cache, the packed panels are re-read from it: memory sees A and B once (to pack
            // them), the buffers' first writes, and C once — or once a KC slice where C does
            // not fit beside the buffers.
            let (kc, nc) = (t.gemm_kc.min(g.k), t.gemm_nc.min(g.n));
            let (a_buf, b_buf) = (g.m * kc * 4, kc * nc * 4);
            let buffers = a_buf + b_buf + t.gemm_mc.min(g.m) * nc * 4;
            let tiles = 2 * buffers;
            if tiles > t.reuse_cache_bytes {
                return blocked.with_tile_bytes(tiles);
            }
            let (c_reads, c_writes) = if c + buffers <= t.reuse_cache_bytes {
                (0, 1)
            } else {
                (k_slices - 1, k_slices)
            };
            VariantLedger::new(
                variant,
                vec![
                    mv("A", a, 1, 0),
                    mv("B", b, 1, 0),
                    mv("A packed", a_buf, 0, 1),
                    mv("B packed", b_buf, 0, 1),
                    mv("C", c, c_reads, c_writes),
                ],
                flops,
                1,
            )
            .with_tile_bytes(tiles)
        }
    }
}
