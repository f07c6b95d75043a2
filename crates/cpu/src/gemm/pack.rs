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

/// One mr-tall panel of A: the block's rows r0..r0+rows (rows ≤ mr, zero rows below), its
/// columns pc..pc+kc. Written in order (the mr values of step p, then step p+1), reading mr
/// rows side by side.
pub(super) fn pack_a_panel(a: Mat<'_>, blk: Block, mr: usize, panel: &mut [f32]) {
    let (a, lda, r0, rows, pc, kc) = (a.data, a.ld, blk.r0, blk.rows, blk.c0, blk.cols);
    fn fixed<const MR: usize>(
        a: &[f32],
        lda: usize,
        r0: usize,
        pc: usize,
        kc: usize,
        panel: &mut [f32],
    ) {
        let src: [&[f32]; MR] =
            std::array::from_fn(|i| &a[(r0 + i) * lda + pc..(r0 + i) * lda + pc + kc]);
        for (p, step) in panel[..kc * MR].chunks_exact_mut(MR).enumerate() {
            for i in 0..MR {
                step[i] = src[i][p];
            }
        }
    }
    match (rows == mr, mr) {
        (true, 6) => return fixed::<6>(a, lda, r0, pc, kc, panel),
        (true, 12) => return fixed::<12>(a, lda, r0, pc, kc, panel),
        _ => {}
    }
    if rows < mr {
        panel[..kc * mr].fill(0.0);
    }
    for i in 0..rows {
        let src = &a[(r0 + i) * lda + pc..(r0 + i) * lda + pc + kc];
        for (p, &v) in src.iter().enumerate() {
            panel[p * mr + i] = v;
        }
    }
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

/// How far ahead along a row of B [`pack_tile`] asks for lines into L2.
const PACK_AHEAD_FLOATS: usize = 128;

/// Tile `t` of a stretch of B: rows p0.. of B (`ld` floats apart), columns t·NR.. + NR, one
/// row after another into `tile` (its length a whole number of rows), NR a constant so that
/// each piece is a few vector moves, not a call to memcpy. Tile by tile, not row by row: a row
/// of B scattered into every tile writes a new line of the stretch (in L2) at each piece, and
/// stores that miss L1 leave the store buffer one after another (docs/performance.md has the
/// profile). A tile's writes are one contiguous run; its reads take one line from each of its
/// rows, the same pages the next tile reads on. NR = 0 stands for "not a kernel's width" and
/// panics.
#[inline(always)]
pub(super) fn pack_tile<const NR: usize>(
    b: &[f32],
    ld: usize,
    p0: usize,
    t: usize,
    tile: &mut [f32],
) {
    assert!(NR > 0, "no register decode kernel is that wide");
    for (p, dst) in tile.chunks_exact_mut(NR).enumerate() {
        let at = (p0 + p) * ld + t * NR;
        crate::simd::prefetch_l2(b.as_ptr().wrapping_add(at + PACK_AHEAD_FLOATS));
        let src: &[f32; NR] = b[at..at + NR].try_into().expect("NR values");
        let dst: &mut [f32; NR] = dst.try_into().expect("NR values");
        *dst = *src;
    }
}
