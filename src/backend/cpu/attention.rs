//! CPU kernels of attention forward, O = softmax(Q·Kᵀ/√d)·V per (batch, head), f32.
//!
//! - standard: three parallel passes (kernels): S = Q·Kᵀ·scale into memory (N×N per head, −∞
//!   above the diagonal when causal), P = softmax(S) into memory, O = P·V.
//! - flash: one pass over (head, tile of FLASH_BR query rows); each walks the key/value tiles of
//!   FLASH_BC rows (only up to the diagonal when causal), keeps the tile of scores in cache and
//!   folds it into the output with the online softmax (running max and sum, rescaling).
//!
//! Both compute their matrix products with the GEMM's packed, register-tiled micro-kernel on the
//! same block shapes, so the comparison isolates the IO of S and P, not the arithmetic.

use super::gemm::Tile;
use super::rows::{exp_sub_sum_row, max_row, scale_in_place};
use super::{CaseConfig, CpuKernels, Kernels};
use crate::error::Result;
use crate::kinds::attention::Attention;
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
    /// S and P of the standard variant.
    fn scratch_bytes(&self) -> u64 {
        2 * self.score_elements() * 4
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

/// Scratch buffers of one task: the micro-kernel and its packed operands.
struct Scratch {
    t: Tile,
    qp: Vec<f32>,
    kt: Vec<f32>,
    pp: Vec<f32>,
    vp: Vec<f32>,
}

impl Scratch {
    fn new(t: Tile, d: usize) -> Self {
        Scratch {
            qp: vec![0f32; t.a_len(BR, d)],
            kt: vec![0f32; t.b_len(BC, d)],
            pp: vec![0f32; t.a_len(BR, BC)],
            vp: vec![0f32; t.b_len(d, BC)],
            t,
        }
    }
}

/// s[i][j] (row stride `ld`) = scale · Q_blockᵢ · K[krow0 + j] for i < rows, j < cols, with the
/// Q block already packed in `sc.qp`; entries where key j0+j > query i0+i are −∞ when causal.
#[allow(clippy::too_many_arguments)]
fn scores_block(
    sc: &mut Scratch,
    rows: usize,
    k: &[f32],
    d: usize,
    krow0: usize,
    cols: usize,
    scale: f32,
    s: &mut [f32],
    ld: usize,
    mask: Option<(usize, usize)>,
) {
    let t = sc.t;
    t.pack_bt(k, d, krow0, cols, d, &mut sc.kt);
    for jp in 0..cols.div_ceil(t.nr) {
        let nr = t.nr.min(cols - jp * t.nr);
        let kpanel = &sc.kt[jp * d * t.nr..(jp + 1) * d * t.nr];
        for ip in 0..rows.div_ceil(t.mr) {
            let mr = t.mr.min(rows - ip * t.mr);
            let qpanel = &sc.qp[ip * d * t.mr..(ip + 1) * d * t.mr];
            let at = ip * t.mr * ld + jp * t.nr;
            t.store(d, qpanel, kpanel, &mut s[at..], ld, mr, nr, false);
            for i in 0..mr {
                let r = ip * t.mr + i;
                let row = &mut s[r * ld + jp * t.nr..r * ld + jp * t.nr + nr];
                match mask {
                    Some((i0, j0)) if j0 + jp * t.nr + nr > i0 + r => {
                        for (j, o) in row.iter_mut().enumerate() {
                            *o = if j0 + jp * t.nr + j > i0 + r {
                                f32::NEG_INFINITY
                            } else {
                                *o * scale
                            };
                        }
                    }
                    _ => scale_in_place(row, scale),
                }
            }
        }
    }
}

/// o (rows×d, row stride d) += P (rows×cols, row stride ldp) · V[vrow0 .. vrow0 + cols].
#[allow(clippy::too_many_arguments)]
fn pv_block(
    sc: &mut Scratch,
    p: &[f32],
    ldp: usize,
    rows: usize,
    cols: usize,
    v: &[f32],
    d: usize,
    vrow0: usize,
    o: &mut [f32],
) {
    let t = sc.t;
    t.pack_a(p, ldp, 0, rows, 0, cols, &mut sc.pp);
    t.pack_b(v, d, vrow0, cols, 0, d, &mut sc.vp);
    for jp in 0..d.div_ceil(t.nr) {
        let nr = t.nr.min(d - jp * t.nr);
        let vpanel = &sc.vp[jp * cols * t.nr..(jp + 1) * cols * t.nr];
        for ip in 0..rows.div_ceil(t.mr) {
            let mr = t.mr.min(rows - ip * t.mr);
            let ppanel = &sc.pp[ip * cols * t.mr..(ip + 1) * cols * t.mr];
            t.store(
                cols,
                ppanel,
                vpanel,
                &mut o[ip * t.mr * d + jp * t.nr..],
                d,
                mr,
                nr,
                true,
            );
        }
    }
}

pub struct AttentionKernels {
    a: Attention,
    inputs: Arc<Tensors>,
    s: Vec<f32>,
    p: Vec<f32>,
    scale: f32,
}

impl AttentionKernels {
    pub fn new(a: Attention, inputs: Arc<Tensors>) -> Self {
        let nn = a.score_elements() as usize;
        AttentionKernels {
            inputs,
            s: vec![0f32; nn],
            p: vec![0f32; nn],
            scale: a.softmax_scale(),
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
        // Pass 1: S = Q·Kᵀ·scale into memory, by blocks of BR query rows.
        head_tiles(&mut self.s, n, n).for_each_init(
            || Scratch::new(Tile::of_this_cpu(), d),
            |sc, (h, i0, rows, sblk)| {
                sc.t.pack_a(q, d, h * n + i0, rows, 0, d, &mut sc.qp);
                let kv_end = if causal { i0 + rows } else { n };
                for j0 in (0..kv_end).step_by(BC) {
                    let cols = BC.min(n - j0);
                    scores_block(
                        sc,
                        rows,
                        k,
                        d,
                        h * n + j0,
                        cols,
                        scale,
                        &mut sblk[j0..],
                        n,
                        causal.then_some((i0, j0)),
                    );
                }
                if kv_end < n {
                    // Beyond the diagonal blocks: masked.
                    for r in 0..rows {
                        let start = kv_end.div_ceil(BC) * BC;
                        sblk[r * n + start.min(n)..(r + 1) * n].fill(f32::NEG_INFINITY);
                    }
                }
            },
        );
        // Pass 2: P = softmax(S), row by row, into memory.
        let s = &self.s;
        self.p
            .par_chunks_mut(n)
            .enumerate()
            .for_each(|(row, prow)| {
                let srow = &s[row * n..(row + 1) * n];
                let sum = exp_sub_sum_row(srow, max_row(srow), prow);
                scale_in_place(prow, 1.0 / sum);
            });
        // Pass 3: O = P·V.
        let p = &self.p;
        head_tiles(out, n, d).for_each_init(
            || Scratch::new(Tile::of_this_cpu(), d),
            |sc, (h, i0, rows, oblk)| {
                oblk.fill(0.0);
                let kv_end = if causal { i0 + rows } else { n };
                for j0 in (0..kv_end).step_by(BC) {
                    let cols = BC.min(n - j0);
                    pv_block(
                        sc,
                        &p[(h * n + i0) * n + j0..],
                        n,
                        rows,
                        cols,
                        v,
                        d,
                        h * n + j0,
                        oblk,
                    );
                }
            },
        );
    }

    fn flash(&self, out: &mut [f32]) {
        let (n, d, causal, scale) = (
            self.a.seq_len as usize,
            self.a.head_dim as usize,
            self.a.causal,
            self.scale,
        );
        let t = &self.inputs;
        let (q, k, v) = (t.get("Q"), t.get("K"), t.get("V"));
        // One task per (head, query tile); its output rows are contiguous.
        head_tiles(out, n, d).for_each_init(
            || (Scratch::new(Tile::of_this_cpu(), d), vec![0f32; BR * BC]),
            |(sc, sbuf), (h, i0, rows, otile)| {
                sc.t.pack_a(q, d, h * n + i0, rows, 0, d, &mut sc.qp);
                let mut m = [f32::NEG_INFINITY; BR];
                let mut l = [0f32; BR];
                otile.fill(0.0);
                let kv_end = if causal { i0 + rows } else { n };
                for j0 in (0..kv_end).step_by(BC) {
                    let cols = BC.min(n - j0);
                    scores_block(
                        sc,
                        rows,
                        k,
                        d,
                        h * n + j0,
                        cols,
                        scale,
                        sbuf,
                        BC,
                        causal.then_some((i0, j0)),
                    );
                    // Online softmax: P = exp(S − m_new) in place, rescale what was summed.
                    for r in 0..rows {
                        let srow = &mut sbuf[r * BC..r * BC + cols];
                        let row_max = max_row(srow);
                        if row_max == f32::NEG_INFINITY {
                            srow.fill(0.0); // the whole tile is masked for this row
                            continue;
                        }
                        let m_new = if row_max > m[r] { row_max } else { m[r] };
                        let mut prow = [0f32; BC];
                        let psum = exp_sub_sum_row(srow, m_new, &mut prow[..cols]);
                        srow.copy_from_slice(&prow[..cols]);
                        let corr = super::math::exp(m[r] - m_new);
                        scale_in_place(&mut otile[r * d..(r + 1) * d], corr);
                        l[r] = l[r] * corr + psum;
                        m[r] = m_new;
                    }
                    pv_block(sc, sbuf, BC, rows, cols, v, d, h * n + j0, otile);
                }
                for r in 0..rows {
                    scale_in_place(&mut otile[r * d..(r + 1) * d], 1.0 / l[r]);
                }
            },
        );
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::Kind;

    #[test]
    fn standard_and_flash_match_f64_causal_and_not_at_ragged_sizes() {
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
            let mut k = AttentionKernels::new(a.clone(), inputs.clone());
            for v in [Variant::Standard, Variant::Flash] {
                let mut out = vec![f32::NAN; a.output_len() as usize];
                k.run(v, &mut out);
                for i in (0..out.len()).step_by(7) {
                    let e = a.reference(&inputs, v, i);
                    assert!(
                        (out[i] as f64 - e).abs() <= 1e-5 + 1e-4 * e.abs(),
                        "{v:?} n={n} d={d} causal={causal} [{i}] {} vs {e}",
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
