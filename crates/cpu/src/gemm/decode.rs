//! The decode product: C = A·B for a handful of rows of A, where the time is B's read from
//! memory, not a micro-kernel's FMAs.

use super::*;

/// Rows of A up to which the tiled variant runs as a decode product (a matrix–vector product
/// in all but name: the time is B's read from memory, not the FMAs of a micro-kernel).
pub const DECODE_MAX_M: usize = crate::ledger::GEMM_DECODE_MAX_M as usize;
/// Bytes of accumulators a decode task keeps (in L1): m rows × as many columns as fit.
const DECODE_ACC_BYTES: usize = 16 << 10;
/// Rows of A from which the decode path runs the register kernels (below it the accumulators
/// in L1 cost nothing: B's read from memory sets the time).
const REGISTER_DECODE_MIN_M: usize = 2;

multiversion! {
    /// acc[i·w + j] += Σ_p at[p·m + i] · b[p·ld + j0 + j] over the rows p0..p0 + rows of B
    /// (`shape` = [m, ld, j0, w], `span` = [p0, rows]), four rows at a time (one load and
    /// store of the accumulators per four fused multiply-adds); `w` columns from `j0`.
    fn decode_rows(acc: &mut [f32], at: &[f32], b: &[f32], shape: [usize; 4], span: [usize; 2]) {
        let [m, ld, j0, w] = shape;
        let [p0, rows] = span;
        let mut p = p0;
        let end = p0 + rows;
        while p + 4 <= end {
            let (b0, b1, b2, b3) = (
                &b[p * ld + j0..p * ld + j0 + w],
                &b[(p + 1) * ld + j0..(p + 1) * ld + j0 + w],
                &b[(p + 2) * ld + j0..(p + 2) * ld + j0 + w],
                &b[(p + 3) * ld + j0..(p + 3) * ld + j0 + w],
            );
            for i in 0..m {
                let (a0, a1, a2, a3) = (at[p * m + i], at[(p + 1) * m + i], at[(p + 2) * m + i], at[(p + 3) * m + i]);
                let row = &mut acc[i * w..(i + 1) * w];
                for j in 0..w {
                    // The level's multiply-adds (fused: one rounding each), row p's first.
                    let v = M::f32(a0, b0[j], row[j]);
                    let v = M::f32(a1, b1[j], v);
                    let v = M::f32(a2, b2[j], v);
                    row[j] = M::f32(a3, b3[j], v);
                }
            }
            p += 4;
        }
        while p < end {
            let br = &b[p * ld + j0..p * ld + j0 + w];
            for i in 0..m {
                let a = at[p * m + i];
                let row = &mut acc[i * w..(i + 1) * w];
                for j in 0..w {
                    row[j] = M::f32(a, br[j], row[j]);
                }
            }
            p += 1;
        }
    }
}

/// Rows of B a register decode kernel takes in one call, walking B's rows side by side across
/// a task's columns: that many sequential streams, each row read line after line, which the
/// hardware prefetchers follow (they track a few dozen streams; 64 rows at a time measured 2–3×
/// slower, 8 rows paid the accumulators' load and store too often, docs/performance.md).
const STREAM_ROWS: usize = 16;
/// The narrowest column block a decode task takes: a 4 KiB page of each row of B, so that each
/// row is read as one sequential run the prefetchers follow to its end.
const STREAM_MIN_COLS: usize = 1024;

/// Bytes of sums a decode task keeps across its column block: loaded and stored once a stretch
/// of [`STREAM_ROWS`] rows, they stay in L2 — an eighth of a 2 MiB one, a quarter of a 1 MiB
/// one. A constant, not the machine's L2: a counted side must run the same code
/// path on every machine (its blocks decide the order B is read in, and so the simulated
/// misses).
const STREAM_SUMS_BYTES: usize = 256 << 10;

/// Columns of the blocks decode tasks take, for m rows of A: the task's m × w sums within
/// [`STREAM_SUMS_BYTES`], at least [`STREAM_MIN_COLS`], a multiple of 64 columns (so of every
/// kernel's width, and only the last block has a tail), and no wider than B.
fn stream_block_cols(m: usize, n: usize) -> usize {
    let w = (STREAM_SUMS_BYTES / 4 / m.max(1)).max(STREAM_MIN_COLS) / 64 * 64;
    w.min(n).max(1)
}

