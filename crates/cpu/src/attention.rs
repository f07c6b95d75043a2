//! CPU kernels of attention forward, O = softmax(Q·Kᵀ/√d)·V per (batch, head), f32.
//!
//! - standard: three parallel passes (kernels): S = Q·Kᵀ·scale into memory (N×N per head, −∞
//!   above the diagonal when causal), P = softmax(S) into memory, O = P·V.
//! - flash: one pass over (head, tile of FLASH_BR query rows); each walks the key/value tiles of
//!   FLASH_BC rows (only up to the diagonal when causal), keeps the tile of scores in cache and
//!   folds it into the output with the online softmax (running max and sum, rescaling); the
//!   tile's probabilities are exponentiated as they are packed for the P·V product.
//!
//! Both compute their matrix products with the GEMM's packed, register-tiled micro-kernel on the
//! same block shapes, so the comparison isolates the IO of S and P, not the arithmetic.

use super::gemm::{Block, Mat, Tile, TileOut};
use super::rows::{exp_sub_sum_in_place_at, exp_sub_sum_pf_at, max_row, scale_in_place};
use super::simd::{level, SimdLevel};
use super::{CaseConfig, CpuKernels, Kernels};
use crate::error::Result;
use crate::kinds::attention::Attention;
use crate::kinds::tensors::LineVec;
use crate::kinds::{DType, Tensors, Variant};
use crate::ledger::{FLASH_BC, FLASH_BR};
use rayon::prelude::*;
use std::sync::Arc;

const BR: usize = FLASH_BR as usize;
const BC: usize = FLASH_BC as usize;

impl CpuKernels for Attention {
    fn cannot_run(&self) -> Option<String> {
        (self.dtype == DType::Bf16).then(|| {
            "dtype bf16 runs on the CUDA backend (tensor cores); the CPU backend computes attention in f32 only: use dtype f32 here, or --backend cuda".into()
        })
    }
    /// S and P of the standard variant, K and V packed.
    fn scratch_bytes(&self) -> u64 {
        2 * self.score_elements() * 4 + 2 * self.qkv_elements() * 4 + 2 * (4 << 20)
    }
    fn kernels(&self, inputs: Arc<Tensors>, _: &CaseConfig) -> Result<Box<dyn Kernels>> {
        Ok(Box::new(AttentionKernels::new(self.clone(), inputs)))
    }
}

/// Splits a `[heads][n][row_len]` buffer into one task per (head, block of BR rows), yielding
/// (head, first row, rows, block): the work unit of every attention pass.
fn head_tiles(
    buf: &mut [f32],
    n: usize,
    row_len: usize,
) -> impl ParallelIterator<Item = (usize, usize, usize, &mut [f32])> {
    buf.par_chunks_mut(n * row_len)
        .enumerate()
        .flat_map(move |(h, head)| {
            head.par_chunks_mut(BR * row_len)
                .enumerate()
                .map(move |(t, blk)| (h, t * BR, BR.min(n - t * BR), blk))
        })
}

/// K and V of every head packed once a call as the micro-kernel's B side, one block per
/// (head, key tile): Kᵀ panels (d deep) and V panels (tile rows deep). Every query tile reads
/// them (the ledger's re-reads of K and V) without packing them again.
struct PackedKv {
    t: Tile,
    kt: LineVec,
    vp: LineVec,
    /// Floats of one (head, key tile) block of `kt` and of `vp`.
    k_block: usize,
    v_block: usize,
    tiles: usize,
}

impl PackedKv {
    fn new(t: Tile, a: &Attention) -> Self {
        let (n, d, heads) = (
            a.seq_len as usize,
            a.head_dim as usize,
            a.heads_total() as usize,
        );
        let tiles = n.div_ceil(BC);
        let (k_block, v_block) = (t.b_len(BC, d), t.b_len(d, BC));
        PackedKv {
            kt: LineVec::zeroed_huge(heads * tiles * k_block),
            vp: LineVec::zeroed_huge(heads * tiles * v_block),
            t,
            k_block,
            v_block,
            tiles,
        }
    }

