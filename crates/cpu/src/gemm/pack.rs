//! Packing: blocks of A and B copied into the contiguous panels the micro-kernels walk.

use super::*;

/// A row-major matrix as the packing reads it: its values and its row stride.
#[derive(Clone, Copy)]
pub struct Mat<'a> {
    pub data: &'a [f32],
    pub ld: usize,
}

/// A block of a matrix: `rows` rows from row `r0`, `cols` columns from column `c0`.
#[derive(Clone, Copy)]
pub struct Block {
    pub r0: usize,
    pub rows: usize,
    pub c0: usize,
    pub cols: usize,
}

/// A vector path of a full MR-row panel: packs the panel's first steps from the MR rows and
/// returns how many (the rest are packed value by value).
///
/// # Safety
/// The CPU has the instructions the function was compiled for.
type VectorPack<const MR: usize> = unsafe fn(&[&[f32]; MR], &mut [f32]) -> usize;

/// One mr-tall panel of A: the block's rows r0..r0+rows (rows ≤ mr, zero rows below), its
/// columns pc..pc+kc. Written in order (the mr values of step p, then step p+1), reading mr
/// rows side by side.
pub(super) fn pack_a_panel(a: Mat<'_>, blk: Block, mr: usize, panel: &mut [f32]) {
    let (a, lda, r0, rows, pc, kc) = (a.data, a.ld, blk.r0, blk.rows, blk.c0, blk.cols);
    /// A full panel's MR rows: the steps the vector path `vector` packs (where this CPU has
    /// it), the rest one value at a time.
    fn fixed<const MR: usize>(
        src: [&[f32]; MR],
        panel: &mut [f32],
        vector: Option<VectorPack<MR>>,
    ) {
        // SAFETY: `vector` is given only where this CPU has its instructions (the caller).
        let done = vector.map_or(0, |v| unsafe { v(&src, panel) });
        for (p, step) in panel.chunks_exact_mut(MR).enumerate().skip(done) {
            for i in 0..MR {
                step[i] = src[i][p];
            }
        }
    }
    let row = |i: usize| &a[(r0 + i) * lda + pc..(r0 + i) * lda + pc + kc];
    #[cfg(target_arch = "x86_64")]
    let (v6, v12): (Option<VectorPack<6>>, Option<VectorPack<12>>) = {
        use std::arch::is_x86_feature_detected as has;
        (
            (has!("avx2") && has!("fma")).then_some(pack6_avx2),
            has!("avx512f").then_some(pack12_avx512),
        )
    };
    #[cfg(not(target_arch = "x86_64"))]
    let (v6, v12) = (None, None);
    match (rows == mr, mr) {
        (true, 6) => return fixed::<6>(std::array::from_fn(row), &mut panel[..kc * 6], v6),
        (true, 12) => return fixed::<12>(std::array::from_fn(row), &mut panel[..kc * 12], v12),
        _ => {}
    }
    if rows < mr {
        panel[..kc * mr].fill(0.0);
    }
    for i in 0..rows {
        for (p, &v) in row(i).iter().enumerate() {
            panel[p * mr + i] = v;
        }
    }
}

/// A 12-row panel's steps 16 at a time, returning how many it packed (a multiple of 16; the
/// caller packs the rest): the 12 rows' 16 values are transposed in registers, and each group
/// of 4 rows at a step leaves as one 16-byte piece (its vector's 128-bit lane, extracted), 48
/// stores for 192 values. Value by value, the stores were the cost: 12 scalar stores a step,
/// most of attention's packing of its probabilities (docs/performance.md).
///
/// # Safety
/// The CPU supports avx512f.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn pack12_avx512(src: &[&[f32]; 12], panel: &mut [f32]) -> usize {
    // SAFETY: avx512f, the caller's contract.
    unsafe { pack12_avx512_with(src, panel, |_, v| v) }
}

