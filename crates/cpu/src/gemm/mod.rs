//! CPU kernels of GEMM, C = A·B (row-major f32).
//!
//! - naive: the textbook i-j-k triple loop, one row of C per task; B is walked down its columns.
//! - tiled: the BLIS/GotoBLAS structure: C in MC×NC blocks over KC slices of k; B and A packed
//!   into contiguous panels; an MR×NR register-tiled micro-kernel picked for the SIMD level
//!   ([`Tile`]: AVX-512 12×32 with 24 zmm accumulators, AVX2+FMA 6×16 with 12 ymm accumulators,
//!   both with broadcast loads of A; a 4×16 loop LLVM vectorizes elsewhere, NEON included). The
//!   block sizes are the ledger's (`GEMM_MC`, `GEMM_NC`, `GEMM_KC`), so its traffic model is this
//!   code's (MC rounded up to whole micro-panels): the packed A block (MC×KC, 264 KiB) is sized
//!   for L2; a B micro-panel (KC×NR: 64 KiB at AVX-512, 32 KiB at AVX2) is read from L1 or,
//!   asked for ahead by the micro-kernel, from L2 (the ledger's note on `GEMM_KC`).
//!
//! The work of each (NC, KC) block is split over (MC block, column chunk) tasks, as many as
//! there are threads several times over, so the split holds on any thread count.
//!
//! One file a job: the micro-kernels and their tile (`micro`), the packing of A and B into
//! panels (`pack`), the decode product for a handful of rows of A (`decode`), and here the
//! driver that splits the blocks over the threads.

mod decode;
mod micro;
mod pack;

pub use decode::DECODE_MAX_M;
pub use micro::{Tile, TileOut, MAX_TILE};
#[cfg(target_arch = "x86_64")]
pub(crate) use pack::{pack12_avx512_with, pack6_avx2_with};
use pack::{pack_a_panel, pack_b_panel, pack_b_rows, B_ROWS_A_TASK};
pub use pack::{Block, Mat};

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

/// The cache blocking of a tiled product: C in `mc`×`nc` blocks over `kc` slices of k.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocks {
    pub mc: usize,
    pub nc: usize,
    pub kc: usize,
}

impl Blocks {
    /// The ledger's blocking, which the ledger's traffic model counts.
    pub const LEDGER: Blocks = Blocks {
        mc: MC,
        nc: NC,
        kc: KC,
    };
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
        let b = Blocks::LEDGER;
        (huge(t.b_len(b.nc, b.kc)) + huge(t.a_len(self.m as usize, b.kc))) as u64
    }
    fn kernels(&self, inputs: Arc<Tensors>, _: &CaseConfig) -> Result<Box<dyn Kernels>> {
        Ok(Box::new(GemmKernels::new(self.clone(), inputs)))
    }
}

