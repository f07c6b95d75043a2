//! CPU kernels of attention forward, O = softmax(Q·Kᵀ/√d)·V per (batch, head), f32.
//!
//! - standard: three parallel passes (kernels): S = Q·Kᵀ·scale into memory (N×N per head, with
//!   −∞ above the diagonal when causal), P = softmax(S) into memory, O = P·V.
//! - flash: one pass over (head, tile of FLASH_BR query rows); each walks the key/value tiles of
//!   FLASH_BC rows (only up to the diagonal when causal), keeps the tile of scores in L1 and
//!   folds it into the output with the online softmax (running max and sum, rescaling).
//!
//! Both use the same dot-product and axpy routines, so the comparison isolates the IO of S and
//! P rather than a difference in arithmetic kernels.

use super::rows::{exp_sub_sum_row, max_row, scale_in_place};
use super::Kernels;
use crate::backend::inputs::uniform;
use crate::ledger::{FLASH_BC, FLASH_BR};
use crate::multiversion;
use crate::spec::{Attention, Variant};
use rayon::prelude::*;

const BR: usize = FLASH_BR as usize;
const BC: usize = FLASH_BC as usize;

multiversion! {
    fn dot(x: &[f32], y: &[f32]) -> f32 {
        const L: usize = 32;
        let mut acc = [0f32; L];
        let (xc, yc) = (x.chunks_exact(L), y.chunks_exact(L));
        let tail: f32 = xc.remainder().iter().zip(yc.remainder()).map(|(a, b)| a * b).sum();
        for (a, b) in xc.zip(yc) {
            for l in 0..L {
                acc[l] += a[l] * b[l];
            }
        }
        acc.iter().sum::<f32>() + tail
    }
}

multiversion! {
    /// y += alpha·x
    fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
        for (y, &x) in y.iter_mut().zip(x) {
            *y += alpha * x;
        }
    }
}

/// Host bytes of a case: Q, K, V, two outputs, and S, P of the standard variant.
pub fn required_bytes(a: &Attention) -> u64 {
    let qkv = a.heads_total() * a.seq_len * a.head_dim * 4;
    5 * qkv + 2 * a.heads_total() * a.seq_len * a.seq_len * 4
}

pub struct AttentionKernels {
    a: Attention,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    s: Vec<f32>,
    p: Vec<f32>,
    scale: f32,
}

