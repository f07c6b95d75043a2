//! The micro-kernels: C[MR×NR] (+)= Ap·Bp over kc steps of packed panels, one a SIMD level, and
//! the [`Tile`] that picks this CPU's.

use super::*;

/// The largest MR·NR of any micro-kernel: the size of an edge tile's accumulator.
pub const MAX_TILE: usize = 12 * 32;

/// A micro-kernel: C[MR×NR] (+)= Ap·Bp over kc steps, Ap packed MR values per step, Bp NR.
#[derive(Clone, Copy)]
pub struct Tile {
    pub mr: usize,
    pub nr: usize,
    /// # Safety
    /// `ap` holds kc·mr values, `bp` kc·nr, `c` points to mr rows of nr writable values, row
    /// stride `ldc`; the CPU has the instructions the kernel was compiled for.
    pub(super) kernel: unsafe fn(usize, *const f32, *const f32, *mut f32, usize, bool),
    /// The same product stored (not added) into C, each row's maxima folded into `max_lanes`
    /// running maxima of that row (see [`Tile::store_max`]).
    ///
    /// # Safety
    /// As `kernel`'s, and the last pointer is writable at mr·max_lanes values.
    pub(super) kernel_max: unsafe fn(usize, *const f32, *const f32, *mut f32, usize, *mut f32),
    /// Running maxima a row of a [`Tile::store_max`] keeps: the kernel's vector width.
    pub max_lanes: usize,
    /// Kernels of the first rows only, fewest rows first: an edge tile is computed by the first
    /// that has rows enough (from the same mr-tall panels) instead of by the full kernel.
    pub(super) short: &'static [ShortKernel],
}

/// A micro-kernel of a tile's first `rows` rows (see [`Tile::short`]).
#[derive(Clone, Copy)]
pub struct ShortKernel {
    pub rows: usize,
    /// # Safety
    /// As [`Tile::kernel`]'s (`ap` holds kc·mr values), `c` pointing to `rows` rows.
    pub(super) kernel: unsafe fn(usize, *const f32, *const f32, *mut f32, usize, bool),
}

impl Tile {
    /// The micro-kernel of this CPU's SIMD level.
    pub fn of_this_cpu() -> Tile {
        Tile::of_level(crate::simd::level())
    }