pub struct GemmKernels {
    g: Gemm,
    inputs: Arc<Tensors>,
    tile: Tile,
    blocks: Blocks,
    /// Packed B block (KC×NC, in nr-wide panels), on 2 MiB pages as `ap`.
    bp: LineVec,
    /// Packed A (every row of A over one KC slice, in mr-tall panels).
    ap: LineVec,
    /// The decode product's buffers (m ≤ [`DECODE_MAX_M`]).
    decode: decode::DecodeScratch,
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
        Self::with_blocks(g, inputs, Blocks::LEDGER)
    }

    /// The kernels with a blocking of their own (the ledger counts [`Blocks::LEDGER`]'s).
    pub fn with_blocks(g: Gemm, inputs: Arc<Tensors>, blocks: Blocks) -> Self {
        assert!(
            blocks.mc > 0 && blocks.nc > 0 && blocks.kc > 0,
            "a blocking of empty blocks: {blocks:?}"
        );
        let tile = Tile::of_this_cpu();
        GemmKernels {
            inputs,
            bp: LineVec::zeroed_huge(tile.b_len(blocks.nc, blocks.kc)),
            ap: LineVec::zeroed_huge(tile.a_len(g.m as usize, blocks.kc)),
            tile,
            blocks,
            g,
            decode: decode::DecodeScratch::default(),
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
        let Blocks {
            mc: block_rows,
            nc: block_cols,
            kc: block_depth,
        } = self.blocks;
        // MC rounded up to whole micro-panels, so that every block starts on a packed panel.
        let mc_rows = block_rows.div_ceil(t.mr) * t.mr;
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
            .step_by(block_depth)
            .flat_map(|pc| (0..n).step_by(block_cols).map(move |jc| (pc, jc)))
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
                let (kc, nc) = (block_depth.min(k - pc), block_cols.min(n - jc));
                let panels = nc.div_ceil(t.nr);
                // Column chunks per MC block: tasks for every thread 16 times over, so that the
                // last claimed even out the threads' finishing times (at 4 a thread, 1152³'s nine
                // MC blocks made nine tasks for two threads: one did five, the other waited).
                let chunks = (16 * threads).div_ceil(m_blocks).clamp(1, panels);
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
    fn buffers(&self) -> Vec<&[f32]> {
        let mut held = vec![&self.bp[..], &self.ap[..]];
        held.extend(self.decode.buffers());
        held
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
    /// register kernel's stretch of B, row splits, several column blocks; run twice on the same
    /// kernels (their buffers kept between runs).
    #[test]
    fn decode_matches_f64_at_every_level() {
        for l in SimdLevel::ALL {
            if !supports(l) {
                continue;
            }
            for (m, n, k) in [
                (2, 70, 300),
                (16, 300, 1030),
                (9, 33, 5),
                (13, 48, 257),
                (7, 4096, 64),
                // Two column blocks (4096 columns each at m = 16), a tail of 8, row splits where there
                // are several threads.
                (16, 4136, 70),
                // One row of B: a stretch shorter than a kernel call's.
                (16, 64, 1),
            ] {
                let w = Gemm {
                    m,
                    n,
                    k,
                    dtype: DType::F32,
                };
                let inputs = Arc::new(w.inputs(11));
                let mut g = GemmKernels::new(w.clone(), inputs.clone());
                let mut out = vec![f32::NAN; (m * n) as usize];
                // Twice: the second run reuses the first's buffers and must not add to them.
                g.decode(l, &mut out);
                out.fill(f32::NAN);
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

    /// [`Tile::store_max`] of one tile: C as a plain store writes it, and each row's running
    /// maxima (row 1's started above every product) reduce to the larger of their start and
    /// the row's largest product.
    fn check_store_max(
        t: &Tile,
        kc: usize,
        (ap, bp): (&[f32], &[f32]),
        ldc: usize,
        (rows, cols): (usize, usize),
    ) {
        let mut c = vec![0.5f32; t.mr * ldc];
        let lanes = t.max_lanes;
        let mut row_max = vec![f32::NEG_INFINITY; t.mr * lanes];
        row_max[lanes + lanes - 1] = 1e6;
        t.store_max(
            kc,
            ap,
            bp,
            TileOut {
                c: &mut c,
                ld: ldc,
                rows,
                cols,
            },
            &mut row_max,
        );
        for i in 0..t.mr {
            let dots: Vec<f64> = (0..cols)
                .map(|j| {
                    (0..kc)
                        .map(|p| ap[p * t.mr + i] as f64 * bp[p * t.nr + j] as f64)
                        .sum()
                })
                .collect();
            for j in 0..ldc {
                let got = c[i * ldc + j];
                if i >= rows || j >= cols {
                    assert_eq!(got, 0.5, "{}x{} max: outside the tile written", t.mr, t.nr);
                } else {
                    assert!(
                        (got as f64 - dots[j]).abs() < 1e-4,
                        "{}x{} max: [{i},{j}]",
                        t.mr,
                        t.nr
                    );
                }
            }
            let got = row_max[i * lanes..(i + 1) * lanes]
                .iter()
                .fold(f32::NEG_INFINITY, |a, &b| a.max(b));
            let want = if i == 1 {
                1e6
            } else if i < rows {
                dots.iter().copied().fold(f64::NEG_INFINITY, f64::max)
            } else {
                f64::NEG_INFINITY
            };
            assert!(
                got as f64 == want || (got as f64 - want).abs() < 1e-4,
                "{}x{} rows {rows} cols {cols}: row {i}'s maximum {got} vs {want}",
                t.mr,
                t.nr
            );
        }
    }

    /// Every micro-kernel this CPU runs, full and edge tiles, set and accumulate, against f64.
    #[test]
    fn every_micro_kernel_of_this_cpu_matches_f64() {
        // The kernels of every level this CPU runs (the portable one at Scalar).
        let tiles = crate::device::simd::SimdLevel::ALL
            .iter()
            .filter(|&&l| super::super::simd::supports(l))
            .map(|&l| Tile::of_level(l));
        let kc = 37;
        for t in tiles {
            let ap = uniform(kc * t.mr, 1, 0, -1.0, 1.0);
            let bp = uniform(kc * t.nr, 1, 1, -1.0, 1.0);
            let ldc = t.nr + 5;
            // Full, edge by the full kernel, edge by each short kernel (8 rows and fewer, 4 and
            // fewer).
            for (rows, cols) in [
                (t.mr, t.nr),
                (t.mr - 1, t.nr),
                (8, t.nr),
                (5, t.nr - 1),
                (4, t.nr),
                (3, t.nr - 1),
                (1, 3),
            ]
            .into_iter()
            .filter(|&(rows, _)| rows <= t.mr)
            {
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
                check_store_max(&t, kc, (&ap, &bp), ldc, (rows, cols));
            }
        }
    }
}