/// A register-blocked decode kernel: `c[i·ldc + j] += Σ_p at[p·lda + i] · b[p·ldb + j]` for
/// i < rows ≤ its R and j < its NV·LANES columns, over kc rows of B, the accumulators held in
/// registers across the rows (one load of B's row piece, R broadcasts of A and R·NV fused
/// multiply-adds a row), then added to C's values.
///
/// # Safety
/// V's features are enabled; `at` is readable at p·lda + i and `b` at p·ldb + j for p < kc,
/// i < rows, j < NV·LANES; `c` is writable at i·ldc + j for the same i and j.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn decode_micro<
    V: crate::lanes::Lanes,
    const R: usize,
    const NV: usize,
    const ACC: usize,
>(
    kc: usize,
    (at, lda): (*const f32, usize),
    (b, ldb): (*const f32, usize),
    (c, ldc): (*mut f32, usize),
    rows: usize,
) {
    debug_assert_eq!(ACC, R * NV);
    debug_assert!(rows <= R);
    // SAFETY (all below): V's features are enabled; the caller's contract bounds every
    // address read or written (p < kc, i < rows, h < NV).
    let mut acc = [unsafe { V::splat(0.0) }; ACC];
    for p in 0..kc {
        unsafe {
            let mut bv = [V::splat(0.0); NV];
            for (h, v) in bv.iter_mut().enumerate() {
                *v = V::load(b.add(p * ldb + h * V::LANES));
            }
            for i in 0..R {
                if i < rows {
                    let a = V::splat(*at.add(p * lda + i));
                    for h in 0..NV {
                        acc[i * NV + h] = V::fmadd(a, bv[h], acc[i * NV + h]);
                    }
                }
            }
        }
    }
    for i in 0..R {
        if i < rows {
            for h in 0..NV {
                unsafe {
                    let dst = c.add(i * ldc + h * V::LANES);
                    V::store(dst, V::add(V::load(dst), acc[i * NV + h]));
                }
            }
        }
    }
}

/// The m rows of A in groups of at most `r` for a register kernel of `r` rows: as few groups
/// as that allows, their sizes within one of each other (m = 8 under AVX2's 6-row kernel: 4 +
/// 4, not 6 + 2). A group of g rows keeps 2g accumulators in flight, and below four rows
/// (eight accumulators, a fused multiply-add's latency times its two ports) it cannot keep
/// the FMA ports busy: a 2-row remainder costs as long as a 4-row group. Yields (first row,
/// rows). Every row's sums are the same whatever its group.
fn row_groups(m: usize, r: usize) -> impl Iterator<Item = (usize, usize)> {
    let groups = m.div_ceil(r.max(1)).max(1);
    let (base, extra) = (m / groups, m % groups);
    (0..groups).scan(0, move |start, g| {
        let rows = base + usize::from(g < extra);
        let first = *start;
        *start += rows;
        Some((first, rows))
    })
}

/// The arguments of a decode kernel: kc, (at, lda), (b, ldb), (c, ldc), rows.
type DecodeFn =
    unsafe fn(usize, (*const f32, usize), (*const f32, usize), (*mut f32, usize), usize);

/// AVX-512: 8 rows × 32 columns, 16 zmm accumulators.
///
/// # Safety
/// The CPU supports avx512f; [`decode_micro`]'s bounds with R = 8, 32 columns.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn decode_avx512(
    kc: usize,
    a: (*const f32, usize),
    b: (*const f32, usize),
    c: (*mut f32, usize),
    rows: usize,
) {
    // SAFETY: compiled with avx512f; the caller's bounds are decode_micro's.
    unsafe { decode_micro::<std::arch::x86_64::__m512, 8, 2, 16>(kc, a, b, c, rows) }
}

/// AVX2: 6 rows × 16 columns, 12 ymm accumulators (with B's two and A's broadcast, 15 of the
/// 16 registers). `V` is `__m256` (FMA) or [`crate::lanes::NoFma256`] (the `avx2-nofma` level).
///
/// # Safety
/// The CPU supports avx2 and fma; [`decode_micro`]'s bounds with R = 6, 16 columns.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn decode_avx2<V: crate::lanes::Lanes>(
    kc: usize,
    a: (*const f32, usize),
    b: (*const f32, usize),
    c: (*mut f32, usize),
    rows: usize,
) {
    // SAFETY: compiled with avx2 and fma, which V's methods need; the caller's bounds are
    // decode_micro's.
    unsafe { decode_micro::<V, 6, 2, 12>(kc, a, b, c, rows) }
}