    /// The micro-kernel of SIMD level `l` (the portable one below AVX2 and off x86-64).
    pub fn of_level(l: crate::simd::SimdLevel) -> Tile {
        #[cfg(target_arch = "x86_64")]
        match l {
            crate::simd::SimdLevel::Avx512 => {
                return Tile {
                    mr: 12,
                    nr: 32,
                    kernel: micro_avx512,
                    kernel_max: micro_max_avx512,
                    max_lanes: 16,
                    short: &[
                        ShortKernel {
                            rows: 4,
                            kernel: micro_short_avx512::<4, 8>,
                        },
                        ShortKernel {
                            rows: 8,
                            kernel: micro_short_avx512::<8, 16>,
                        },
                    ],
                }
            }
            crate::simd::SimdLevel::Avx2Fma => {
                return Tile {
                    mr: 6,
                    nr: 16,
                    kernel: micro_avx2::<std::arch::x86_64::__m256>,
                    kernel_max: micro_max_avx2::<std::arch::x86_64::__m256>,
                    max_lanes: 8,
                    short: &[ShortKernel {
                        rows: 4,
                        kernel: micro_short_avx2::<std::arch::x86_64::__m256>,
                    }],
                }
            }
            crate::simd::SimdLevel::Avx2NoFma => {
                return Tile {
                    mr: 6,
                    nr: 16,
                    kernel: micro_avx2::<crate::lanes::NoFma256>,
                    kernel_max: micro_max_avx2::<crate::lanes::NoFma256>,
                    max_lanes: 8,
                    short: &[ShortKernel {
                        rows: 4,
                        kernel: micro_short_avx2::<crate::lanes::NoFma256>,
                    }],
                }
            }
            crate::simd::SimdLevel::Scalar => {}
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = l;
        Tile::portable()
    }

    /// The plain-loop micro-kernel (any CPU).
    pub fn portable() -> Tile {
        Tile {
            mr: PORTABLE_MR,
            nr: PORTABLE_NR,
            kernel: micro_portable_raw,
            kernel_max: micro_max_portable_raw,
            max_lanes: PORTABLE_NR,
            short: &[],
        }
    }

    /// c (mr×nr, row stride ldc) = or += Ap·Bp, for a full tile.
    pub fn full(&self, kc: usize, ap: &[f32], bp: &[f32], c: &mut [f32], ldc: usize, add: bool) {
        assert!(ap.len() >= kc * self.mr && bp.len() >= kc * self.nr);
        assert!(ldc >= self.nr && c.len() >= (self.mr - 1) * ldc + self.nr);
        // SAFETY: the asserts above are the kernel's bounds contract; `self` was built by
        // of_this_cpu/portable, which pick a kernel this CPU runs.
        unsafe { (self.kernel)(kc, ap.as_ptr(), bp.as_ptr(), c.as_mut_ptr(), ldc, add) }
    }

    /// acc (mr×nr, row stride nr) = Ap·Bp, at least its first `rows` rows (by the short
    /// kernel where it has that many; the rows after them are then left as they were).
    pub fn into_acc(
        &self,
        kc: usize,
        ap: &[f32],
        bp: &[f32],
        rows: usize,
        acc: &mut [f32; MAX_TILE],
    ) {
        match self.short.iter().find(|k| rows <= k.rows) {
            Some(short) => {
                assert!(ap.len() >= kc * self.mr && bp.len() >= kc * self.nr);
                // SAFETY: the panels hold kc·mr and kc·nr values (asserted), acc holds mr·nr ≥
                // short.rows·nr values with row stride nr; `self` was built by of_this_cpu,
                // which picks kernels this CPU runs.
                unsafe {
                    (short.kernel)(
                        kc,
                        ap.as_ptr(),
                        bp.as_ptr(),
                        acc.as_mut_ptr(),
                        self.nr,
                        false,
                    )
                }
            }
            _ => self.full(kc, ap, bp, &mut acc[..self.mr * self.nr], self.nr, false),
        }
    }

    /// C[rows×cols] (the tile `out`) = or += Ap·Bp where rows ≤ mr, cols ≤ nr: full tiles go
    /// straight to C, edge tiles through an accumulator.
    pub fn store(&self, kc: usize, ap: &[f32], bp: &[f32], out: TileOut<'_>, add: bool) {
        let TileOut {
            c,
            ld: ldc,
            rows,
            cols,
        } = out;
        if rows == self.mr && cols == self.nr {
            return self.full(kc, ap, bp, c, ldc, add);
        }
        let mut acc = [0f32; MAX_TILE];
        self.into_acc(kc, ap, bp, rows, &mut acc);
        for i in 0..rows {
            let dst = &mut c[i * ldc..i * ldc + cols];
            let src = &acc[i * self.nr..i * self.nr + cols];
            if add {
                for (d, s) in dst.iter_mut().zip(src) {
                    *d += s;
                }
            } else {
                dst.copy_from_slice(src);
            }
        }
    }

    /// C[rows×cols] (the tile `out`) = Ap·Bp, as [`Tile::store`] without adding, and each of
    /// the tile's rows' values folded into that row's running maxima: `row_max` holds
    /// `max_lanes` of them a row (rows × max_lanes values, the tile's first row first), which
    /// the caller starts at −∞ and reduces when its rows are done. A row's maximum found while
    /// its values are still in registers, not by another sweep over them (flash attention's
    /// score tiles: docs/performance.md).
    pub fn store_max(
        &self,
        kc: usize,
        ap: &[f32],
        bp: &[f32],
        out: TileOut<'_>,
        row_max: &mut [f32],
    ) {
        let TileOut {
            c,
            ld: ldc,
            rows,
            cols,
        } = out;
        let lanes = self.max_lanes;
        assert!(row_max.len() >= rows * lanes);
        if rows == self.mr && cols == self.nr {
            assert!(ap.len() >= kc * self.mr && bp.len() >= kc * self.nr);
            assert!(ldc >= self.nr && c.len() >= (self.mr - 1) * ldc + self.nr);
            // SAFETY: the asserts above are the kernel's bounds contract (row_max holds
            // mr·max_lanes values); `self` was built by of_this_cpu/portable, which pick a kernel
            // this CPU runs.
            return unsafe {
                (self.kernel_max)(
                    kc,
                    ap.as_ptr(),
                    bp.as_ptr(),
                    c.as_mut_ptr(),
                    ldc,
                    row_max.as_mut_ptr(),
                )
            };
        }
        let mut acc = [0f32; MAX_TILE];
        self.into_acc(kc, ap, bp, rows, &mut acc);
        for i in 0..rows {
            let src = &acc[i * self.nr..i * self.nr + cols];
            c[i * ldc..i * ldc + cols].copy_from_slice(src);
            let m = &mut row_max[i * lanes..(i + 1) * lanes];
            for (j, &v) in src.iter().enumerate() {
                // As vmaxps(m, v): v where either is NaN.
                m[j % lanes] = if m[j % lanes] > v { m[j % lanes] } else { v };
            }
        }
    }

    /// Floats of the packed panels of `rows` rows (A side) over kc steps.
    pub fn a_len(&self, rows: usize, kc: usize) -> usize {
        rows.div_ceil(self.mr) * self.mr * kc
    }

    /// Floats of the packed panels of `cols` columns (B side) over kc steps.
    pub fn b_len(&self, cols: usize, kc: usize) -> usize {
        cols.div_ceil(self.nr) * self.nr * kc
    }

    /// Packs the block `blk` of A (rows ic..ic+mc, columns pc..pc+kc) into mr-tall panels,
    /// each kc×mr contiguous (column by column), zero-padded.
    pub fn pack_a(&self, a: Mat<'_>, blk: Block, ap: &mut [f32]) {
        let (mr, mc, kc) = (self.mr, blk.rows, blk.cols);
        for (ip, panel) in ap[..self.a_len(mc, kc)].chunks_mut(kc * mr).enumerate() {
            let rows = Block {
                r0: blk.r0 + ip * mr,
                rows: mr.min(mc - ip * mr),
                ..blk
            };
            pack_a_panel(a, rows, mr, panel);
        }
    }

    /// Packs the block `blk` of B (rows pc..pc+kc, columns jc..jc+nc) into nr-wide panels,
    /// each kc×nr contiguous, zero-padded.
    pub fn pack_b(&self, b: Mat<'_>, blk: Block, bp: &mut [f32]) {
        let (nr, kc, nc) = (self.nr, blk.rows, blk.cols);
        for (jp, panel) in bp[..self.b_len(nc, kc)].chunks_mut(kc * nr).enumerate() {
            let cols = Block {
                c0: blk.c0 + jp * nr,
                cols: nr.min(nc - jp * nr),
                ..blk
            };
            pack_b_panel(b, cols, nr, panel);
        }
    }

    /// Packs rows r0..r0+rows of a row-major matrix (row stride `ld`, `depth` values a row) as
    /// the B side of a product with its transpose: panel jp holds, for each p < depth, rows
    /// r0 + jp·nr .. + nr at coordinate p (zero-padded).
    pub fn pack_bt(
        &self,
        x: &[f32],
        ld: usize,
        r0: usize,
        rows: usize,
        depth: usize,
        bp: &mut [f32],
    ) {
        let nr = self.nr;
        for (jp, panel) in bp[..self.b_len(rows, depth)]
            .chunks_mut(depth * nr)
            .enumerate()
        {
            let n_here = nr.min(rows - jp * nr);
            for jj in 0..nr {
                if jj < n_here {
                    let row = &x[(r0 + jp * nr + jj) * ld..(r0 + jp * nr + jj) * ld + depth];
                    for (p, &v) in row.iter().enumerate() {
                        panel[p * nr + jj] = v;
                    }
                } else {
                    for p in 0..depth {
                        panel[p * nr + jj] = 0.0;
                    }
                }
            }
        }
    }
}

/// Where a tile of C goes: C's values from the tile's first element, C's row stride, and the
/// rows and columns of C the tile covers (at most mr × nr).
pub struct TileOut<'a> {
    pub c: &'a mut [f32],
    pub ld: usize,
    pub rows: usize,
    pub cols: usize,
}

