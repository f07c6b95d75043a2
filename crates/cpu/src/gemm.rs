//! CPU kernels of GEMM, C = A·B (row-major f32).
//!
//! - naive: the textbook i-j-k triple loop, one row of C per task; B is walked down its columns.
//! - tiled: the BLIS/GotoBLAS structure: C in MC×NC blocks over KC slices of k; B and A packed
//!   into contiguous panels; an MR×NR register-tiled micro-kernel picked for the SIMD level
//!   ([`Tile`]: AVX-512 12×32 with 24 zmm accumulators, AVX2+FMA 6×16 with 12 ymm accumulators,
//!   both with broadcast loads of A; a 4×16 loop LLVM vectorizes elsewhere, NEON included). The
//!   block sizes are the ledger's (`GEMM_MC`, `GEMM_NC`, `GEMM_KC`), so its traffic model is this
//!   code's (MC rounded up to whole micro-panels): the packed A block (MC×KC) is sized for L2, a
//!   B micro-panel (KC×NR) for L1.
//!
//! The work of each (NC, KC) block is split over (MC block, column chunk) tasks, as many as
//! there are threads several times over, so the split holds on any thread count.

use super::simd::{supports, SimdLevel};
use super::{CaseConfig, CpuKernels, Kernels};
use crate::error::Result;
use crate::kinds::gemm::Gemm;
use crate::kinds::tensors::LineVec;
use crate::kinds::{Tensors, Variant};
use crate::ledger::{GEMM_KC, GEMM_MC, GEMM_NC};
use crate::multiversion;
use rayon::prelude::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

const MC: usize = GEMM_MC as usize;
const NC: usize = GEMM_NC as usize;
const KC: usize = GEMM_KC as usize;

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
    kernel: unsafe fn(usize, *const f32, *const f32, *mut f32, usize, bool),
}

impl Tile {
    /// The micro-kernel of this CPU's SIMD level.
    pub fn of_this_cpu() -> Tile {
        #[cfg(target_arch = "x86_64")]
        match super::simd::level() {
            super::simd::SimdLevel::Avx512 => {
                return Tile {
                    mr: 12,
                    nr: 32,
                    kernel: micro_avx512,
                }
            }
            super::simd::SimdLevel::Avx2Fma => {
                return Tile {
                    mr: 6,
                    nr: 16,
                    kernel: micro_avx2,
                }
            }
            super::simd::SimdLevel::Scalar => {}
        }
        Tile::portable()
    }

