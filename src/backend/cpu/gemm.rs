//! CPU kernels of GEMM, C = A·B (row-major f32).
//!
//! - naive: the textbook i-j-k triple loop, one row of C per task; B is walked down its columns.
//! - tiled: the BLIS/GotoBLAS structure: C in MC×NC blocks over KC slices of k; B and A packed
//!   into contiguous panels; an MR×NR register-tiled micro-kernel (AVX-512: 8×32 with 16 zmm
//!   accumulators, broadcast A, two loads of B per step; plain loops elsewhere). The block sizes
//!   are the ledger's (`GEMM_MC`, `GEMM_NC`, `GEMM_KC`), so its traffic model is this code's.

use super::{CaseConfig, CpuKernels, Kernels};
use crate::error::Result;
use crate::kinds::gemm::Gemm;
use crate::kinds::{Tensors, Variant};
use crate::ledger::{GEMM_KC, GEMM_MC, GEMM_NC};
use rayon::prelude::*;
use std::sync::Arc;

/// Rows of the micro-kernel's register tile.
pub const MR: usize = 8;
/// Columns of the micro-kernel's register tile.
pub const NR: usize = 32;
const MC: usize = GEMM_MC as usize;
const NC: usize = GEMM_NC as usize;
const KC: usize = GEMM_KC as usize;

impl CpuKernels for Gemm {
    fn scratch_bytes(&self) -> u64 {
        (KC * NC.div_ceil(NR) * NR * 4) as u64
    }
    fn kernels(&self, inputs: Arc<Tensors>, _: &CaseConfig) -> Result<Box<dyn Kernels>> {
        Ok(Box::new(GemmKernels::new(self.clone(), inputs)))
    }
}

pub struct GemmKernels {
    g: Gemm,
    inputs: Arc<Tensors>,
    /// Packed B block (KC×NC, in NR-wide panels).
    bp: Vec<f32>,
}