const PORTABLE_MR: usize = 4;
const PORTABLE_NR: usize = 16;

/// # Safety
/// `ap` holds kc·4 values, `bp` kc·16, `c` 4 rows of 16 writable values with row stride `ldc`.
pub(super) unsafe fn micro_portable_raw(
    kc: usize,
    ap: *const f32,
    bp: *const f32,
    c: *mut f32,
    ldc: usize,
    add: bool,
) {
    // SAFETY: the caller's contract is portable_acc's.
    let acc = unsafe { portable_acc(kc, ap, bp) };
    for (i, row) in acc.iter().enumerate() {
        // SAFETY: row i < 4 of the caller's tile, 16 values from c + i·ldc.
        let dst = unsafe { std::slice::from_raw_parts_mut(c.add(i * ldc), PORTABLE_NR) };
        for (d, s) in dst.iter_mut().zip(row) {
            *d = if add { *d + s } else { *s };
        }
    }
}

/// The portable micro-kernel's 4 × 16 accumulators of Ap·Bp over kc steps.
///
/// # Safety
/// `ap` holds kc·4 values, `bp` kc·16.
unsafe fn portable_acc(
    kc: usize,
    ap: *const f32,
    bp: *const f32,
) -> [[f32; PORTABLE_NR]; PORTABLE_MR] {
    // SAFETY: the caller's contract is these slices' bounds.
    let (ap, bp) = unsafe {
        (
            std::slice::from_raw_parts(ap, kc * PORTABLE_MR),
            std::slice::from_raw_parts(bp, kc * PORTABLE_NR),
        )
    };
    let mut acc = [[0f32; PORTABLE_NR]; PORTABLE_MR];
    micro_portable(kc, ap, bp, &mut acc);
    acc
}