/// A level's register decode kernel.
#[derive(Clone, Copy)]
struct DecodeKernel {
    f: DecodeFn,
    /// Rows of A and columns of B it holds in registers.
    rows: usize,
    cols: usize,
}

/// The register decode kernel of level `l`, where the level has one.
fn decode_kernel(l: SimdLevel) -> Option<DecodeKernel> {
    assert!(supports(l), "this CPU lacks {}", l.name());
    match l {
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx512 => Some(DecodeKernel {
            f: decode_avx512,
            rows: 8,
            cols: 32,
        }),
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx2Fma => Some(DecodeKernel {
            f: decode_avx2::<std::arch::x86_64::__m256>,
            rows: 6,
            cols: 16,
        }),
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx2NoFma => Some(DecodeKernel {
            f: decode_avx2::<crate::lanes::NoFma256>,
            rows: 6,
            cols: 16,
        }),
        _ => None,
    }
}

/// Buffers a decode product keeps between runs (their pages faulted in once, not at every
/// product): A transposed, and the row splits' partial sums.
#[derive(Default)]
pub(super) struct DecodeScratch {
    at: Vec<f32>,
    partial: Vec<f32>,
}

impl DecodeScratch {
    /// A transposed and the row splits' sums, kept between runs.
    pub(super) fn buffers(&self) -> [&[f32]; 2] {
        [&self.at, &self.partial]
    }
}

/// A decode product's split of the work: column blocks `w` wide (`blocks` of them) × row splits
/// of B (`splits` of `rows_per_split` rows), one task each.
struct DecodeSplit {
    w: usize,
    blocks: usize,
    splits: usize,
    rows_per_split: usize,
}

impl DecodeSplit {
    /// Enough tasks for every thread several times over, none with fewer than 64 rows of B.
    fn new(w: usize, n: usize, k: usize) -> Self {
        let blocks = n.div_ceil(w.max(1));
        let threads = rayon::current_num_threads();
        // One thread: no split (a split only spreads B's rows over threads, and costs its own
        // m × n of sums, written and added back: traffic the ledger's decode product has not).
        let splits = if threads < 2 {
            1
        } else {
            (4 * threads).div_ceil(blocks).min(k.div_ceil(64)).max(1)
        };
        DecodeSplit {
            w,
            blocks,
            splits,
            rows_per_split: k.div_ceil(splits),
        }
    }
}

impl GemmKernels {
    /// C = A·B for m ≤ [`DECODE_MAX_M`]: B streamed once from memory against the m rows of A
    /// held transposed (k × m, a few hundred KiB at most). Tasks take a column block and a
    /// range of B's rows; with several threads and few column blocks the rows are split among
    /// tasks, each summing into its own m × n ([`DecodeScratch::partial`]), added at the end.
    ///
    /// From m = 2 on AVX-512 and AVX2 register kernels take it: 8 (6) rows of A × 32 (16)
    /// columns of accumulators held in registers ([`Self::decode_streamed`]). Otherwise (m = 1,
    /// the other levels) and for the column tail narrower than a kernel, the L1 accumulator loop
    /// ([`decode_rows`]) on blocks as wide as m × w sums fit in L1 (w = 4096 at m = 1). The
    /// micro-kernel path would pack all of B and compute on whole 12- or 6-row panels of A for a
    /// handful of rows.
    pub(super) fn decode(&mut self, l: SimdLevel, c: &mut [f32]) {
        let (m, n, k) = (self.g.m as usize, self.g.n as usize, self.g.k as usize);
        let mut scratch = std::mem::take(&mut self.decode);
        let a = self.inputs.get("A");
        scratch.at.resize(k * m, 0.0);
        for i in 0..m {
            for p in 0..k {
                scratch.at[p * m + i] = a[i * k + p];
            }
        }
        let kernel = decode_kernel(l).filter(|d| n >= d.cols && m >= REGISTER_DECODE_MIN_M);
        match kernel {
            Some(d) => self.decode_streamed(d, &mut scratch, c),
            None => self.decode_l1(&mut scratch, c),
        }
        self.decode = scratch;
    }