    fn pack(&mut self, k: &[f32], v: &[f32], n: usize, d: usize) {
        let (t, tiles) = (self.t, self.tiles);
        rayon::join(
            || {
                self.kt
                    .par_chunks_mut(self.k_block)
                    .enumerate()
                    .for_each(|(i, blk)| {
                        let (h, j0) = (i / tiles, (i % tiles) * BC);
                        t.pack_bt(k, d, h * n + j0, BC.min(n - j0), d, blk)
                    })
            },
            || {
                self.vp
                    .par_chunks_mut(self.v_block)
                    .enumerate()
                    .for_each(|(i, blk)| {
                        let (h, j0) = (i / tiles, (i % tiles) * BC);
                        t.pack_b(
                            Mat { data: v, ld: d },
                            Block {
                                r0: h * n + j0,
                                rows: BC.min(n - j0),
                                c0: 0,
                                cols: d,
                            },
                            blk,
                        )
                    })
            },
        );
    }

    fn k(&self, h: usize, j0: usize) -> &[f32] {
        let i = h * self.tiles + j0 / BC;
        &self.kt[i * self.k_block..(i + 1) * self.k_block]
    }

    fn v(&self, h: usize, j0: usize) -> &[f32] {
        let i = h * self.tiles + j0 / BC;
        &self.vp[i * self.v_block..(i + 1) * self.v_block]
    }
}

thread_local! {
    /// Per-thread buffers of the flash tasks (packed Q, packed P, the score tile): allocated
    /// once a thread, not once a task (rayon's `for_each_init` calls its init per split, and
    /// fresh pages cost page faults).
    static SCRATCH: std::cell::RefCell<FlashScratch> = const { std::cell::RefCell::new(FlashScratch::new()) };
}

/// A flash task's buffers: packed Q, packed P, the score tile, and the tile's rows' running
/// maxima (`Tile::store_max`).
struct FlashScratch {
    qp: Vec<f32>,
    pp: Vec<f32>,
    sbuf: Vec<f32>,
    maxima: Vec<f32>,
}

impl FlashScratch {
    const fn new() -> Self {
        FlashScratch {
            qp: Vec::new(),
            pp: Vec::new(),
            sbuf: Vec::new(),
            maxima: Vec::new(),
        }
    }
}

/// Packs the query rows of one task, times the softmax scale (so that the scores come out of
/// the micro-kernel scaled, without another pass over them).
fn pack_q(t: &Tile, q: &[f32], d: usize, row0: usize, rows: usize, scale: f32, qp: &mut Vec<f32>) {
    qp.resize(t.a_len(rows, d), 0.0);
    t.pack_a(
        Mat { data: q, ld: d },
        Block {
            r0: row0,
            rows,
            c0: 0,
            cols: d,
        },
        qp,
    );
    for v in qp.iter_mut() {
        *v *= scale;
    }
}

/// The shape of one block of attention: query rows, key (or value) columns, the head's width.
#[derive(Clone, Copy)]
struct BlockShape {
    rows: usize,
    cols: usize,
    d: usize,
}

/// s[i][j] (row stride `ld`) = Q_blockᵢ · K[j0 + j] (Q packed and scaled in `qp`, the key tile
/// packed in `kt`) for i < rows, j < cols; −∞ where key j0+j > query i0+i when causal. With
/// `row_max` (a tile without a mask), each row's scores are also folded into its running maxima
/// there (`t.max_lanes` a row, [`Tile::store_max`]).
fn scores_block(
    t: &Tile,
    (qp, kt): (&[f32], &[f32]),
    shape: BlockShape,
    (s, ld): (&mut [f32], usize),
    mask: Option<(usize, usize)>,
    mut row_max: Option<&mut [f32]>,
) {
    let BlockShape { rows, cols, d } = shape;
    for jp in 0..cols.div_ceil(t.nr) {
        let nr = t.nr.min(cols - jp * t.nr);
        let kpanel = &kt[jp * d * t.nr..(jp + 1) * d * t.nr];
        for ip in 0..rows.div_ceil(t.mr) {
            let mr = t.mr.min(rows - ip * t.mr);
            let qpanel = &qp[ip * d * t.mr..(ip + 1) * d * t.mr];
            let at = ip * t.mr * ld + jp * t.nr;
            let out = TileOut {
                c: &mut s[at..],
                ld,
                rows: mr,
                cols: nr,
            };
            match row_max.as_deref_mut() {
                Some(rm) => {
                    let lanes = t.max_lanes;
                    t.store_max(d, qpanel, kpanel, out, &mut rm[ip * t.mr * lanes..]);
                }
                None => t.store(d, qpanel, kpanel, out, false),
            }
            let Some((i0, j0)) = mask else { continue };
            for i in 0..mr {
                let r = ip * t.mr + i;
                // Keys after query i0 + r are masked: columns from i0 + r + 1 − j0 on.
                let first = (i0 + r + 1).saturating_sub(j0 + jp * t.nr).min(nr);
                s[r * ld + jp * t.nr + first..r * ld + jp * t.nr + nr].fill(f32::NEG_INFINITY);
            }
        }
    }
}