/// [`micro_portable_raw`] stored (not added), each row's 16 columns folded into its 16
/// running maxima.
///
/// # Safety
/// As [`micro_portable_raw`]'s, and `row_max` holds 4·16 writable values.
pub(super) unsafe fn micro_max_portable_raw(
    kc: usize,
    ap: *const f32,
    bp: *const f32,
    c: *mut f32,
    ldc: usize,
    row_max: *mut f32,
) {
    // SAFETY: the caller's contract is portable_acc's, and row_max's bounds.
    let (acc, row_max) = unsafe {
        (
            portable_acc(kc, ap, bp),
            std::slice::from_raw_parts_mut(row_max, PORTABLE_MR * PORTABLE_NR),
        )
    };
    for (i, row) in acc.iter().enumerate() {
        // SAFETY: row i < 4 of the caller's tile, 16 values from c + i·ldc.
        let dst = unsafe { std::slice::from_raw_parts_mut(c.add(i * ldc), PORTABLE_NR) };
        dst.copy_from_slice(row);
        for (m, &v) in row_max[i * PORTABLE_NR..(i + 1) * PORTABLE_NR]
            .iter_mut()
            .zip(row)
        {
            *m = if *m > v { *m } else { v };
        }
    }
}

crate::multiversion! {
    /// Accumulators in a local array of 4 rows of 16: LLVM keeps them in vector registers
    /// (4 NEON or SSE registers a row) and unrolls the row loop.
    fn micro_portable(kc: usize, ap: &[f32], bp: &[f32], acc: &mut [[f32; PORTABLE_NR]; PORTABLE_MR]) {
        let mut c = [[0f32; PORTABLE_NR]; PORTABLE_MR];
        for (a, b) in ap.chunks_exact(PORTABLE_MR).zip(bp.chunks_exact(PORTABLE_NR)).take(kc) {
            for i in 0..PORTABLE_MR {
                for j in 0..PORTABLE_NR {
                    c[i][j] += a[i] * b[j];
                }
            }
        }
        *acc = c;
    }
}

/// 12×32 over kc steps: 24 zmm accumulators, two loads of B and twelve broadcasts of A a step.
///
/// # Safety
/// The CPU must support avx512f; `ap` holds kc·12 values, `bp` kc·32, `c` 12 rows of 32
/// writable values with row stride `ldc`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn micro_avx512(
    kc: usize,
    ap: *const f32,
    bp: *const f32,
    c: *mut f32,
    ldc: usize,
    add: bool,
) {
    // SAFETY: compiled with avx512f; the caller's bounds are micro's.
    unsafe { micro::<std::arch::x86_64::__m512, 12, 24, 12>(kc, ap, bp, c, ldc, add) }
}

