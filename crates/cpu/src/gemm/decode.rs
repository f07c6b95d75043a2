//! The decode product: C = A·B for a handful of rows of A, where the time is B's read from
//! memory, not a micro-kernel's FMAs.

use super::*;

/// Rows of A up to which the tiled variant runs as a decode product (a matrix–vector product
/// in all but name: the time is B's read from memory, not the FMAs of a micro-kernel).
pub const DECODE_MAX_M: usize = 16;
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

/// Rows of B an in-place decode task's register kernel takes at a time: the stretch of B (×
/// the block's width) that the row groups after the first re-read from L1/L2, and how far
/// ahead the first group asks for B's lines.
const DECODE_KC: usize = 128;
/// Rows of B a packed decode task packs a tile of, and its kernels then take, at a time: the
/// tile (32 × 16 floats, 2 KiB under AVX2) stays in L1 for the row groups, and its packing reads
/// one line from each of 32 rows of B (32 streams, each asked into L2 ahead). 128 rows a tile
/// measured slower at every m (docs/performance.md).
const PACKED_KC: usize = 32;

/// A register-blocked decode kernel: `c[i·ldc + j] += Σ_p at[p·lda + i] · b[p·ldb + j]` for
/// i < rows ≤ its R and j < its NV·LANES columns, over kc rows of B, the accumulators held in
/// registers across the rows (one load of B's row piece, R broadcasts of A and R·NV fused
/// multiply-adds a row). With `pf_rows` > 0 the lines of B that many rows ahead are asked into
/// L2 meanwhile.
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
    pf_rows: usize,
) {
    debug_assert_eq!(ACC, R * NV);
    debug_assert!(rows <= R);
    // SAFETY (all below): V's features are enabled; the caller's contract bounds every
    // address read or written (p < kc, i < rows, h < NV); prefetches never fault.
    let mut acc = [unsafe { V::splat(0.0) }; ACC];
    for p in 0..kc {
        unsafe {
            if pf_rows > 0 {
                let mut h = 0;
                while h < NV * V::LANES {
                    crate::simd::prefetch_l2(b.wrapping_add((p + pf_rows) * ldb + h));
                    h += 16;
                }
            }
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

thread_local! {
    /// A thread's packed tile of B for the decode kernels, kept between runs (its pages
    /// faulted in once, not at every product).
    static PANEL: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The arguments of a decode kernel: kc, (at, lda), (b, ldb), (c, ldc), rows, pf_rows.
type DecodeFn =
    unsafe fn(usize, (*const f32, usize), (*const f32, usize), (*mut f32, usize), usize, usize);

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
    pf_rows: usize,
) {
    // SAFETY: compiled with avx512f; the caller's bounds are decode_micro's.
    unsafe { decode_micro::<std::arch::x86_64::__m512, 8, 2, 16>(kc, a, b, c, rows, pf_rows) }
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
    pf_rows: usize,
) {
    // SAFETY: compiled with avx2 and fma, which V's methods need; the caller's bounds are
    // decode_micro's.
    unsafe { decode_micro::<V, 6, 2, 12>(kc, a, b, c, rows, pf_rows) }
}

/// A level's register decode kernel.
#[derive(Clone, Copy)]
struct DecodeKernel {
    f: DecodeFn,
    /// Rows of A and columns of B it holds in registers.
    rows: usize,
    cols: usize,
    /// Whether it reads B packed ([`GemmKernels::decode_packed`]) rather than in place: the
    /// faster of the two against OpenBLAS in interleaved cold rounds, per level
    /// (docs/performance.md).
    packed: bool,
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
            packed: false,
        }),
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx2Fma => Some(DecodeKernel {
            f: decode_avx2::<std::arch::x86_64::__m256>,
            rows: 6,
            cols: 16,
            packed: true,
        }),
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx2NoFma => Some(DecodeKernel {
            f: decode_avx2::<crate::lanes::NoFma256>,
            rows: 6,
            cols: 16,
            packed: true,
        }),
        _ => None,
    }
}