    /// The plain-loop micro-kernel (any CPU).
    pub fn portable() -> Tile {
        Tile {
            mr: PORTABLE_MR,
            nr: PORTABLE_NR,
            kernel: micro_portable_raw,
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

    /// acc (mr×nr, row stride nr) = Ap·Bp.
    pub fn into_acc(&self, kc: usize, ap: &[f32], bp: &[f32], acc: &mut [f32; MAX_TILE]) {
        self.full(kc, ap, bp, &mut acc[..self.mr * self.nr], self.nr, false)
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
        self.into_acc(kc, ap, bp, &mut acc);
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

/// Where a tile of C goes: C's values from the tile's first element, C's row stride, and the
/// rows and columns of C the tile covers (at most mr × nr).
pub struct TileOut<'a> {
    pub c: &'a mut [f32],
    pub ld: usize,
    pub rows: usize,
    pub cols: usize,
}

/// One mr-tall panel of A: the block's rows r0..r0+rows (rows ≤ mr, zero rows below), its
/// columns pc..pc+kc. Written in order (the mr values of step p, then step p+1), reading mr
/// rows side by side.
fn pack_a_panel(a: Mat<'_>, blk: Block, mr: usize, panel: &mut [f32]) {
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
fn pack_b_panel(b: Mat<'_>, blk: Block, nr: usize, panel: &mut [f32]) {
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
const B_ROWS_A_TASK: usize = 16;

/// Packs rows g·B_ROWS_A_TASK.. of the block `blk` of B (rows pc..pc+kc, columns jc..jc+nc)
/// into every nr-wide panel at `bp`.
///
/// # Safety
/// `bp` points to t.b_len(nc, kc) writable values that no other thread writes these rows of.
unsafe fn pack_b_rows(t: &Tile, b: Mat<'_>, blk: Block, g: usize, bp: CPtr) {
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

/// Held while a GEMM's parallel region runs: one region at a time in the pool.
static GEMM_REGION: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A barrier for the GEMM's threads, spinning (then yielding) instead of sleeping: a sleeping
/// thread of a VM wakes up hundreds of microseconds later, and a blocked GEMM of 16 phases paid
/// that 16 times (1024³ after another kernel: 17–27 ms against 9 ms back to back).
struct SpinBarrier {
    threads: usize,
    arrived: AtomicUsize,
    generation: AtomicUsize,
}

impl SpinBarrier {
    fn new(threads: usize) -> Self {
        SpinBarrier {
            threads,
            arrived: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
        }
    }

    /// Returns when every thread has called it; what each wrote before is visible to all after.
    fn wait(&self) {
        let generation = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.threads {
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Release);
            return;
        }
        let mut spins = 0u32;
        while self.generation.load(Ordering::Acquire) == generation {
            if spins < 1 << 16 {
                std::hint::spin_loop();
                spins += 1;
            } else {
                // More threads than cores: let the late ones run.
                std::thread::yield_now();
            }
        }
    }
}

impl CpuKernels for Gemm {
    fn scratch_bytes(&self) -> u64 {
        let t = Tile::of_this_cpu();
        // Each buffer rounded up to 2 MiB pages, plus one page of alignment slack.
        let huge = |floats: usize| (floats * 4).next_multiple_of(2 << 20) + (2 << 20);
        (huge(t.b_len(NC, KC)) + huge(t.a_len(self.m as usize, KC))) as u64
    }
    fn kernels(&self, inputs: Arc<Tensors>, _: &CaseConfig) -> Result<Box<dyn Kernels>> {
        Ok(Box::new(GemmKernels::new(self.clone(), inputs)))
    }
}

pub struct GemmKernels {
    g: Gemm,
    inputs: Arc<Tensors>,
    tile: Tile,
    /// Packed B block (KC×NC, in nr-wide panels), on 2 MiB pages as `ap`.
    bp: LineVec,
    /// Packed A (every row of A over one KC slice, in mr-tall panels).
    ap: LineVec,
}

/// C's base pointer shared by tasks that write disjoint tiles of it.
#[derive(Clone, Copy)]
struct CPtr(*mut f32);
// SAFETY: tasks given a CPtr write disjoint regions (distinct (MC block, column chunk) tiles),
// and the owner waits for all of them (rayon's scope) before touching C again.
unsafe impl Send for CPtr {}
unsafe impl Sync for CPtr {}

impl CPtr {
    /// The pointer (a method, so that closures capture the whole `CPtr`, not its field).
    fn at(self, offset: usize) -> *mut f32 {
        self.0.wrapping_add(offset)
    }
}

impl GemmKernels {
    pub fn new(g: Gemm, inputs: Arc<Tensors>) -> Self {
        let tile = Tile::of_this_cpu();
        GemmKernels {
            inputs,
            bp: LineVec::zeroed_huge(tile.b_len(NC, KC)),
            ap: LineVec::zeroed_huge(tile.a_len(g.m as usize, KC)),
            tile,
            g,
        }
    }

    fn naive(&self, c: &mut [f32]) {
        let (n, k) = (self.g.n as usize, self.g.k as usize);
        let (a, b) = (self.inputs.get("A"), self.inputs.get("B"));
        c.par_chunks_mut(n).enumerate().for_each(|(i, crow)| {
            let arow = &a[i * k..(i + 1) * k];
            for (j, cij) in crow.iter_mut().enumerate() {
                let mut s = 0f32;
                for p in 0..k {
                    s += arow[p] * b[p * n + j];
                }
                *cij = s;
            }
        });
    }

    /// One parallel region for the whole product: each (KC slice, NC block) step packs (B
    /// rows, and A's panels on the first block of a slice) then computes (MC block, column
    /// chunk) tasks, claimed from a counter by whichever thread is free; a barrier between.
    #[expect(
        clippy::too_many_lines,
        reason = "the tiled GEMM driver: the three cache-blocking loops around packing and the micro-kernel, whose indices every step shares"
    )]
    fn tiled(&mut self, c: &mut [f32]) {
        let (m, n, k) = (self.g.m as usize, self.g.n as usize, self.g.k as usize);
        let (a, b) = (self.inputs.get("A"), self.inputs.get("B"));
        let t = self.tile;
        // MC rounded up to whole micro-panels, so that every block starts on a packed panel.
        let mc_rows = MC.div_ceil(t.mr) * t.mr;
        let m_blocks = m.div_ceil(mc_rows);
        let a_panels = m.div_ceil(t.mr);
        // Called from inside a rayon task (a kernel nested in another parallel loop), the pool's
        // threads may be busy with the outer loop: this thread does the work alone. Otherwise
        // every pool thread takes part, one GEMM at a time (two broadcasts waiting on each
        // other's barriers would deadlock).
        let nested = rayon::current_thread_index().is_some();
        let threads = if nested {
            1
        } else {
            rayon::current_num_threads()
        };
        // The KC slice outermost: A's slice is packed once and its packed panels serve every NC
        // block (as many reads of them as the ledger counts of A, one pack instead of n/NC).
        let steps: Vec<(usize, usize)> = (0..k)
            .step_by(KC)
            .flat_map(|pc| (0..n).step_by(NC).map(move |jc| (pc, jc)))
            .collect();
        let claims: Vec<[AtomicUsize; 2]> = steps.iter().map(|_| Default::default()).collect();
        let barrier = SpinBarrier::new(threads);
        let (ap, bp, cp) = (
            CPtr(self.ap.as_mut_ptr()),
            CPtr(self.bp.as_mut_ptr()),
            CPtr(c.as_mut_ptr()),
        );
        let c_len = c.len();
        let work = || {
            for (&(pc, jc), claim) in steps.iter().zip(&claims) {
                let (kc, nc) = (KC.min(k - pc), NC.min(n - jc));
                let panels = nc.div_ceil(t.nr);
                // Column chunks per MC block: enough tasks for every thread several times over.
                let chunks = (4 * threads).div_ceil(m_blocks).clamp(1, panels);
                let panels_per_chunk = panels.div_ceil(chunks);
                let b_tasks = kc.div_ceil(B_ROWS_A_TASK);
                let a_tasks = if jc == 0 { a_panels } else { 0 };
                loop {
                    let i = claim[0].fetch_add(1, Ordering::Relaxed);
                    if i >= b_tasks + a_tasks {
                        break;
                    }
                    if i < b_tasks {
                        // SAFETY: bp holds b_len(NC, KC) ≥ b_len(nc, kc) values; task i owns
                        // rows i·B_ROWS_A_TASK.. (each i is claimed once).
                        unsafe {
                            pack_b_rows(
                                &t,
                                Mat { data: b, ld: n },
                                Block {
                                    r0: pc,
                                    rows: kc,
                                    c0: jc,
                                    cols: nc,
                                },
                                i,
                                bp,
                            )
                        };
                    } else {
                        let ip = i - b_tasks;
                        let r0 = ip * t.mr;
                        // SAFETY: panel ip of ap (a_len(m, KC) values), claimed once.
                        let panel = unsafe {
                            std::slice::from_raw_parts_mut(ap.at(ip * kc * t.mr), kc * t.mr)
                        };
                        pack_a_panel(
                            Mat { data: a, ld: k },
                            Block {
                                r0,
                                rows: t.mr.min(m - r0),
                                c0: pc,
                                cols: kc,
                            },
                            t.mr,
                            panel,
                        );
                    }
                }
                barrier.wait();
                // SAFETY: the packing above is complete (the barrier), nothing writes ap or bp
                // until the barrier below.
                let (ap, bp) = unsafe {
                    (
                        std::slice::from_raw_parts(ap.at(0), t.a_len(m, kc)),
                        std::slice::from_raw_parts(bp.at(0), t.b_len(nc, kc)),
                    )
                };
                loop {
                    let task = claim[1].fetch_add(1, Ordering::Relaxed);
                    if task >= m_blocks * chunks {
                        break;
                    }
                    let (ib, ch) = (task / chunks, task % chunks);
                    let ic = ib * mc_rows;
                    let mc = mc_rows.min(m - ic);
                    let jp_end = ((ch + 1) * panels_per_chunk).min(panels);
                    for jp in ch * panels_per_chunk..jp_end {
                        let j0 = jc + jp * t.nr;
                        let cols = t.nr.min(jc + nc - j0);
                        let bpanel = &bp[jp * kc * t.nr..(jp + 1) * kc * t.nr];
                        for ip in 0..mc.div_ceil(t.mr) {
                            let r0 = ic + ip * t.mr;
                            let rows = t.mr.min(m - r0);
                            let apanel = &ap[(r0 / t.mr) * kc * t.mr..(r0 / t.mr + 1) * kc * t.mr];
                            let start = r0 * n + j0;
                            let len = (rows - 1) * n + cols;
                            debug_assert!(start + len <= c_len);
                            // SAFETY: this task alone writes rows ic..ic+mc, columns of its
                            // chunk; start + len ≤ m·n = c.len() (r0 + rows ≤ m, j0 + cols ≤ n).
                            let ctile =
                                unsafe { std::slice::from_raw_parts_mut(cp.at(start), len) };
                            t.store(
                                kc,
                                apanel,
                                bpanel,
                                TileOut {
                                    c: ctile,
                                    ld: n,
                                    rows,
                                    cols,
                                },
                                pc > 0,
                            );
                        }
                    }
                }
                barrier.wait();
            }
        };
        if nested {
            work();
        } else {
            let _one_at_a_time = GEMM_REGION.lock().unwrap_or_else(|e| e.into_inner());
            rayon::broadcast(|_| work());
        }
    }
}

const PORTABLE_MR: usize = 4;
const PORTABLE_NR: usize = 16;

/// # Safety
/// `ap` holds kc·4 values, `bp` kc·16, `c` 4 rows of 16 writable values with row stride `ldc`.
unsafe fn micro_portable_raw(
    kc: usize,
    ap: *const f32,
    bp: *const f32,
    c: *mut f32,
    ldc: usize,
    add: bool,
) {
    // SAFETY: the caller's contract is these slices' bounds.
    let (ap, bp) = unsafe {
        (
            std::slice::from_raw_parts(ap, kc * PORTABLE_MR),
            std::slice::from_raw_parts(bp, kc * PORTABLE_NR),
        )
    };
    let mut acc = [[0f32; PORTABLE_NR]; PORTABLE_MR];
    micro_portable(kc, ap, bp, &mut acc);
    for (i, row) in acc.iter().enumerate() {
        // SAFETY: row i < 4 of the caller's tile, 16 values from c + i·ldc.
        let dst = unsafe { std::slice::from_raw_parts_mut(c.add(i * ldc), PORTABLE_NR) };
        for (d, s) in dst.iter_mut().zip(row) {
            *d = if add { *d + s } else { *s };
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
unsafe fn micro_avx512(
    kc: usize,
    ap: *const f32,
    bp: *const f32,
    c: *mut f32,
    ldc: usize,
    add: bool,
) {
    // SAFETY: compiled with avx512f; the caller's bounds are micro's.
    unsafe { micro::<std::arch::x86_64::__m512, 12, 24>(kc, ap, bp, c, ldc, add) }
}

/// 6×16 over kc steps: 12 ymm accumulators, two loads of B and six broadcasts of A a step
/// (15 of the 16 ymm registers).
///
/// # Safety
/// The CPU must support avx2 and fma; `ap` holds kc·6 values, `bp` kc·16, `c` 6 rows of 16
/// writable values with row stride `ldc`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn micro_avx2(
    kc: usize,
    ap: *const f32,
    bp: *const f32,
    c: *mut f32,
    ldc: usize,
    add: bool,
) {
    // SAFETY: compiled with avx2 and fma; the caller's bounds are micro's.
    unsafe { micro::<std::arch::x86_64::__m256, 6, 12>(kc, ap, bp, c, ldc, add) }
}

/// The register-tiled micro-kernel: C[R×2·LANES] (+)= Ap·Bp in `ACC` = 2·R vector accumulators
/// (a const parameter of its own: an array length cannot be computed from R on stable Rust), two
/// loads of B and R broadcasts of A a step; B prefetched 8 steps ahead, the C tile's lines
/// fetched while the loop runs.
///
/// # Safety
/// V's features are enabled; `ap` holds kc·R values, `bp` kc·2·LANES, `c` R rows of 2·LANES
/// writable values with row stride `ldc`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn micro<V: super::lanes::Lanes, const R: usize, const ACC: usize>(
    kc: usize,
    ap: *const f32,
    bp: *const f32,
    c: *mut f32,
    ldc: usize,
    add: bool,
) {
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
    // p·R + R ≤ kc·R, and rows i < R, columns < nr stay in the caller's tile.
    let mut acc = [unsafe { V::splat(0.0) }; ACC];
    for p in 0..kc {
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(bp.wrapping_add(p * nr + 8 * nr) as *const i8);
            let b0 = V::load(bp.add(p * nr));
            let b1 = V::load(bp.add(p * nr + V::LANES));
            for i in 0..R {
                let a = V::splat(*ap.add(p * R + i));
                acc[2 * i] = V::fmadd(a, b0, acc[2 * i]);
                acc[2 * i + 1] = V::fmadd(a, b1, acc[2 * i + 1]);
            }
        }
    }
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
                    // Fused multiply-adds (one rounding each), row p's first.
                    let v = a0.mul_add(b0[j], row[j]);
                    let v = a1.mul_add(b1[j], v);
                    let v = a2.mul_add(b2[j], v);
                    row[j] = a3.mul_add(b3[j], v);
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
                    row[j] = a.mul_add(br[j], row[j]);
                }
            }
            p += 1;
        }
    }
}