/// o (rows×d, row stride d) += P (rows×cols) · V tile (packed in `vt`); `pp` holds P packed.
fn pv_block(t: &Tile, pp: &mut Vec<f32>, p: Mat<'_>, vt: &[f32], shape: BlockShape, o: &mut [f32]) {
    let BlockShape { rows, cols, .. } = shape;
    pp.resize(t.a_len(rows, cols), 0.0);
    let blk = Block {
        r0: 0,
        rows,
        c0: 0,
        cols,
    };
    t.pack_a(p, blk, pp);
    pv_product(t, pp, vt, shape, o);
}

/// o (rows×d, row stride d) += P · V tile, P already packed in `pp` (as the micro-kernel's A
/// panels), V in `vt`.
fn pv_product(t: &Tile, pp: &[f32], vt: &[f32], shape: BlockShape, o: &mut [f32]) {
    let BlockShape { rows, cols, d } = shape;
    for jp in 0..d.div_ceil(t.nr) {
        let nr = t.nr.min(d - jp * t.nr);
        let vpanel = &vt[jp * cols * t.nr..(jp + 1) * cols * t.nr];
        for ip in 0..rows.div_ceil(t.mr) {
            let mr = t.mr.min(rows - ip * t.mr);
            let ppanel = &pp[ip * cols * t.mr..(ip + 1) * cols * t.mr];
            let out = TileOut {
                c: &mut o[ip * t.mr * d + jp * t.nr..],
                ld: d,
                rows: mr,
                cols: nr,
            };
            t.store(cols, ppanel, vpanel, out, true);
        }
    }
}

/// A query tile's probabilities P = exp(S − m) from its scores `s` (rows × cols, row stride
/// BC; `m` each row's maximum, −∞ for a row with no key in the tile), packed as the P·V
/// product's A panels into `pp`, each row's sum into `sums`. A panel of full height whose rows
/// are whole vectors is exponentiated as it is packed: one sweep over its scores, where
/// exponentiating in place and then packing read and wrote the tile twice. Any other panel is
/// exponentiated in place row by row (a row with no key: zeros) and packed after.
fn exp_pack(
    (l, t): (SimdLevel, &Tile),
    s: &mut [f32],
    (rows, cols): (usize, usize),
    m: &[f32],
    pp: &mut Vec<f32>,
    sums: &mut [f32],
) {
    pp.resize(t.a_len(rows, cols), 0.0);
    for (ip, panel) in pp.chunks_mut(cols * t.mr).enumerate() {
        let (r0, here) = (ip * t.mr, t.mr.min(rows - ip * t.mr));
        let rows_here = r0..r0 + here;
        let keyed = m[rows_here.clone()].iter().all(|&x| x != f32::NEG_INFINITY);
        if here == t.mr
            && keyed
            && exp_pack_panel(
                (l, t),
                s,
                (r0, cols),
                &m[rows_here.clone()],
                panel,
                &mut sums[rows_here.clone()],
            )
        {
            continue;
        }
        for r in rows_here {
            let srow = &mut s[r * BC..r * BC + cols];
            sums[r] = if m[r] == f32::NEG_INFINITY {
                srow.fill(0.0);
                0.0
            } else {
                exp_sub_sum_in_place_at(l, srow, m[r])
            };
        }
        let blk = Block {
            r0,
            rows: here,
            c0: 0,
            cols,
        };
        t.pack_a(Mat { data: s, ld: BC }, blk, panel);
    }
}