impl GemmKernels {
    /// The register kernels' decode product where the level's kernels take B packed (AVX2):
    /// each task owns a contiguous range of B's rows over B's whole width and walks it
    /// [`PACKED_KC`] rows at a time, tile by tile across the width: a tile (those rows × nr
    /// columns) is packed into a line-aligned buffer that stays in L1 ([`pack_tile`], each row's
    /// lines asked into L2 ahead), and every group of A's rows ([`row_groups`]) then runs the
    /// level's kernel on it. A kernel walking B in place strides by a row of B at every step, a
    /// new 4 KiB page each time, where no hardware prefetcher follows, and AVX2's 16-column
    /// kernel ran at memory's latency, not its bandwidth (docs/performance.md). Each task sums
    /// into its own m × n, and the tasks' sums are added at the end; the column tail narrower
    /// than a kernel goes through [`decode_rows`].
    fn decode_packed(&self, kernel: DecodeKernel, at: &[f32], c: &mut [f32]) {
        let (kern, r, nr) = (kernel.f, kernel.rows, kernel.cols);
        let (m, n, k) = (self.g.m as usize, self.g.n as usize, self.g.k as usize);
        let b = self.inputs.get("B");
        let full = n / nr * nr;
        let threads = rayon::current_num_threads();
        // Enough tasks for every thread several times over, none with fewer than 64 rows of B.
        let splits = (4 * threads).min(k.div_ceil(64)).max(1);
        let rows_per_split = k.div_ceil(splits);
        let mut partial = vec![0f32; splits * m * n];
        partial
            .par_chunks_mut(m * n)
            .enumerate()
            .for_each(|(split, acc)| {
                PANEL.with_borrow_mut(|panel| {
                    // One tile, PACKED_KC × nr, on a cache line of its own.
                    if panel.len() < PACKED_KC * nr + 16 {
                        panel.resize(PACKED_KC * nr + 16, 0.0);
                    }
                    let off = panel.as_ptr().align_offset(64).min(16);
                    let p0 = (split * rows_per_split).min(k);
                    let end = (p0 + rows_per_split).min(k);
                    let mut pc = p0;
                    while pc < end {
                        let kc = PACKED_KC.min(end - pc);
                        for t in 0..full / nr {
                            let tile = &mut panel[off..off + kc * nr];
                            match nr {
                                16 => pack_tile::<16>(b, n, pc, t, tile),
                                32 => pack_tile::<32>(b, n, pc, t, tile),
                                _ => pack_tile::<0>(b, n, pc, t, tile),
                            }
                            for (ig, rows) in row_groups(m, r) {
                                // SAFETY: the level's kernel (decode_kernel asserted the CPU
                                // has it); rows pc..pc + kc < k of `at` (k × m) from column
                                // ig, `rows` of them (ig + rows ≤ m); the tile's kc × nr in
                                // `panel` at off; acc (m × n) at rows ig.. and columns
                                // t·nr.. + nr ≤ full ≤ n.
                                unsafe {
                                    kern(
                                        kc,
                                        (at.as_ptr().add(pc * m + ig), m),
                                        (panel.as_ptr().add(off), nr),
                                        (acc.as_mut_ptr().add(ig * n + t * nr), n),
                                        rows,
                                        0,
                                    )
                                };
                            }
                        }
                        pc += kc;
                    }
                    if full < n && end > p0 {
                        let tw = n - full;
                        let mut tail = vec![0f32; m * tw];
                        decode_rows(&mut tail, at, b, [m, n, full, tw], [p0, end - p0]);
                        for i in 0..m {
                            acc[i * n + full..(i + 1) * n]
                                .copy_from_slice(&tail[i * tw..(i + 1) * tw]);
                        }
                    }
                })
            });
        c.par_chunks_mut(n).enumerate().for_each(|(i, row)| {
            row.copy_from_slice(&partial[i * n..(i + 1) * n]);
            for s in 1..splits {
                let part = &partial[s * m * n + i * n..s * m * n + (i + 1) * n];
                for (x, &y) in row.iter_mut().zip(part) {
                    *x += y;
                }
            }
        });
    }