/// Rows of B a decode task's register kernel takes at a time: in place, the stretch of B (×
/// the block's width) that the row groups after the first re-read from L1/L2, and how far
/// ahead the first group asks for B's lines; packed, the most rows packed at a time.
const DECODE_KC: usize = 128;
/// The most bytes of B a decode task packs at a time: the larger the stretch, the fewer and
/// longer the runs of memory a task reads, and the product was fastest at 2 MiB although that
/// is more than L2 (docs/performance.md).
const DECODE_PANEL_BYTES: usize = 2 << 20;

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
    V: super::lanes::Lanes,
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
                    super::simd::prefetch_l2(b.wrapping_add((p + pf_rows) * ldb + h));
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

thread_local! {
    /// A thread's packed stretch of B for the decode kernels, kept between runs (its pages
    /// faulted in once, not at every product).
    static PANEL: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Row p of a stretch of B (its first `full` columns) into its place in each tile of the
/// packed stretch (tile t's kc × NR at t·kc·NR), NR a constant so that each piece is a few
/// vector moves, not a call to memcpy. NR = 0 stands for "not a kernel's width" and panics.
#[inline(always)]
fn pack_row<const NR: usize>(row: &[f32], panel: &mut [f32], stride: usize, p: usize) {
    assert!(NR > 0, "no register decode kernel is that wide");
    for (t, piece) in row.chunks_exact(NR).enumerate() {
        let at = t * stride + p * NR;
        let dst: &mut [f32; NR] = (&mut panel[at..at + NR]).try_into().expect("NR values");
        let src: &[f32; NR] = piece.try_into().expect("NR values");
        *dst = *src;
    }
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

/// AVX2+FMA: 6 rows × 16 columns, 12 ymm accumulators (with B's two and A's broadcast, 15 of
/// the 16 registers).
///
/// # Safety
/// The CPU supports avx2 and fma; [`decode_micro`]'s bounds with R = 6, 16 columns.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn decode_avx2(
    kc: usize,
    a: (*const f32, usize),
    b: (*const f32, usize),
    c: (*mut f32, usize),
    rows: usize,
    pf_rows: usize,
) {
    // SAFETY: compiled with avx2 and fma; the caller's bounds are decode_micro's.
    unsafe { decode_micro::<std::arch::x86_64::__m256, 6, 2, 12>(kc, a, b, c, rows, pf_rows) }
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
            f: decode_avx2,
            rows: 6,
            cols: 16,
            packed: true,
        }),
        _ => None,
    }
}