/// One full panel of [`exp_pack`] exponentiated as it is packed, where level `l` has such a
/// sweep and the rows are whole vectors (`false`: nothing done).
fn exp_pack_panel(
    (l, t): (SimdLevel, &Tile),
    s: &[f32],
    (r0, cols): (usize, usize),
    m: &[f32],
    panel: &mut [f32],
    sums: &mut [f32],
) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use super::math::{Fused, Separate};
        fn rows<const R: usize>(s: &[f32], r0: usize, cols: usize) -> [&[f32]; R] {
            std::array::from_fn(|i| &s[(r0 + i) * BC..(r0 + i) * BC + cols])
        }
        let panel = &mut panel[..cols * t.mr];
        assert!(super::simd::supports(l), "this CPU lacks {}", l.name());
        match (l, t.mr) {
            (SimdLevel::Avx512, 12) if cols % 16 == 0 => {
                // SAFETY: this CPU supports the level (asserted).
                unsafe { exp_pack12_avx512(&rows(s, r0, cols), m, panel, sums) };
                return true;
            }
            (SimdLevel::Avx2Fma, 6) if cols % 8 == 0 => {
                // SAFETY: as above.
                unsafe { exp_pack6_avx2::<Fused>(&rows(s, r0, cols), m, panel, sums) };
                return true;
            }
            (SimdLevel::Avx2NoFma, 6) if cols % 8 == 0 => {
                // SAFETY: as above (the level's CPU has FMA; `Separate` uses none).
                unsafe { exp_pack6_avx2::<Separate>(&rows(s, r0, cols), m, panel, sums) };
                return true;
            }
            _ => {}
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (l, t, s, r0, cols, m, panel, sums);
    false
}

/// [`exp_pack_panel`] on AVX-512: each row's 16 scores of a step less the row's maximum,
/// through [`super::math::exp_v`] (as the softmax sweep's), summed in one vector a row, and
/// packed.
///
/// # Safety
/// The CPU supports avx512f; the rows are `panel.len() / 12` long, a multiple of 16.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn exp_pack12_avx512(src: &[&[f32]; 12], m: &[f32], panel: &mut [f32], sums: &mut [f32]) {
    use std::arch::x86_64::*;
    let mv: [__m512; 12] = std::array::from_fn(|i| _mm512_set1_ps(m[i]));
    let mut acc = [_mm512_setzero_ps(); 12];
    // SAFETY: avx512f (this function's).
    let done = unsafe {
        super::gemm::pack12_avx512_with(src, panel, |i, v| {
            let e = super::math::exp_v(_mm512_sub_ps(v, mv[i]));
            acc[i] = _mm512_add_ps(acc[i], e);
            e
        })
    };
    assert_eq!(done * 12, panel.len(), "whole vectors of every row");
    for (sum, a) in sums.iter_mut().zip(acc) {
        *sum = _mm512_reduce_add_ps(a);
    }
}

/// [`exp_pack_panel`] on AVX2 (`M`: with FMA or without), 8 scores of a row a step, through
/// [`super::math::exp_v_avx2_n`] (as the softmax sweep's).
///
/// # Safety
/// The CPU supports avx2 and fma; the rows are `panel.len() / 6` long, a multiple of 8.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn exp_pack6_avx2<M: super::math::MulAdd>(
    src: &[&[f32]; 6],
    m: &[f32],
    panel: &mut [f32],
    sums: &mut [f32],
) {
    use std::arch::x86_64::*;
    let mv: [__m256; 6] = std::array::from_fn(|i| _mm256_set1_ps(m[i]));
    let mut acc = [_mm256_setzero_ps(); 6];
    // SAFETY: avx2 and fma (this function's).
    let done = unsafe {
        super::gemm::pack6_avx2_with(src, panel, |i, v| {
            let [e] = super::math::exp_v_avx2_n::<M, 1>([_mm256_sub_ps(v, mv[i])]);
            acc[i] = _mm256_add_ps(acc[i], e);
            e
        })
    };
    assert_eq!(done * 6, panel.len(), "whole vectors of every row");
    for (sum, a) in sums.iter_mut().zip(acc) {
        let mut lanes = [0f32; 8];
        // SAFETY: 8 writable floats.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), a) };
        *sum = lanes.iter().sum();
    }
}

pub struct AttentionKernels {
    a: Attention,
    inputs: Arc<Tensors>,
    s: LineVec,
    p: LineVec,
    kv: PackedKv,
    scale: f32,
    /// The SIMD level the softmax sweeps run at, the micro-kernel's (`kv.t`) too.
    level: SimdLevel,
}

impl AttentionKernels {
    pub fn new(a: Attention, inputs: Arc<Tensors>) -> Self {
        Self::at_level(a, inputs, level())
    }

    /// The kernels at SIMD level `l`, which this CPU must support (the tests run every level).
    pub fn at_level(a: Attention, inputs: Arc<Tensors>, l: SimdLevel) -> Self {
        let nn = a.score_elements() as usize;
        AttentionKernels {
            inputs,
            s: LineVec::zeroed(nn),
            p: LineVec::zeroed(nn),
            kv: PackedKv::new(Tile::of_level(l), &a),
            scale: a.softmax_scale(),
            level: l,
            a,
        }
    }