    /// C = A·B for m ≤ [`DECODE_MAX_M`]: B streamed once from memory against the m rows of A
    /// held transposed (k × m, a few hundred KiB at most). A task owns a block of columns as
    /// wide as its m × w accumulators fit in L1 (w = 4096 at m = 1, 256 at m = 16) and a range
    /// of B's rows; with few column blocks (small m) the rows are split among tasks, each
    /// reading whole stretches of B's rows in order, and their partial sums added at the end.
    /// From m = 2 on AVX-512 and AVX2 register kernels take it: 8 (6) rows of A × 32 (16)
    /// columns of accumulators held in registers. AVX-512's reads B in place, over stretches
    /// of [`DECODE_KC`] rows, the row groups after the first re-reading the stretch from
    /// cache; AVX2's reads it packed ([`Self::decode_packed`], [`DecodeKernel::packed`]). The
    /// L1 accumulator loop ([`decode_rows`]) takes the column tail, m = 1 and the other levels.
    /// The micro-kernel path would pack all of B and compute on whole 12- or 6-row panels of
    /// A for a handful of rows.
    pub(super) fn decode(&self, l: SimdLevel, c: &mut [f32]) {
        let (m, n, k) = (self.g.m as usize, self.g.n as usize, self.g.k as usize);
        let kernel = decode_kernel(l);
        let (a, b) = (self.inputs.get("A"), self.inputs.get("B"));
        let mut at = vec![0f32; k * m];
        for i in 0..m {
            for p in 0..k {
                at[p * m + i] = a[i * k + p];
            }
        }
        let register = kernel.filter(|d| n >= d.cols && m >= REGISTER_DECODE_MIN_M);
        if let Some(d) = register.filter(|d| d.packed) {
            return self.decode_packed(d, &at, c);
        }
        let w_max = (DECODE_ACC_BYTES / 4 / m.max(1)) / 16 * 16;
        let w = w_max.max(16).min(n.max(1));
        let blocks = n.div_ceil(w);
        let threads = rayon::current_num_threads();
        // Enough tasks for every thread several times over, none with fewer than 64 rows of B.
        let splits = (4 * threads).div_ceil(blocks).min(k.div_ceil(64)).max(1);
        let rows_per_split = k.div_ceil(splits);
        let mut partial = vec![0f32; if splits > 1 { splits * m * n } else { 0 }];
        let (cp, pp) = (CPtr(c.as_mut_ptr()), CPtr(partial.as_mut_ptr()));
        (0..blocks * splits).into_par_iter().for_each(|task| {
            let (blk, split) = (task / splits, task % splits);
            let (j0, p0) = (blk * w, split * rows_per_split);
            let (wb, rows) = (w.min(n - j0), rows_per_split.min(k.saturating_sub(p0)));
            let mut acc = vec![0f32; m * wb];
            match register {
                Some(DecodeKernel {
                    f: kern,
                    rows: r,
                    cols: nr,
                    ..
                }) if wb >= nr => {
                    let full = wb / nr * nr;
                    let mut pc = p0;
                    while pc < p0 + rows {
                        let kc = DECODE_KC.min(p0 + rows - pc);
                        for jt in (0..full).step_by(nr) {
                            for ig in (0..m).step_by(r) {
                                // SAFETY: the level's kernel (decode_kernel asserted the CPU
                                // has it); rows pc..pc + kc < k of `at` (k × m) from column
                                // ig, (m − ig).min(r) of them; B's rows pc.. at columns
                                // j0 + jt.. + nr ≤ j0 + wb ≤ n; acc's rows ig.. at columns
                                // jt.. + nr ≤ wb of m × wb.
                                unsafe {
                                    kern(
                                        kc,
                                        (at.as_ptr().add(pc * m + ig), m),
                                        (b.as_ptr().add(pc * n + j0 + jt), n),
                                        (acc.as_mut_ptr().add(ig * wb + jt), wb),
                                        (m - ig).min(r),
                                        if ig == 0 { DECODE_KC } else { 0 },
                                    )
                                };
                            }
                        }
                        pc += kc;
                    }
                    if full < wb {
                        let tw = wb - full;
                        let mut tail = vec![0f32; m * tw];
                        decode_rows(&mut tail, &at, b, [m, n, j0 + full, tw], [p0, rows]);
                        for i in 0..m {
                            acc[i * wb + full..(i + 1) * wb]
                                .copy_from_slice(&tail[i * tw..(i + 1) * tw]);
                        }
                    }
                }
                _ => decode_rows(&mut acc, &at, b, [m, n, j0, wb], [p0, rows]),
            }
            // Straight into C with one split; else into this split's own copy of C.
            let (dst, base) = if splits > 1 {
                (pp, split * m * n)
            } else {
                (cp, 0)
            };
            for i in 0..m {
                // SAFETY: task (blk, split) alone writes columns j0..j0 + wb of the m rows of
                // its destination (C, or split's m × n slice of `partial`), each task index
                // visited once, all within that destination's bounds.
                let row = unsafe { std::slice::from_raw_parts_mut(dst.at(base + i * n + j0), wb) };
                row.copy_from_slice(&acc[i * wb..(i + 1) * wb]);
            }
        });
        if splits > 1 {
            c.par_chunks_mut(n).enumerate().for_each(|(i, row)| {
                row.copy_from_slice(&partial[i * n..(i + 1) * n]);
                for s in 1..splits {
                    let part = &partial[s * m * n + i * n..s * m * n + (i + 1) * n];
                    for (x, &y) in row.iter_mut().zip(part) {
                        *x += y;
                    }
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::row_groups;

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