/// [`pack12_avx512`] with each row's 16 values of a step mapped by `f(row, values)` before
/// they are packed (flash attention's probabilities: the exponentials of the scores, packed
/// as they are computed).
///
/// # Safety
/// The CPU supports avx512f.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn pack12_avx512_with(
    src: &[&[f32]; 12],
    panel: &mut [f32],
    mut f: impl FnMut(usize, std::arch::x86_64::__m512) -> std::arch::x86_64::__m512,
) -> usize {
    use std::arch::x86_64::*;
    let kc = panel.len() / 12;
    let whole = kc / 16 * 16;
    assert!(src.iter().all(|r| r.len() >= kc), "12 rows of kc values");
    let out = panel.as_mut_ptr();
    for p in (0..whole).step_by(16) {
        // SAFETY: p + 16 ≤ kc ≤ every row's length (asserted).
        let r: [__m512; 12] =
            std::array::from_fn(|i| f(i, unsafe { _mm512_loadu_ps(src[i].as_ptr().add(p)) }));
        // Pairs of rows interleaved: lo has, in 128-bit lane L, columns 4L and 4L+1 of both
        // rows; hi columns 4L+2 and 4L+3.
        let lo: [__m512; 6] = std::array::from_fn(|j| _mm512_unpacklo_ps(r[2 * j], r[2 * j + 1]));
        let hi: [__m512; 6] = std::array::from_fn(|j| _mm512_unpackhi_ps(r[2 * j], r[2 * j + 1]));
        for g in 0..3 {
            let pd = |v: __m512| _mm512_castps_pd(v);
            // u[q]: in lane L, rows 4g..4g+4 at column 4L + q.
            let u = [
                _mm512_unpacklo_pd(pd(lo[2 * g]), pd(lo[2 * g + 1])),
                _mm512_unpackhi_pd(pd(lo[2 * g]), pd(lo[2 * g + 1])),
                _mm512_unpacklo_pd(pd(hi[2 * g]), pd(hi[2 * g + 1])),
                _mm512_unpackhi_pd(pd(hi[2 * g]), pd(hi[2 * g + 1])),
            ];
            for (q, &v) in u.iter().enumerate() {
                let v = _mm512_castpd_ps(v);
                let lanes = [
                    _mm512_castps512_ps128(v),
                    _mm512_extractf32x4_ps::<1>(v),
                    _mm512_extractf32x4_ps::<2>(v),
                    _mm512_extractf32x4_ps::<3>(v),
                ];
                for (l, &piece) in lanes.iter().enumerate() {
                    // Column c = 4L + q goes to step p + c, rows 4g..4g + 4.
                    let at = (p + 4 * l + q) * 12 + 4 * g;
                    // SAFETY: panel[at..at + 4] is inside the panel (step p + c < kc).
                    unsafe { _mm_storeu_ps(out.add(at), piece) };
                }
            }
        }
    }
    whole
}

/// A 6-row panel's steps 8 at a time, as [`pack12_avx512`] with AVX2's vectors: at each step
/// rows 0..4 leave as one 16-byte piece and rows 4..6 as one 8-byte piece.
///
/// # Safety
/// The CPU supports avx2 and fma.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn pack6_avx2(src: &[&[f32]; 6], panel: &mut [f32]) -> usize {
    // SAFETY: avx2 and fma, the caller's contract.
    unsafe { pack6_avx2_with(src, panel, |_, v| v) }
}

/// [`pack6_avx2`] with each row's 8 values of a step mapped by `f(row, values)` before they
/// are packed (see [`pack12_avx512_with`]). Compiled with FMA as the AVX2 kernels are (it
/// emits none itself): a map from such a kernel is inlined only into a function with its
/// features, and called once a row and step otherwise.
///
/// # Safety
/// The CPU supports avx2 and fma.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn pack6_avx2_with(
    src: &[&[f32]; 6],
    panel: &mut [f32],
    mut f: impl FnMut(usize, std::arch::x86_64::__m256) -> std::arch::x86_64::__m256,
) -> usize {
    use std::arch::x86_64::*;
    let kc = panel.len() / 6;
    let whole = kc / 8 * 8;
    assert!(src.iter().all(|r| r.len() >= kc), "6 rows of kc values");
    let out = panel.as_mut_ptr();
    for p in (0..whole).step_by(8) {
        // SAFETY: p + 8 ≤ kc ≤ every row's length (asserted).
        let r: [__m256; 6] =
            std::array::from_fn(|i| f(i, unsafe { _mm256_loadu_ps(src[i].as_ptr().add(p)) }));
        // In 128-bit lane L: lo has columns 4L and 4L+1 of a pair of rows, hi 4L+2 and 4L+3.
        let lo: [__m256; 3] = std::array::from_fn(|j| _mm256_unpacklo_ps(r[2 * j], r[2 * j + 1]));
        let hi: [__m256; 3] = std::array::from_fn(|j| _mm256_unpackhi_ps(r[2 * j], r[2 * j + 1]));
        let pd = |v: __m256| _mm256_castps_pd(v);
        // u[q]: in lane L, rows 0..4 at column 4L + q.
        let u = [
            _mm256_unpacklo_pd(pd(lo[0]), pd(lo[1])),
            _mm256_unpackhi_pd(pd(lo[0]), pd(lo[1])),
            _mm256_unpacklo_pd(pd(hi[0]), pd(hi[1])),
            _mm256_unpackhi_pd(pd(hi[0]), pd(hi[1])),
        ];
        // Rows 4 and 5: lo[2]'s lane L holds columns 4L (low half) and 4L+1 (high half),
        // hi[2]'s columns 4L+2 and 4L+3.
        let tail = [_mm256_castps_pd(lo[2]), _mm256_castps_pd(hi[2])];
        for l in 0..2 {
            let lane = |v: __m256d| {
                if l == 0 {
                    _mm256_castpd256_pd128(v)
                } else {
                    _mm256_extractf128_pd::<1>(v)
                }
            };
            let pairs = [lane(tail[0]), lane(tail[1])];
            for (q, &v) in u.iter().enumerate() {
                let at = (p + 4 * l + q) * 6;
                let pair = pairs[q / 2];
                // SAFETY: panel[at..at + 6] is inside the panel (step p + 4L + q < kc).
                unsafe {
                    _mm_storeu_pd(out.add(at).cast(), lane(v));
                    if q % 2 == 0 {
                        _mm_storel_pd(out.add(at + 4).cast(), pair);
                    } else {
                        _mm_storeh_pd(out.add(at + 4).cast(), pair);
                    }
                }
            }
        }
    }
    whole
}