impl AttentionKernels {
    pub fn new(a: Attention, seed: u64) -> Self {
        let n = (a.heads_total() * a.seq_len * a.head_dim) as usize;
        let nn = (a.heads_total() * a.seq_len * a.seq_len) as usize;
        AttentionKernels {
            q: uniform(n, seed, 0, -1.0, 1.0),
            k: uniform(n, seed, 1, -1.0, 1.0),
            v: uniform(n, seed, 2, -1.0, 1.0),
            s: vec![0f32; nn],
            p: vec![0f32; nn],
            scale: 1.0 / (a.head_dim as f32).sqrt(),
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
        let (q, k, v) = (&self.q, &self.k, &self.v);
        // S = Q·Kᵀ·scale, one row of S per task group.
        self.s
            .par_chunks_mut(n)
            .enumerate()
            .for_each(|(row, srow)| {
                let (h, i) = (row / n, row % n);
                let qi = &q[(h * n + i) * d..(h * n + i + 1) * d];
                for (j, sij) in srow.iter_mut().enumerate() {
                    *sij = if causal && j > i {
                        f32::NEG_INFINITY
                    } else {
                        dot(qi, &k[(h * n + j) * d..(h * n + j + 1) * d]) * scale
                    };
                }
            });
        // P = softmax(S), row by row.
        let s = &self.s;
        self.p
            .par_chunks_mut(n)
            .enumerate()
            .for_each(|(row, prow)| {
                let srow = &s[row * n..(row + 1) * n];
                let sum = exp_sub_sum_row(srow, max_row(srow), prow);
                scale_in_place(prow, 1.0 / sum);
            });
        // O = P·V.
        let p = &self.p;
        out.par_chunks_mut(d).enumerate().for_each(|(row, orow)| {
            let (h, i) = (row / n, row % n);
            orow.fill(0.0);
            let last = if causal { i + 1 } else { n };
            for j in 0..last {
                axpy(
                    p[row * n + j],
                    &v[(h * n + j) * d..(h * n + j + 1) * d],
                    orow,
                );
            }
        });
    }

    fn flash(&self, out: &mut [f32]) {
        let (n, d, causal, scale) = (
            self.a.seq_len as usize,
            self.a.head_dim as usize,
            self.a.causal,
            self.scale,
        );
        let (q, k, v) = (&self.q, &self.k, &self.v);
        // One task per (head, query tile); its output rows are contiguous.
        out.par_chunks_mut(n * d)
            .enumerate()
            .flat_map(|(h, ohead)| {
                ohead
                    .par_chunks_mut(BR * d)
                    .enumerate()
                    .map(move |(qt, otile)| (h, qt, otile))
            })
            .for_each(|(h, qt, otile)| {
                let i0 = qt * BR;
                let rows = BR.min(n - i0);
                let mut m = [f32::NEG_INFINITY; BR];
                let mut l = [0f32; BR];
                let mut s = [0f32; BC];
                let mut acc = vec![0f32; rows * d];
                let kv_end = if causal { i0 + rows } else { n };
                for j0 in (0..kv_end).step_by(BC) {
                    let cols = BC.min(n - j0);
                    for r in 0..rows {
                        let i = i0 + r;
                        let qi = &q[(h * n + i) * d..(h * n + i + 1) * d];
                        for (c, sc) in s[..cols].iter_mut().enumerate() {
                            let j = j0 + c;
                            *sc = if causal && j > i {
                                f32::NEG_INFINITY
                            } else {
                                dot(qi, &k[(h * n + j) * d..(h * n + j + 1) * d]) * scale
                            };
                        }
                        let row_max = max_row(&s[..cols]);
                        if row_max == f32::NEG_INFINITY {
                            continue; // the whole tile is masked for this row
                        }
                        let m_new = if row_max > m[r] { row_max } else { m[r] };
                        let mut pbuf = [0f32; BC];
                        let psum = exp_sub_sum_row(&s[..cols], m_new, &mut pbuf[..cols]);
                        let corr = super::math::exp(m[r] - m_new);
                        let arow = &mut acc[r * d..(r + 1) * d];
                        scale_in_place(arow, corr);
                        for c in 0..cols {
                            if pbuf[c] != 0.0 {
                                axpy(
                                    pbuf[c],
                                    &v[(h * n + j0 + c) * d..(h * n + j0 + c + 1) * d],
                                    arow,
                                );
                            }
                        }
                        l[r] = l[r] * corr + psum;
                        m[r] = m_new;
                    }
                }
                for r in 0..rows {
                    let dst = &mut otile[r * d..(r + 1) * d];
                    dst.copy_from_slice(&acc[r * d..(r + 1) * d]);
                    scale_in_place(dst, 1.0 / l[r]);
                }
            });
    }
}

impl Kernels for AttentionKernels {
    fn output_len(&self) -> usize {
        (self.a.heads_total() * self.a.seq_len * self.a.head_dim) as usize
    }

    fn run(&mut self, variant: Variant, out: &mut [f32]) {
        if variant == Variant::Standard {
            self.standard(out)
        } else {
            self.flash(out)
        }
    }

    fn reference(&self, idx: usize) -> f64 {
        let (n, d) = (self.a.seq_len as usize, self.a.head_dim as usize);
        let (row, c) = (idx / d, idx % d);
        let (h, i) = (row / n, row % n);
        let last = if self.a.causal { i + 1 } else { n };
        let qi = &self.q[(h * n + i) * d..(h * n + i + 1) * d];
        let scores: Vec<f64> = (0..last)
            .map(|j| {
                let kj = &self.k[(h * n + j) * d..(h * n + j + 1) * d];
                qi.iter()
                    .zip(kj)
                    .map(|(a, b)| *a as f64 * *b as f64)
                    .sum::<f64>()
                    / (d as f64).sqrt()
            })
            .collect();
        let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
        let z: f64 = w.iter().sum();
        (0..last)
            .map(|j| w[j] * self.v[(h * n + j) * d + c] as f64)
            .sum::<f64>()
            / z
    }

    fn reference_samples(&self) -> usize {
        // Each reference element costs O(N·d): sample fewer than for cheap kernels.
        256
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::DType;

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
            let mut k = AttentionKernels::new(a, 11);
            for v in [Variant::Standard, Variant::Flash] {
                let mut out = vec![f32::NAN; k.output_len()];
                k.run(v, &mut out);
                for i in (0..out.len()).step_by(7) {
                    let e = k.reference(i);
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