    /// The register kernels' decode product. Each task walks its rows of B [`STREAM_ROWS`] at
    /// a time, and those rows side by side across its column block, tile by tile: every group
    /// of A's rows ([`row_groups`]) runs the level's kernel on the tile (the groups after the
    /// first re-read it from L1), adding into the task's sums. Each row of B is thus read from
    /// start to end of the block, a page of it at least ([`STREAM_MIN_COLS`]), as sequential
    /// streams that the hardware prefetchers follow; a kernel walking one tile down all of B's
    /// rows would stride by a whole row at each step, a new page each time, which no prefetcher
    /// follows (it ran at a third to a half of the memory's bandwidth, docs/performance.md).
    fn decode_streamed(&self, kernel: DecodeKernel, scratch: &mut DecodeScratch, c: &mut [f32]) {
        let (kern, r, nr) = (kernel.f, kernel.rows, kernel.cols);
        let (m, n, k) = (self.g.m as usize, self.g.n as usize, self.g.k as usize);
        let b = self.inputs.get("B");
        let DecodeSplit {
            w,
            blocks,
            splits,
            rows_per_split,
        } = DecodeSplit::new(stream_block_cols(m, n), n, k);
        // With several splits, each sums into its own m rows in `partial`, a line longer than a
        // whole number of lines: n = 4096 floats apart, every row of a tile's sums fell in the
        // same L1 set as the others and as B's rows (also 16 KiB apart), and a call's loads of
        // them missed L1 (docs/performance.md). With one, straight into C (n apart).
        let (sums, off, ldp) = if splits > 1 {
            let ldp = n.next_multiple_of(16) + 16;
            // Room from the first line boundary (up to 15 floats in): sized first, so that
            // the boundary is the final buffer's.
            scratch.partial.resize(splits * m * ldp + 15, 0.0);
            let off = scratch.partial.as_ptr().align_offset(64).min(15);
            (CPtr(scratch.partial.as_mut_ptr()), off, ldp)
        } else {
            (CPtr(c.as_mut_ptr()), 0, n)
        };
        let at = &scratch.at;
        (0..blocks * splits).into_par_iter().for_each(|task| {
            let (blk, s) = (task / splits, task % splits);
            let (j0, p0) = (blk * w, s * rows_per_split);
            let (wb, end) = (w.min(n - j0), (p0 + rows_per_split).min(k));
            // Split s's own m rows of sums (ldp apart): C's, or in `partial` on a line boundary.
            let base = off + s * m * ldp;
            // SAFETY: task (blk, s) alone touches columns j0..j0 + wb ≤ n ≤ ldp of the m rows
            // of split s's sums (C, or in `partial`, sized above), each task index visited
            // once.
            let row = |i: usize| unsafe {
                std::slice::from_raw_parts_mut(sums.at(base + i * ldp + j0), wb)
            };
            for i in 0..m {
                row(i).fill(0.0);
            }
            let full = wb / nr * nr;
            let mut pc = p0;
            while pc < end {
                let kc = STREAM_ROWS.min(end - pc);
                for jt in (0..full).step_by(nr) {
                    for (ig, rows) in row_groups(m, r) {
                        // SAFETY: the level's kernel (decode_kernel asserted the CPU has it);
                        // rows pc..pc + kc ≤ k of `at` (k × m) from column ig, `rows` of them
                        // (ig + rows ≤ m); B's rows pc.. at columns j0 + jt.. + nr ≤ j0 + wb ≤
                        // n; the split's sums at rows ig.. and the same columns, this task's alone
                        // (as `row` above).
                        unsafe {
                            kern(
                                kc,
                                (at.as_ptr().add(pc * m + ig), m),
                                (b.as_ptr().add(pc * n + j0 + jt), n),
                                (sums.at(base + ig * ldp + j0 + jt), ldp),
                                rows,
                            )
                        };
                    }
                }
                pc += kc;
            }
            if full < wb && end > p0 {
                let tw = wb - full;
                let mut tail = vec![0f32; m * tw];
                decode_rows(&mut tail, at, b, [m, n, j0 + full, tw], [p0, end - p0]);
                for i in 0..m {
                    row(i)[full..].copy_from_slice(&tail[i * tw..(i + 1) * tw]);
                }
            }
        });
        if splits > 1 {
            add_splits(c, &scratch.partial[off..], [m, n, ldp], splits);
        }
    }