/// The first R rows (ACC = 2·R accumulators) of [`micro_avx512`]'s product from its 12-row
/// panels: the edge of a block whose height leaves R rows or fewer in its last panel (flash
/// attention's 256-row query tiles: 21 panels and 4 rows; a GEMM of 1024 rows: 85 and 4, of
/// 2048: 170 and 8), R/12 of the full kernel's work instead of all of it.
///
/// # Safety
/// As [`micro_avx512`]'s, `c` R rows of 32 writable values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn micro_short_avx512<const R: usize, const ACC: usize>(
    kc: usize,
    ap: *const f32,
    bp: *const f32,
    c: *mut f32,
    ldc: usize,
    add: bool,
) {
    // SAFETY: compiled with avx512f; the caller's bounds are micro's with 12 values a step.
    unsafe { micro::<std::arch::x86_64::__m512, R, ACC, 12>(kc, ap, bp, c, ldc, add) }
}

/// 6×16 over kc steps: 12 ymm accumulators, two loads of B and six broadcasts of A a step
/// (15 of the 16 ymm registers). `V` is `__m256` (FMA) or [`crate::lanes::NoFma256`] (the
/// `avx2-nofma` level).
///
/// # Safety
/// The CPU must support avx2 and fma; `ap` holds kc·6 values, `bp` kc·16, `c` 6 rows of 16
/// writable values with row stride `ldc`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn micro_avx2<V: crate::lanes::Lanes>(
    kc: usize,
    ap: *const f32,
    bp: *const f32,
    c: *mut f32,
    ldc: usize,
    add: bool,
) {
    // SAFETY: compiled with avx2 and fma, which V's methods need; the caller's bounds are
    // micro's.
    unsafe { micro::<V, 6, 12, 6>(kc, ap, bp, c, ldc, add) }
}

/// The first 4 rows of [`micro_avx2`]'s product from its 6-row panels (see
/// [`micro_short_avx512`]).
///
/// # Safety
/// As [`micro_avx2`]'s, `c` 4 rows of 16 writable values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn micro_short_avx2<V: crate::lanes::Lanes>(
    kc: usize,
    ap: *const f32,
    bp: *const f32,
    c: *mut f32,
    ldc: usize,
    add: bool,
) {
    // SAFETY: compiled with avx2 and fma, which V's methods need; the caller's bounds are
    // micro's with 6 values a step.
    unsafe { micro::<V, 4, 8, 6>(kc, ap, bp, c, ldc, add) }
}

/// [`micro_avx512`] stored, each row's maxima folded into its 16 running maxima.
///
/// # Safety
/// As [`micro_avx512`]'s, and `row_max` holds 12·16 writable values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn micro_max_avx512(
    kc: usize,
    ap: *const f32,
    bp: *const f32,
    c: *mut f32,
    ldc: usize,
    row_max: *mut f32,
) {
    // SAFETY: compiled with avx512f; the caller's bounds are micro_max's.
    unsafe { micro_max::<std::arch::x86_64::__m512, 12, 24>(kc, ap, bp, c, ldc, row_max) }
}

/// [`micro_avx2`] stored, each row's maxima folded into its 8 running maxima.
///
/// # Safety
/// As [`micro_avx2`]'s, and `row_max` holds 6·8 writable values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn micro_max_avx2<V: crate::lanes::Lanes>(
    kc: usize,
    ap: *const f32,
    bp: *const f32,
    c: *mut f32,
    ldc: usize,
    row_max: *mut f32,
) {
    // SAFETY: compiled with avx2 and fma, which V's methods need; the caller's bounds are
    // micro_max's.
    unsafe { micro_max::<V, 6, 12>(kc, ap, bp, c, ldc, row_max) }
}

/// [`micro`]'s product stored into C (not added), and row i's two vectors folded into
/// `row_max[i·LANES..]`, lane by lane.
///
/// # Safety
/// As [`micro`]'s, and `row_max` holds R·LANES writable values.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn micro_max<V: crate::lanes::Lanes, const R: usize, const ACC: usize>(
    kc: usize,
    ap: *const f32,
    bp: *const f32,
    c: *mut f32,
    ldc: usize,
    row_max: *mut f32,
) {
    // SAFETY (all below): the caller's contract.
    let acc = unsafe { micro_acc::<V, R, ACC, R>(kc, ap, bp, c, ldc) };
    for i in 0..R {
        unsafe {
            V::store(c.add(i * ldc), acc[2 * i]);
            V::store(c.add(i * ldc + V::LANES), acc[2 * i + 1]);
            let m = row_max.add(i * V::LANES);
            V::store(m, V::max(V::load(m), V::max(acc[2 * i], acc[2 * i + 1])));
        }
    }
}