    fn standard(&mut self, out: &mut [f32]) {
        let (n, d, causal, scale) = (
            self.a.seq_len as usize,
            self.a.head_dim as usize,
            self.a.causal,
            self.scale,
        );
        let t = &self.inputs;
        let (q, k, v) = (t.get("Q"), t.get("K"), t.get("V"));
        self.kv.pack(k, v, n, d);
        let (kv, lvl) = (&self.kv, self.level);
        let tile = kv.t;
        // Pass 1: S = Q·Kᵀ·scale into memory, by blocks of BR query rows.
        head_tiles(&mut self.s, n, n).for_each_init(Vec::new, |qp, (h, i0, rows, sblk)| {
            pack_q(&tile, q, d, h * n + i0, rows, scale, qp);
            let kv_end = if causal { i0 + rows } else { n };
            for j0 in (0..kv_end).step_by(BC) {
                let cols = BC.min(n - j0);
                let mask = causal.then_some((i0, j0));
                let shape = BlockShape { rows, cols, d };
                scores_block(
                    &tile,
                    (qp, kv.k(h, j0)),
                    shape,
                    (&mut sblk[j0..], n),
                    mask,
                    None,
                );
            }
            if kv_end < n {
                // Beyond the diagonal blocks: masked.
                for r in 0..rows {
                    let start = kv_end.div_ceil(BC) * BC;
                    sblk[r * n + start.min(n)..(r + 1) * n].fill(f32::NEG_INFINITY);
                }
            }
        });
        // Pass 2: P = softmax(S), row by row, into memory.
        let s = &self.s;
        self.p
            .par_chunks_mut(n)
            .enumerate()
            .for_each(|(row, prow)| {
                let srow = &s[row * n..(row + 1) * n];
                let sum = exp_sub_sum_pf_at(lvl, srow, max_row(srow), prow, &[]);
                scale_in_place(prow, 1.0 / sum);
            });
        // Pass 3: O = P·V.
        let p = &self.p;
        head_tiles(out, n, d).for_each_init(Vec::new, |pp, (h, i0, rows, oblk)| {
            oblk.fill(0.0);
            let kv_end = if causal { i0 + rows } else { n };
            for j0 in (0..kv_end).step_by(BC) {
                let cols = BC.min(n - j0);
                let pblk = &p[(h * n + i0) * n + j0..];
                let p = Mat { data: pblk, ld: n };
                pv_block(
                    &tile,
                    pp,
                    p,
                    kv.v(h, j0),
                    BlockShape { rows, cols, d },
                    oblk,
                );
            }
        });
    }