impl GemmKernels {
    pub fn new(g: Gemm, inputs: Arc<Tensors>) -> Self {
        GemmKernels {
            inputs,
            bp: vec![0f32; KC * NC.div_ceil(NR) * NR],
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

    fn tiled(&mut self, c: &mut [f32]) {
        let (m, n, k) = (self.g.m as usize, self.g.n as usize, self.g.k as usize);
        let (a, b) = (self.inputs.get("A"), self.inputs.get("B"));
        for jc in (0..n).step_by(NC) {
            let nc = NC.min(n - jc);
            for pc in (0..k).step_by(KC) {
                let kc = KC.min(k - pc);
                pack_b(b, n, pc, kc, jc, nc, &mut self.bp);
                let bp = &self.bp;
                c.par_chunks_mut(MC * n)
                    .enumerate()
                    .for_each(|(bi, cblock)| {
                        let ic = bi * MC;
                        let mc = MC.min(m - ic);
                        let mut ap = vec![0f32; kc * mc.div_ceil(MR) * MR];
                        pack_a(a, k, ic, mc, pc, kc, &mut ap);
                        let mut acc = [0f32; MR * NR];
                        for jp in 0..nc.div_ceil(NR) {
                            let nr = NR.min(nc - jp * NR);
                            for ip in 0..mc.div_ceil(MR) {
                                let mr = MR.min(mc - ip * MR);
                                micro(
                                    kc,
                                    &ap[ip * kc * MR..(ip + 1) * kc * MR],
                                    &bp[jp * kc * NR..(jp + 1) * kc * NR],
                                    &mut acc,
                                );
                                for i in 0..mr {
                                    let row = (ip * MR + i) * n + jc + jp * NR;
                                    let dst = &mut cblock[row..row + nr];
                                    let src = &acc[i * NR..i * NR + nr];
                                    if pc == 0 {
                                        dst.copy_from_slice(src);
                                    } else {
                                        for (d, s) in dst.iter_mut().zip(src) {
                                            *d += s;
                                        }
                                    }
                                }
                            }
                        }
                    });
            }
        }
    }
}

/// Packs B[pc..pc+kc][jc..jc+nc] into NR-wide panels, each kc×NR contiguous, zero-padded;
/// panels are filled in parallel.
fn pack_b(b: &[f32], n: usize, pc: usize, kc: usize, jc: usize, nc: usize, bp: &mut [f32]) {
    bp[..kc * nc.div_ceil(NR) * NR]
        .par_chunks_mut(kc * NR)
        .enumerate()
        .for_each(|(jp, panel)| {
            pack_b_panel(
                b,
                n,
                pc,
                kc,
                jc + jp * NR,
                NR.min(jc + nc - jc - jp * NR),
                panel,
            )
        });
}

/// One NR-wide panel of B: rows pc..pc+kc, columns j0..j0+nr (nr ≤ NR), zero-padded.
pub fn pack_b_panel(
    b: &[f32],
    n: usize,
    pc: usize,
    kc: usize,
    j0: usize,
    nr: usize,
    panel: &mut [f32],
) {
    for p in 0..kc {
        let src = &b[(pc + p) * n + j0..(pc + p) * n + j0 + nr];
        let dst = &mut panel[p * NR..(p + 1) * NR];
        dst[..nr].copy_from_slice(src);
        dst[nr..].fill(0.0);
    }
}

/// Serial pack_b, for callers already inside a parallel task.
pub fn pack_b_serial(
    b: &[f32],
    n: usize,
    pc: usize,
    kc: usize,
    jc: usize,
    nc: usize,
    bp: &mut [f32],
) {
    for jp in 0..nc.div_ceil(NR) {
        let nr = NR.min(nc - jp * NR);
        pack_b_panel(
            b,
            n,
            pc,
            kc,
            jc + jp * NR,
            nr,
            &mut bp[jp * kc * NR..(jp + 1) * kc * NR],
        );
    }
}

/// Packs A[ic..ic+mc][pc..pc+kc] into MR-tall panels, each kc×MR contiguous (column by column),
/// zero-padded.
pub fn pack_a(a: &[f32], k: usize, ic: usize, mc: usize, pc: usize, kc: usize, ap: &mut [f32]) {
    for ip in 0..mc.div_ceil(MR) {
        let panel = &mut ap[ip * kc * MR..(ip + 1) * kc * MR];
        for i in 0..MR {
            let r = ip * MR + i;
            if r < mc {
                let src = &a[(ic + r) * k + pc..(ic + r) * k + pc + kc];
                for (p, &v) in src.iter().enumerate() {
                    panel[p * MR + i] = v;
                }
            } else {
                for p in 0..kc {
                    panel[p * MR + i] = 0.0;
                }
            }
        }
    }
}

/// acc = Ap·Bp for one MR×NR tile over kc steps.
pub fn micro(kc: usize, ap: &[f32], bp: &[f32], acc: &mut [f32; MR * NR]) {
    assert!(ap.len() >= kc * MR && bp.len() >= kc * NR);
    #[cfg(target_arch = "x86_64")]
    if super::simd::level() == super::simd::SimdLevel::Avx512 {
        // SAFETY: level() returned Avx512, so the CPU has avx512f; the slice lengths were checked
        // above, which is what micro_avx512's unchecked loads rely on.
        unsafe { micro_avx512(kc, ap, bp, acc) };
        return;
    }
    micro_portable(kc, ap, bp, acc);
}

crate::multiversion! {
    fn micro_portable(kc: usize, ap: &[f32], bp: &[f32], acc: &mut [f32; MR * NR]) {
        acc.fill(0.0);
        for p in 0..kc {
            let b = &bp[p * NR..(p + 1) * NR];
            for i in 0..MR {
                let a = ap[p * MR + i];
                let row = &mut acc[i * NR..(i + 1) * NR];
                for j in 0..NR {
                    row[j] += a * b[j];
                }
            }
        }
    }
}

/// # Safety
/// The CPU must support avx512f; `ap` must hold kc·MR and `bp` kc·NR values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn micro_avx512(kc: usize, ap: &[f32], bp: &[f32], acc: &mut [f32; MR * NR]) {
    use std::arch::x86_64::*;
    let mut c = [_mm512_setzero_ps(); 2 * MR];
    let (a_ptr, b_ptr) = (ap.as_ptr(), bp.as_ptr());
    for p in 0..kc {
        // SAFETY: p < kc, so p·NR + 32 ≤ kc·NR and p·MR + MR ≤ kc·MR (the caller's contract).
        unsafe {
            let b0 = _mm512_loadu_ps(b_ptr.add(p * NR));
            let b1 = _mm512_loadu_ps(b_ptr.add(p * NR + 16));
            for i in 0..MR {
                let a = _mm512_set1_ps(*a_ptr.add(p * MR + i));
                c[2 * i] = _mm512_fmadd_ps(a, b0, c[2 * i]);
                c[2 * i + 1] = _mm512_fmadd_ps(a, b1, c[2 * i + 1]);
            }
        }
    }
    for (i, v) in c.iter().enumerate() {
        // SAFETY: acc holds MR·NR = 16·16 values; i < 16.
        unsafe { _mm512_storeu_ps(acc.as_mut_ptr().add(i * 16), *v) };
    }
}

impl Kernels for GemmKernels {
    fn run(&mut self, variant: Variant, out: &mut [f32]) {
        if variant == Variant::Naive {
            self.naive(out)
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

    #[test]
    fn portable_micro_kernel_matches_the_dispatched_one() {
        let kc = 37;
        let ap = uniform(kc * MR, 1, 0, -1.0, 1.0);
        let bp = uniform(kc * NR, 1, 1, -1.0, 1.0);
        let (mut x, mut y) = ([0f32; MR * NR], [0f32; MR * NR]);
        micro(kc, &ap, &bp, &mut x);
        micro_portable(kc, &ap, &bp, &mut y);
        for (a, b) in x.iter().zip(&y) {
            assert!((a - b).abs() < 1e-4, "{a} vs {b}");
        }
    }
}