/// The register-tiled micro-kernel: C[R×2·LANES] (+)= Ap·Bp in `ACC` = 2·R vector accumulators
/// (a const parameter of its own: an array length cannot be computed from R on stable Rust), two
/// loads of B and R broadcasts of A a step; both panels prefetched ahead ([`micro_acc`]), the C
/// tile's lines fetched while the loop runs. A's panel holds `AS` ≥ R values a step: R for a
/// kernel's own panels, the panel height of a taller kernel for a short one that computes only
/// its first R rows.
///
/// # Safety
/// V's features are enabled; `ap` holds kc·AS values, `bp` kc·2·LANES, `c` R rows of 2·LANES
/// writable values with row stride `ldc`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn micro<V: crate::lanes::Lanes, const R: usize, const ACC: usize, const AS: usize>(
    kc: usize,
    ap: *const f32,
    bp: *const f32,
    c: *mut f32,
    ldc: usize,
    add: bool,
) {
    // SAFETY (all below): the caller's contract; rows i < R, columns < 2·LANES stay in the
    // caller's tile.
    let acc = unsafe { micro_acc::<V, R, ACC, AS>(kc, ap, bp, c, ldc) };
    for i in 0..R {
        for h in 0..2 {
            unsafe {
                let dst = c.add(i * ldc + h * V::LANES);
                let v = if add {
                    V::add(V::load(dst), acc[2 * i + h])
                } else {
                    acc[2 * i + h]
                };
                V::store(dst, v);
            }
        }
    }
}

/// Steps ahead of the one computed that the micro-kernel asks for A's panel.
#[cfg(target_arch = "x86_64")]
const A_PREFETCH_STEPS: usize = 32;

/// Steps ahead that it asks for B's panel. A k slice of the ledger's `GEMM_KC` makes B's
/// micro-panel (kc × nr) 64 KiB on AVX-512, more than a core's L1 data cache (32 or 48 KiB):
/// across a block's A panels it comes back from L2 at every call, as A's panel does, so both
/// are asked for ahead (docs/performance.md, "B's panel prefetched as well").
#[cfg(target_arch = "x86_64")]
const B_PREFETCH_STEPS: usize = 16;

/// The loop of [`micro`] and [`micro_max`]: the C tile's lines asked for, then the 2·R
/// accumulators of Ap·Bp over kc steps, A's and B's panels prefetched [`A_PREFETCH_STEPS`] and
/// [`B_PREFETCH_STEPS`] ahead (a hint past a panel's end never faults).
///
/// # Safety
/// As [`micro`]'s (C is only prefetched here).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn micro_acc<V: crate::lanes::Lanes, const R: usize, const ACC: usize, const AS: usize>(
    kc: usize,
    ap: *const f32,
    bp: *const f32,
    c: *mut f32,
    ldc: usize,
) -> [V; ACC] {
    use std::arch::x86_64::*;
    debug_assert_eq!(ACC, 2 * R);
    let nr = 2 * V::LANES;
    // The C tile is read (or written) after the loop: its lines are fetched meanwhile.
    for i in 0..R {
        for h in 0..2 {
            // SAFETY: prefetcht0 is a hint (never faults); SSE is part of x86_64.
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(c.wrapping_add(i * ldc + h * V::LANES) as *const i8)
            };
        }
    }
    // SAFETY (all below): V's features are enabled; p < kc bounds p·nr + nr ≤ kc·nr and
    // p·AS + R ≤ kc·AS (R ≤ AS), and rows i < R, columns < nr stay in the caller's tile.
    let mut acc = [unsafe { V::splat(0.0) }; ACC];
    for p in 0..kc {
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(ap.wrapping_add((p + A_PREFETCH_STEPS) * AS) as *const i8);
            // A step of B is nr values: one 64-byte line on AVX2, two on AVX-512.
            for line in (0..nr).step_by(16) {
                _mm_prefetch::<_MM_HINT_T0>(
                    bp.wrapping_add((p + B_PREFETCH_STEPS) * nr + line) as *const i8
                );
            }
            let b0 = V::load(bp.add(p * nr));
            let b1 = V::load(bp.add(p * nr + V::LANES));
            for i in 0..R {
                let a = V::splat(*ap.add(p * AS + i));
                acc[2 * i] = V::fmadd(a, b0, acc[2 * i]);
                acc[2 * i + 1] = V::fmadd(a, b1, acc[2 * i + 1]);
            }
        }
    }
    acc
}