    fn flash(&mut self, out: &mut [f32]) {
        let (n, d, causal, scale) = (
            self.a.seq_len as usize,
            self.a.head_dim as usize,
            self.a.causal,
            self.scale,
        );
        let t = &self.inputs;
        let (q, k, v) = (t.get("Q"), t.get("K"), t.get("V"));
        self.kv.pack(k, v, n, d);
        let (kv, lvl) = (&self.kv, self.level);
        let tile = kv.t;
        // One task per (head, query tile); its output rows are contiguous.
        head_tiles(out, n, d).for_each(|(h, i0, rows, otile)| {
            SCRATCH.with_borrow_mut(|scratch| {
                let FlashScratch {
                    qp,
                    pp,
                    sbuf,
                    maxima,
                } = scratch;
                sbuf.resize(BR * BC, 0.0);
                pack_q(&tile, q, d, h * n + i0, rows, scale, qp);
                let mut m = [f32::NEG_INFINITY; BR];
                let mut l = [0f32; BR];
                // A key tile's maxima its probabilities are taken against, and their sums.
                let mut m_tile = [0f32; BR];
                let mut sums = [0f32; BR];
                otile.fill(0.0);
                let kv_end = if causal { i0 + rows } else { n };
                for j0 in (0..kv_end).step_by(BC) {
                    let cols = BC.min(n - j0);
                    let mask = causal.then_some((i0, j0));
                    let shape = BlockShape { rows, cols, d };
                    // A tile without a mask has its rows' maxima found by the micro-kernel as
                    // it stores the scores (no sweep over them for it); a masked tile's are
                    // taken after its mask.
                    let lanes = tile.max_lanes;
                    let fused_max = mask.is_none();
                    if fused_max {
                        maxima.clear();
                        maxima.resize(rows.next_multiple_of(tile.mr) * lanes, f32::NEG_INFINITY);
                    }
                    let rm = fused_max.then_some(&mut maxima[..]);
                    scores_block(&tile, (qp, kv.k(h, j0)), shape, (sbuf, BC), mask, rm);
                    // Online softmax: each row's new maximum, what was summed rescaled to it.
                    for r in 0..rows {
                        let row_max = if fused_max {
                            maxima[r * lanes..(r + 1) * lanes]
                                .iter()
                                .fold(f32::NEG_INFINITY, |a, &b| if b > a { b } else { a })
                        } else {
                            max_row(&sbuf[r * BC..r * BC + cols])
                        };
                        if row_max == f32::NEG_INFINITY {
                            // The whole tile is masked for this row: its probabilities are 0.
                            m_tile[r] = f32::NEG_INFINITY;
                            continue;
                        }
                        let m_new = if row_max > m[r] { row_max } else { m[r] };
                        m_tile[r] = m_new;
                        if m_new != m[r] {
                            // One exponential a row: outside the multiversioned kernels a
                            // fused multiply-add is a library call, a multiply and an add
                            // are two instructions at every level.
                            let corr = super::math::exp::<super::math::Separate>(m[r] - m_new);
                            scale_in_place(&mut otile[r * d..(r + 1) * d], corr);
                            l[r] *= corr;
                        }
                        m[r] = m_new;
                    }
                    // P = exp(S − m), packed for the product as it is computed.
                    exp_pack((lvl, &tile), sbuf, (rows, cols), &m_tile, pp, &mut sums);
                    for (l, s) in l[..rows].iter_mut().zip(&sums) {
                        *l += s;
                    }
                    pv_product(&tile, pp, kv.v(h, j0), shape, otile);
                }
                for r in 0..rows {
                    scale_in_place(&mut otile[r * d..(r + 1) * d], 1.0 / l[r]);
                }
            })
        });
    }
}

impl Kernels for AttentionKernels {
    fn run(&mut self, variant: Variant, out: &mut [f32]) {
        if variant == Variant::Standard {
            self.standard(out)
        } else {
            self.flash(out)
        }
    }
    fn buffers(&self) -> Vec<&[f32]> {
        vec![&self.s, &self.p, &self.kv.kt, &self.kv.vp]
    }
    /// The flash tasks' per-thread buffers (a score tile and packed P of 256 KiB each).
    fn thread_buffers(&self, each: &(dyn Fn(&[&[f32]]) + Sync)) {
        rayon::broadcast(|_| SCRATCH.with_borrow(|s| each(&[&s.qp, &s.pp, &s.sbuf, &s.maxima])));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::Kind;

    /// At every SIMD level this CPU runs: ragged sizes take the packing after the
    /// exponentials (short panels, key tiles of a ragged width), whole ones the sweep that
    /// packs as it exponentiates.
    #[test]
    fn standard_and_flash_match_f64_causal_and_not_at_ragged_sizes() {
        for l in SimdLevel::ALL {
            if super::super::simd::supports(l) {
                match_f64_at(l);
            }
        }
    }

    fn match_f64_at(l: SimdLevel) {
        for (n, d, causal) in [
            (1, 8, false),
            (70, 16, true),
            (300, 24, false),
            (300, 24, true),
            (257, 128, true),
        ] {
            let a = Attention {
                batch: 1,
                heads: 2,
                seq_len: n,
                head_dim: d,
                causal,
                dtype: DType::F32,
            };
            let inputs = Arc::new(a.inputs(11));
            let mut k = AttentionKernels::at_level(a.clone(), inputs.clone(), l);
            for v in [Variant::Standard, Variant::Flash] {
                let mut out = vec![f32::NAN; a.output_len() as usize];
                k.run(v, &mut out);
                for i in (0..out.len()).step_by(7) {
                    let e = a.reference(&inputs, v, i);
                    assert!(
                        (out[i] as f64 - e).abs() <= 1e-5 + 1e-4 * e.abs(),
                        "{l:?} {v:?} n={n} d={d} causal={causal} [{i}] {} vs {e}",
                        out[i]
                    );
                }
                assert!(
                    out.iter().all(|x| x.is_finite()),
                    "{v:?} n={n}: every element written"
                );
            }
        }
    }
}