    /// The L1 accumulator loop's decode product ([`decode_rows`]): a task's m × w sums in L1
    /// (w = 4096 at m = 1, 256 at m = 16), its column block's rows read four at a time.
    fn decode_l1(&self, scratch: &mut DecodeScratch, c: &mut [f32]) {
        let (m, n, k) = (self.g.m as usize, self.g.n as usize, self.g.k as usize);
        let b = self.inputs.get("B");
        let w_max = (DECODE_ACC_BYTES / 4 / m.max(1)) / 16 * 16;
        let DecodeSplit {
            w,
            blocks,
            splits,
            rows_per_split,
        } = DecodeSplit::new(w_max.max(16).min(n.max(1)), n, k);
        if splits > 1 {
            scratch.partial.resize(splits * m * n, 0.0);
        }
        let at = &scratch.at;
        let (cp, pp) = (CPtr(c.as_mut_ptr()), CPtr(scratch.partial.as_mut_ptr()));
        (0..blocks * splits).into_par_iter().for_each(|task| {
            let (blk, s) = (task / splits, task % splits);
            let (j0, p0) = (blk * w, s * rows_per_split);
            let (wb, rows) = (w.min(n - j0), rows_per_split.min(k.saturating_sub(p0)));
            let mut acc = vec![0f32; m * wb];
            decode_rows(&mut acc, at, b, [m, n, j0, wb], [p0, rows]);
            let (dst, base) = if splits > 1 { (pp, s * m * n) } else { (cp, 0) };
            for i in 0..m {
                // SAFETY: task (blk, s) alone writes columns j0..j0 + wb of the m rows of its
                // destination (C, or split s's m × n slice of `partial`), each task index
                // visited once, all within that destination's bounds.
                let row = unsafe { std::slice::from_raw_parts_mut(dst.at(base + i * n + j0), wb) };
                row.copy_from_slice(&acc[i * wb..(i + 1) * wb]);
            }
        });
        if splits > 1 {
            add_splits(c, &scratch.partial, [m, n, n], splits);
        }
    }
}

/// C (m × n) = the sum of the `splits` partial products in `partial`, each m rows `ld` apart
/// (`shape` = [m, n, ld]), one after another.
fn add_splits(c: &mut [f32], partial: &[f32], shape: [usize; 3], splits: usize) {
    let [m, n, ld] = shape;
    c.par_chunks_mut(n).enumerate().for_each(|(i, row)| {
        let part = |s: usize| &partial[s * m * ld + i * ld..s * m * ld + i * ld + n];
        row.copy_from_slice(part(0));
        for s in 1..splits {
            for (x, &y) in row.iter_mut().zip(part(s)) {
                *x += y;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::{row_groups, stream_block_cols, STREAM_MIN_COLS, STREAM_SUMS_BYTES};

    /// A decode task's column block: its sums within the budget, at least a page of each row
    /// of B, whole 64-column steps, never wider than B.
    #[test]
    fn stream_blocks_keep_their_sums_in_budget_and_rows_a_page_long() {
        assert_eq!(stream_block_cols(16, 4096), 4096);
        assert_eq!(stream_block_cols(16, 16384), 4096);
        assert_eq!(stream_block_cols(8, 16384), 8192);
        assert_eq!(stream_block_cols(2, 100), 100);
        for m in 1..=16 {
            let w = stream_block_cols(m, 1 << 20);
            assert!(w >= STREAM_MIN_COLS && w.is_multiple_of(64), "m = {m}");
            assert!(
                w == STREAM_MIN_COLS || m * w * 4 <= STREAM_SUMS_BYTES,
                "m = {m}"
            );
        }
    }

    /// Every row in exactly one group, in order, no group larger than the kernel's rows, as
    /// few groups as that allows, their sizes within one of each other.
    #[test]
    fn row_groups_cover_the_rows_in_even_groups() {
        assert_eq!(row_groups(8, 6).collect::<Vec<_>>(), [(0, 4), (4, 4)]);
        assert_eq!(
            row_groups(16, 6).collect::<Vec<_>>(),
            [(0, 6), (6, 5), (11, 5)]
        );
        assert_eq!(row_groups(5, 6).collect::<Vec<_>>(), [(0, 5)]);
        for r in [6, 8] {
            for m in 1..=40 {
                let groups: Vec<_> = row_groups(m, r).collect();
                assert_eq!(groups.len(), m.div_ceil(r), "m = {m}, r = {r}");
                let mut next = 0;
                for &(first, rows) in &groups {
                    assert_eq!(first, next, "m = {m}, r = {r}");
                    let g = groups.len();
                    assert!(
                        rows <= r && (rows == m / g || rows == m.div_ceil(g)),
                        "m = {m}, r = {r}"
                    );
                    next += rows;
                }
                assert_eq!(next, m, "m = {m}, r = {r}");
            }
        }
    }
}