impl GemmKernels {
    /// The register kernels' decode product where the level's kernels take B packed (AVX2):
    /// each task owns a contiguous range of B's rows over B's whole width — one long
    /// run of memory, which the hardware prefetchers stream — and packs it a stretch at a
    /// time into tiles (kc × nr each, contiguous, a line apart so that the rows written into
    /// them do not fall into two of L1's sets) that the kernels then walk. A kernel
    /// walking B in place strides by a row of B at every step, a new 4 KiB page each time,
    /// where no hardware prefetcher follows, and AVX2's 16-column kernel ran at memory's
    /// latency, not its bandwidth (docs/performance.md). Each task sums into its own m × n, and the
    /// tasks' sums are added at the end; the column tail narrower than a kernel goes through
    /// [`decode_rows`].
    fn decode_packed(&self, kernel: DecodeKernel, at: &[f32], c: &mut [f32]) {
        let (kern, r, nr) = (kernel.f, kernel.rows, kernel.cols);
        let (m, n, k) = (self.g.m as usize, self.g.n as usize, self.g.k as usize);
        let b = self.inputs.get("B");
        let full = n / nr * nr;
        let kc_max = (DECODE_PANEL_BYTES / 4 / full.max(1)).clamp(8, DECODE_KC);
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
                    let len = (kc_max * nr + 16) * (full / nr);
                    if panel.len() < len {
                        panel.resize(len, 0.0);
                    }
                    let p0 = (split * rows_per_split).min(k);
                    let end = (p0 + rows_per_split).min(k);
                    let mut pc = p0;
                    while pc < end {
                        let kc = kc_max.min(end - pc);
                        let stride = kc * nr + 16;
                        for p in 0..kc {
                            let row = &b[(pc + p) * n..(pc + p) * n + full];
                            match nr {
                                16 => pack_row::<16>(row, panel, stride, p),
                                32 => pack_row::<32>(row, panel, stride, p),
                                _ => pack_row::<0>(row, panel, stride, p),
                            }
                        }
                        for t in 0..full / nr {
                            for ig in (0..m).step_by(r) {
                                // SAFETY: the level's kernel (decode_kernel asserted the CPU
                                // has it); rows pc..pc + kc < k of `at` (k × m) from column
                                // ig, (m − ig).min(r) of them; tile t's kc × nr in `panel`
                                // (full / nr tiles of kc_max·nr + 16) at t·stride; acc (m × n) at rows ig..
                                // and columns t·nr.. + nr ≤ full ≤ n.
                                unsafe {
                                    kern(
                                        kc,
                                        (at.as_ptr().add(pc * m + ig), m),
                                        (panel.as_ptr().add(t * stride), nr),
                                        (acc.as_mut_ptr().add(ig * n + t * nr), n),
                                        (m - ig).min(r),
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
    fn decode(&self, l: SimdLevel, c: &mut [f32]) {
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

impl Kernels for GemmKernels {
    fn run(&mut self, variant: Variant, out: &mut [f32]) {
        if variant == Variant::Naive {
            self.naive(out)
        } else if (self.g.m as usize) <= DECODE_MAX_M {
            self.decode(super::simd::level(), out)
        } else {
            self.tiled(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::tensors::uniform;
    use crate::kinds::{DType, Kind};

    #[test]
    fn naive_and_tiled_match_f64_at_ragged_sizes() {
        for (m, n, k) in [
            (1, 1, 1),
            (7, 33, 5),
            // The decode path: whole and partial column blocks, k not a multiple of four.
            (1, 513, 259),
            (8, 256, 4),
            (DECODE_MAX_M as u64, 300, 1030),
            (DECODE_MAX_M as u64 + 1, 40, 9),
            (MC as u64 + 3, NC as u64 + 17, KC as u64 + 9),
            (64, 64, 600),
        ] {
            let w = Gemm {
                m,
                n,
                k,
                dtype: DType::F32,
            };
            let inputs = Arc::new(w.inputs(3));
            let mut g = GemmKernels::new(w.clone(), inputs.clone());
            for v in [Variant::Naive, Variant::Tiled] {
                let mut out = vec![f32::NAN; (m * n) as usize];
                g.run(v, &mut out);
                for (i, &o) in out.iter().enumerate() {
                    let e = w.reference(&inputs, v, i);
                    assert!(
                        (o as f64 - e).abs() <= 1e-4 + 1e-4 * e.abs(),
                        "{v:?} {m}x{n}x{k} [{i}] {o} vs {e}"
                    );
                }
            }
        }
    }

    /// The decode path at every level this CPU has (register kernels and the L1 loop): row
    /// groups with fewer rows than the kernel's, column tails, k shorter and longer than a
    /// register kernel's stretch of B, row splits.
    #[test]
    fn decode_matches_f64_at_every_level() {
        for l in [SimdLevel::Scalar, SimdLevel::Avx2Fma, SimdLevel::Avx512] {
            if !supports(l) {
                continue;
            }
            for (m, n, k) in [
                (2, 70, 300),
                (16, 300, 1030),
                (9, 33, 5),
                (13, 48, 257),
                (7, 4096, 64),
            ] {
                let w = Gemm {
                    m,
                    n,
                    k,
                    dtype: DType::F32,
                };
                let inputs = Arc::new(w.inputs(11));
                let g = GemmKernels::new(w.clone(), inputs.clone());
                let mut out = vec![f32::NAN; (m * n) as usize];
                g.decode(l, &mut out);
                for (i, &o) in out.iter().enumerate() {
                    let e = w.reference(&inputs, Variant::Tiled, i);
                    assert!(
                        (o as f64 - e).abs() <= 1e-4 + 1e-4 * e.abs(),
                        "{l:?} {m}x{n}x{k} [{i}] {o} vs {e}"
                    );
                }
            }
        }
    }

    /// Two GEMMs at once from two threads, and GEMMs nested inside a parallel loop, finish with
    /// the right result (the parallel region is one at a time; nested calls run alone).
    #[test]
    fn concurrent_and_nested_gemms_finish_correctly() {
        let w = Gemm {
            m: 300,
            n: 520,
            k: 270,
            dtype: DType::F32,
        };
        let inputs = Arc::new(w.inputs(5));
        let expect = |out: &[f32]| {
            for i in (0..out.len()).step_by(97) {
                let e = w.reference(&inputs, Variant::Tiled, i);
                assert!(
                    (out[i] as f64 - e).abs() <= 1e-4 + 1e-4 * e.abs(),
                    "[{i}] {} vs {e}",
                    out[i]
                );
            }
        };
        let run = || {
            let mut g = GemmKernels::new(w.clone(), inputs.clone());
            let mut out = vec![f32::NAN; (w.m * w.n) as usize];
            g.run(Variant::Tiled, &mut out);
            out
        };
        let outs: Vec<Vec<f32>> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..3).map(|_| sc.spawn(run)).collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        outs.iter().for_each(|o| expect(o));
        let nested: Vec<Vec<f32>> = (0..3).into_par_iter().map(|_| run()).collect();
        nested.iter().for_each(|o| expect(o));
    }

    /// Every micro-kernel this CPU runs, full and edge tiles, set and accumulate, against f64.
    #[test]
    fn every_micro_kernel_of_this_cpu_matches_f64() {
        let tiles = [Tile::portable()];
        #[cfg(target_arch = "x86_64")]
        let tiles = {
            let mut tiles = tiles.to_vec();
            use crate::device::simd::SimdLevel;
            if super::super::simd::supports(SimdLevel::Avx2Fma) {
                tiles.push(Tile {
                    mr: 6,
                    nr: 16,
                    kernel: micro_avx2,
                });
            }
            if super::super::simd::supports(SimdLevel::Avx512) {
                tiles.push(Tile {
                    mr: 12,
                    nr: 32,
                    kernel: micro_avx512,
                });
            }
            tiles
        };
        let kc = 37;
        for t in tiles {
            let ap = uniform(kc * t.mr, 1, 0, -1.0, 1.0);
            let bp = uniform(kc * t.nr, 1, 1, -1.0, 1.0);
            let ldc = t.nr + 5;
            for (rows, cols) in [(t.mr, t.nr), (t.mr - 1, t.nr), (1, 3)] {
                for add in [false, true] {
                    let mut c = vec![0.5f32; t.mr * ldc];
                    t.store(
                        kc,
                        &ap,
                        &bp,
                        TileOut {
                            c: &mut c,
                            ld: ldc,
                            rows,
                            cols,
                        },
                        add,
                    );
                    for i in 0..t.mr {
                        for j in 0..ldc {
                            let got = c[i * ldc + j];
                            if i >= rows || j >= cols {
                                assert_eq!(got, 0.5, "{}x{} outside the tile written", t.mr, t.nr);
                                continue;
                            }
                            let dot: f64 = (0..kc)
                                .map(|p| ap[p * t.mr + i] as f64 * bp[p * t.nr + j] as f64)
                                .sum();
                            let e = dot + if add { 0.5 } else { 0.0 };
                            assert!(
                                (got as f64 - e).abs() < 1e-4,
                                "{}x{} [{i},{j}] {got} vs {e}",
                                t.mr,
                                t.nr
                            );
                        }
                    }
                }
            }
        }
    }
}