/// One nr-wide panel of B: the block's rows pc..pc+kc, its columns j0..j0+cols (cols ≤ nr,
/// zero-padded).
pub(super) fn pack_b_panel(b: Mat<'_>, blk: Block, nr: usize, panel: &mut [f32]) {
    let (b, ldb, pc, kc, j0, cols) = (b.data, b.ld, blk.r0, blk.rows, blk.c0, blk.cols);
    for p in 0..kc {
        let src = &b[(pc + p) * ldb + j0..(pc + p) * ldb + j0 + cols];
        copy_padded(&mut panel[p * nr..(p + 1) * nr], src);
    }
}

/// dst = src followed by zeros. Whole panel rows (16 or 32 values) are copied as fixed-size
/// arrays: inline moves, not a call to memcpy per 64 bytes (which made packing B take a tenth of
/// the GEMM's time).
#[inline(always)]
fn copy_padded(dst: &mut [f32], src: &[f32]) {
    fn whole<const N: usize>(dst: &mut [f32], src: &[f32]) -> bool {
        match (
            <&mut [f32; N]>::try_from(&mut *dst),
            <&[f32; N]>::try_from(src),
        ) {
            (Ok(d), Ok(s)) => {
                *d = *s;
                true
            }
            _ => false,
        }
    }
    if whole::<16>(dst, src) || whole::<32>(dst, src) {
        return;
    }
    dst[..src.len()].copy_from_slice(src);
    dst[src.len()..].fill(0.0);
}

/// Rows of B packed by one task: each row is read whole (nc values in a run, prefetcher-friendly)
/// and scattered into the panels; tasks own disjoint rows of every panel.
pub(super) const B_ROWS_A_TASK: usize = 16;

/// Packs rows g·B_ROWS_A_TASK.. of the block `blk` of B (rows pc..pc+kc, columns jc..jc+nc)
/// into every nr-wide panel at `bp`.
///
/// # Safety
/// `bp` points to t.b_len(nc, kc) writable values that no other thread writes these rows of.
pub(super) unsafe fn pack_b_rows(t: &Tile, b: Mat<'_>, blk: Block, g: usize, bp: CPtr) {
    let (b, ldb, pc, kc, jc, nc) = (b.data, b.ld, blk.r0, blk.rows, blk.c0, blk.cols);
    let (nr, panels) = (t.nr, nc.div_ceil(t.nr));
    for p in g * B_ROWS_A_TASK..((g + 1) * B_ROWS_A_TASK).min(kc) {
        let row = &b[(pc + p) * ldb + jc..(pc + p) * ldb + jc + nc];
        for jp in 0..panels {
            let cols = nr.min(nc - jp * nr);
            // SAFETY: panel jp's step p, nr values at jp·kc·nr + p·nr < b_len(nc, kc); this
            // task alone writes step p (the caller's contract).
            let dst = unsafe { std::slice::from_raw_parts_mut(bp.at(jp * kc * nr + p * nr), nr) };
            copy_padded(dst, &row[jp * nr..jp * nr + cols]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every panel height the kernels use, full and short, at lengths around the vector
    /// path's 16 steps, from an offset in a wider matrix: each step holds its rows' values in
    /// order and a short panel's missing rows are zeros.
    #[test]
    fn a_panels_hold_each_step_s_rows_in_order() {
        let (lda, pc) = (70, 3);
        let a: Vec<f32> = (0..20 * lda).map(|i| i as f32 * 0.5 - 7.0).collect();
        for mr in [4, 6, 12] {
            for rows in [mr, mr - 1, 1] {
                for kc in [1, 15, 16, 17, 33, 48, 64] {
                    let mut panel = vec![f32::NAN; kc * mr];
                    let blk = Block {
                        r0: 2,
                        rows,
                        c0: pc,
                        cols: kc,
                    };
                    pack_a_panel(Mat { data: &a, ld: lda }, blk, mr, &mut panel);
                    for p in 0..kc {
                        for i in 0..mr {
                            let want = if i < rows {
                                a[(2 + i) * lda + pc + p]
                            } else {
                                0.0
                            };
                            assert_eq!(
                                panel[p * mr + i].to_bits(),
                                want.to_bits(),
                                "mr {mr} rows {rows} kc {kc} step {p} row {i}"
                            );
                        }
                    }
                }
            }
        }
    }
}
