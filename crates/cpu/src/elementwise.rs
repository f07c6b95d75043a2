//! CPU kernels of an elementwise chain.
//!
//! - unfused: one parallel pass per op over the whole tensor; each intermediate is written to
//!   memory and read back by the next pass (two buffers are reused in turn: the traffic is the
//!   ledger's, the footprint stays small).
//! - fused: one parallel pass that reads the inputs once and writes only the result.
//!
//! On AVX-512 and AVX2+FMA CPUs both run through [`super::vector::chain_segment`]: values stay
//! in registers from load to store and the streamed inputs are prefetched (the unfused variant
//! is that kernel with one op per pass). Elsewhere each pass goes through L1 tiles: the fused
//! one takes 256 elements (1 KiB) at a time and runs the whole chain on them between two tile
//! buffers.
//!
//! Both variants apply the same arithmetic in the same order, so their results are
//! bit-identical. With `stream` (tensors much larger than the cache), both write every output
//! with non-temporal stores, as production streaming kernels do: a CPU would otherwise read
//! each destination line before writing it (write-allocate), traffic that a GPU does not have
//! and that the ledger does not count. Both variants get the same store path, so the comparison
//! stays fair.

use super::math::{self, Operand};
use super::simd::{store_fence, stream_copy, LineVec};
#[cfg(target_arch = "x86_64")]
use super::vector::chain_segment;
use super::{CaseConfig, CpuKernels, Kernels};
use crate::error::Result;
use crate::kinds::elementwise::{ChainInputs, ElemOp, Elementwise};
use crate::kinds::{Tensors, Variant, Workload};
use crate::multiversion;
use rayon::prelude::*;
use std::sync::Arc;

/// Elements per parallel task: 256 KiB of f32, large enough to amortise scheduling.
const CHUNK: usize = 1 << 16;
/// Elements per staging tile of the unfused passes (16 KiB, in L1).
const TILE: usize = 4096;
/// Elements per fused tile: 1 KiB, so the loads of a tile and the arithmetic on it alternate at
/// a fine grain (measured on bias+GELU 8192², `opledger run specs/fuse-bias-gelu.yaml`, 3 runs
/// each: 4096-element tiles 46–53% of triad, 256-element tiles 53–55%).
const FUSED_TILE: usize = 256;

multiversion! {
    /// dst[i] = op(src[i], operand[i]).
    pub fn apply_op(op: ElemOp, dst: &mut [f32], src: &[f32], operand: Operand<'_>) {
        let n = dst.len();
        let src = &src[..n];
        match (op, operand) {
            (ElemOp::BiasAdd, Operand::Bias(b)) | (ElemOp::Add, Operand::Tensor(b)) => {
                let b = &b[..n];
                for i in 0..n {
                    dst[i] = src[i] + b[i];
                }
            }
            (ElemOp::Mul, Operand::Tensor(b)) => {
                let b = &b[..n];
                for i in 0..n {
                    dst[i] = src[i] * b[i];
                }
            }
            (ElemOp::Scale, Operand::Scale(s)) => {
                for i in 0..n {
                    dst[i] = src[i] * s;
                }
            }
            (ElemOp::Relu, _) => {
                for i in 0..n {
                    dst[i] = math::relu(src[i]);
                }
            }
            (ElemOp::Gelu, _) => math::gate_slice(math::Gate::Gelu, dst, src),
            (ElemOp::Silu, _) => math::gate_slice(math::Gate::Silu, dst, src),
            // operand_for() builds the operand from the op, so no other pairing occurs.
            _ => unreachable!("operand does not match op {}", op.name()),
        }
    }
}

/// The operand of op `k` for the segment of `n` elements at flat index `at`, column `col`.
fn operand_for<'a>(
    w: &Elementwise,
    inputs: &ChainInputs<'a>,
    k: usize,
    at: usize,
    col: usize,
    n: usize,
) -> Operand<'a> {
    match w.ops[k] {
        ElemOp::BiasAdd => Operand::Bias(&inputs.bias[col..col + n]),
        ElemOp::Add | ElemOp::Mul => Operand::Tensor(&inputs.operands[k][at..at + n]),
        ElemOp::Scale => Operand::Scale(w.scale as f32),
        _ => Operand::None,
    }
}

/// Calls `f(offset, col, len)` for consecutive segments of `[start, start+len)` that neither
/// cross a row boundary (so a bias slice is contiguous) nor exceed `max_seg` elements.
fn for_segments(
    start: usize,
    len: usize,
    cols: usize,
    max_seg: usize,
    mut f: impl FnMut(usize, usize, usize),
) {
    let mut off = 0;
    while off < len {
        let col = (start + off) % cols;
        let n = (len - off).min(cols - col).min(max_seg);
        f(off, col, n);
        off += n;
    }
}

/// Segments must not cross a row only when a bias is indexed by column; otherwise rows are
/// irrelevant and segments can be as long as the tile (a 1-column tensor would else be processed
/// one element at a time).
fn segment_period(w: &Elementwise) -> usize {
    if w.ops.contains(&ElemOp::BiasAdd) {
        w.cols as usize
    } else {
        usize::MAX
    }
}

/// How a chain is executed: in registers ([`super::vector`], AVX-512 or AVX2+FMA) or through
/// L1 tiles (portable). Both variants of a run take the same path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    Registers,
    Tiles,
}

impl Path {
    /// Registers on AVX-512 and AVX2+FMA CPUs, tiles elsewhere (and under `OPLEDGER_SIMD=scalar`).
    pub fn for_this_cpu() -> Path {
        #[cfg(target_arch = "x86_64")]
        if super::vector::available() {
            return Path::Registers;
        }
        Path::Tiles
    }
    /// The paths this CPU can run (tests check each).
    pub fn available() -> Vec<Path> {
        let mut v = vec![Path::Tiles];
        if Path::for_this_cpu() == Path::Registers {
            v.push(Path::Registers);
        }
        v
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn chain_segment(_: &[(ElemOp, Operand<'_>)], _: &mut [f32], _: &[f32], _: bool) {
    unreachable!("Path::Registers is never chosen off x86_64")
}

/// One op over whole tensors: `dst = op(src)`.
fn unfused_pass(
    path: Path,
    w: &Elementwise,
    inputs: &ChainInputs<'_>,
    k: usize,
    src: &[f32],
    dst: &mut [f32],
    stream: bool,
) {
    let cols = segment_period(w);
    if path == Path::Registers {
        dst.par_chunks_mut(CHUNK).enumerate().for_each(|(ci, out)| {
            let start = ci * CHUNK;
            for_segments(start, out.len(), cols, CHUNK, |off, col, n| {
                let at = start + off;
                let step = [(w.ops[k], operand_for(w, inputs, k, at, col, n))];
                chain_segment(&step, &mut out[off..off + n], &src[at..at + n], stream);
            });
            store_fence();
        });
        return;
    }
    dst.par_chunks_mut(CHUNK).enumerate().for_each(|(ci, out)| {
        let start = ci * CHUNK;
        let mut tile = [0f32; TILE];
        for_segments(
            start,
            out.len(),
            cols,
            if stream { TILE } else { usize::MAX },
            |off, col, n| {
                let at = start + off;
                let operand = operand_for(w, inputs, k, at, col, n);
                if stream {
                    apply_op(w.ops[k], &mut tile[..n], &src[at..at + n], operand);
                    stream_copy(&mut out[off..off + n], &tile[..n]);
                } else {
                    apply_op(w.ops[k], &mut out[off..off + n], &src[at..at + n], operand);
                }
            },
        );
        store_fence();
    });
}

/// The unfused chain; `tmp` holds the intermediates (at least min(ops−1, 2) tensors).
pub fn run_unfused(
    path: Path,
    w: &Elementwise,
    inputs: &ChainInputs<'_>,
    tmp: &mut [LineVec],
    y: &mut [f32],
    stream: bool,
) {
    let last = w.ops.len() - 1;
    if last == 0 {
        unfused_pass(path, w, inputs, 0, inputs.x, y, stream);
        return;
    }
    let (t0, rest) = tmp
        .split_first_mut()
        .expect("unfused chains of 2+ ops get a buffer");
    unfused_pass(path, w, inputs, 0, inputs.x, t0, stream);
    let mut cur: &mut LineVec = t0;
    let mut spare: Option<&mut LineVec> = rest.first_mut();
    for k in 1..last {
        let next = spare.take().expect("chains of 3+ ops get two buffers");
        unfused_pass(path, w, inputs, k, cur, next, stream);
        spare = Some(std::mem::replace(&mut cur, next));
    }
    unfused_pass(path, w, inputs, last, cur, y, stream);
}

/// The fused chain: one pass, intermediates in registers or in two L1 tiles.
pub fn run_fused(
    path: Path,
    w: &Elementwise,
    inputs: &ChainInputs<'_>,
    y: &mut [f32],
    stream: bool,
) {
    let cols = segment_period(w);
    let last = w.ops.len() - 1;
    if path == Path::Registers {
        y.par_chunks_mut(CHUNK).enumerate().for_each(|(ci, out)| {
            let start = ci * CHUNK;
            let mut steps = Vec::with_capacity(w.ops.len());
            for_segments(start, out.len(), cols, CHUNK, |off, col, n| {
                let at = start + off;
                steps.clear();
                steps.extend(
                    (0..w.ops.len()).map(|k| (w.ops[k], operand_for(w, inputs, k, at, col, n))),
                );
                chain_segment(
                    &steps,
                    &mut out[off..off + n],
                    &inputs.x[at..at + n],
                    stream,
                );
            });
            store_fence();
        });
        return;
    }
    y.par_chunks_mut(CHUNK).enumerate().for_each(|(ci, out)| {
        let start = ci * CHUNK;
        let mut ta = [0f32; FUSED_TILE];
        let mut tb = [0f32; FUSED_TILE];
        for_segments(start, out.len(), cols, FUSED_TILE, |off, col, n| {
            let at = start + off;
            let x = &inputs.x[at..at + n];
            let dst = &mut out[off..off + n];
            let (mut cur, mut next) = (&mut ta, &mut tb);
            apply_op(
                w.ops[0],
                &mut cur[..n],
                x,
                operand_for(w, inputs, 0, at, col, n),
            );
            for k in 1..=last {
                apply_op(
                    w.ops[k],
                    &mut next[..n],
                    &cur[..n],
                    operand_for(w, inputs, k, at, col, n),
                );
                std::mem::swap(&mut cur, &mut next);
            }
            if stream {
                stream_copy(dst, &cur[..n]);
            } else {
                dst.copy_from_slice(&cur[..n]);
            }
        });
        store_fence();
    });
}

/// Number of intermediate buffers the unfused variant needs.
pub fn tmp_buffers(w: &Elementwise) -> usize {
    (w.ops.len() - 1).min(2)
}

/// The warning every elementwise case carries while the experiment slowdown `f` is set
/// (`OPLEDGER_EXPERIMENT_SLOWDOWN`: the fused variant computes f of its output again — the
/// first f of it for f up to 1, the whole output ⌊f⌋ more times and then the first fraction
/// for more; real extra work with the same result — so that `scripts/gate-experiment.sh` can
/// check that the gate catches a genuine slowdown of the code under test).
pub fn experiment_warning(workload: &Workload, f: f64) -> Vec<String> {
    let what = if f <= 1.0 {
        format!("compute {:.0}% of its output twice", f * 100.0)
    } else {
        format!("compute its output {:.2} times over", 1.0 + f)
    };
    match workload {
        Workload::Elementwise(_) if f > 0.0 => vec![format!(
            "gate experiment: {}={f} made the fused variant {what} (a deliberate slowdown)",
            crate::settings::SLOWDOWN_VAR,
        )],
        _ => Vec::new(),
    }
}

impl CpuKernels for Elementwise {
    fn scratch_bytes(&self) -> u64 {
        self.elements() * 4 * tmp_buffers(self) as u64
    }
    /// On the register path, both variants issue the same instructions per element (the
    /// unfused one op per pass); only their memory traffic differs. Each row is whole vectors
    /// and a masked partial one.
    #[cfg(target_arch = "x86_64")]
    fn executed(&self, _variant: Variant) -> Option<crate::ledger::Executed> {
        if Path::for_this_cpu() != Path::Registers {
            return None;
        }
        let level = super::simd::level();
        let lanes = level.f32_lanes() as u64;
        let vectors = self.rows.saturating_mul(self.cols.div_ceil(lanes));
        let per_vector = self
            .ops
            .iter()
            .map(|&op| super::vector::executed_per_vector(op, level))
            .fold((0, 0), |(i, f), (di, df)| (i + di, f + df));
        Some(crate::ledger::Executed::of_vectors(
            level.name(),
            lanes,
            vectors,
            per_vector,
        ))
    }
    /// The chain on every thread at once, each task on its own 2048 elements in L1 (the
    /// operands too), the fastest of 9 timings of ~4 M elements a thread, scaled to the
    /// workload.
    #[cfg(target_arch = "x86_64")]
    fn arithmetic_secs(&self) -> Option<f64> {
        if Path::for_this_cpu() != Path::Registers {
            return None;
        }
        const N: usize = 2048;
        // ~4 M elements a thread in all (arithmetic_secs_per_element's tasks).
        const REPS: usize = 2048 / super::ARITHMETIC_TASKS;
        // Arguments across GELU's working range; the other operands as the inputs are.
        let x: Vec<f32> = (0..N).map(|i| i as f32 / N as f32 * 8.0 - 4.0).collect();
        let other = vec![0.5f32; N];
        let per_element = super::arithmetic_secs_per_element(N * REPS, || {
            let mut y = vec![0f32; N];
            let steps: Vec<(ElemOp, Operand<'_>)> = self
                .ops
                .iter()
                .map(|&op| {
                    let operand = match op {
                        ElemOp::BiasAdd => Operand::Bias(&other),
                        ElemOp::Add | ElemOp::Mul => Operand::Tensor(&other),
                        ElemOp::Scale => Operand::Scale(self.scale as f32),
                        _ => Operand::None,
                    };
                    (op, operand)
                })
                .collect();
            for _ in 0..REPS {
                chain_segment(&steps, &mut y, std::hint::black_box(&x), false);
                std::hint::black_box(&mut y);
            }
        });
        Some(self.elements() as f64 * per_element)
    }
    fn kernels(&self, inputs: Arc<Tensors>, cfg: &CaseConfig) -> Result<Box<dyn Kernels>> {
        Ok(Box::new(
            ElementwiseKernels::new(self.clone(), inputs, cfg.stream)
                .with_slowdown(cfg.experiment_slowdown),
        ))
    }
}

/// The elementwise chain's kernels on the CPU.
pub struct ElementwiseKernels {
    w: Elementwise,
    inputs: Arc<Tensors>,
    tmp: Vec<LineVec>,
    stream: bool,
    /// The experiment slowdown: whole outputs the fused variant computes again, then the
    /// elements of its output's prefix it computes once more; normally none.
    redo_whole: usize,
    redo_elements: usize,
    path: Path,
}

impl ElementwiseKernels {
    pub fn new(w: Elementwise, inputs: Arc<Tensors>, stream: bool) -> Self {
        let n = w.elements() as usize;
        ElementwiseKernels {
            inputs,
            tmp: (0..tmp_buffers(&w)).map(|_| LineVec::zeroed(n)).collect(),
            stream,
            redo_whole: 0,
            redo_elements: 0,
            path: Path::for_this_cpu(),
            w,
        }
    }

    /// Makes the fused variant compute `outputs` of its output again: the whole output
    /// ⌊outputs⌋ times (at most [`MAX_SLOWDOWN`](crate::settings::MAX_SLOWDOWN)), then the
    /// first fraction of it.
    pub fn with_slowdown(mut self, outputs: f64) -> Self {
        let n = self.w.elements() as usize;
        let outputs = outputs.clamp(0.0, crate::settings::MAX_SLOWDOWN);
        self.redo_whole = outputs.floor() as usize;
        self.redo_elements = ((n as f64 * outputs.fract()).round() as usize).min(n);
        self
    }
}

impl Kernels for ElementwiseKernels {
    fn run(&mut self, variant: Variant, out: &mut [f32]) {
        let inputs = ChainInputs::of(&self.w, &self.inputs);
        if variant == Variant::Unfused {
            run_unfused(self.path, &self.w, &inputs, &mut self.tmp, out, self.stream);
        } else {
            run_fused(self.path, &self.w, &inputs, out, self.stream);
            // The same elements recomputed from the inputs (a prefix's chunks are indexed from
            // 0 too): the same bits, written again.
            for _ in 0..self.redo_whole {
                run_fused(self.path, &self.w, &inputs, out, self.stream);
            }
            if self.redo_elements > 0 {
                let m = self.redo_elements.min(out.len());
                run_fused(self.path, &self.w, &inputs, &mut out[..m], self.stream);
            }
        }
    }
    fn buffers(&self) -> Vec<&[f32]> {
        self.tmp.iter().map(|t| &t[..]).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::{DType, Kind};

    fn check(ops: &[ElemOp], rows: u64, cols: u64) {
        let w = Elementwise {
            ops: ops.to_vec(),
            rows,
            cols,
            dtype: DType::F32,
            scale: 0.7,
        };
        let tensors = w.inputs(42);
        let inputs = ChainInputs::of(&w, &tensors);
        let n = w.elements() as usize;
        let mut tmp: Vec<LineVec> = (0..tmp_buffers(&w)).map(|_| LineVec::zeroed(n)).collect();
        let mut yu = vec![f32::NAN; n];
        let mut yf = vec![f32::NAN; n];
        for path in Path::available() {
            for stream in [false, true] {
                yu.fill(f32::NAN);
                yf.fill(f32::NAN);
                run_unfused(path, &w, &inputs, &mut tmp, &mut yu, stream);
                run_fused(path, &w, &inputs, &mut yf, stream);
                check_outputs(&w, &tensors, &yu, &yf);
                // Into an output that starts on a cache line too (streaming stores of whole
                // lines from the first element), and one that starts one element past it.
                for shift in [0, 1] {
                    let mut ya = LineVec::filled(n + 1, f32::NAN);
                    run_fused(path, &w, &inputs, &mut ya[shift..shift + n], stream);
                    check_outputs(&w, &tensors, &yu, &ya[shift..shift + n]);
                }
            }
        }
    }

    fn check_outputs(w: &Elementwise, tensors: &Tensors, yu: &[f32], yf: &[f32]) {
        let ops = &w.ops;
        let (rows, cols) = (w.rows, w.cols);
        for i in 0..yu.len() {
            assert_eq!(
                yu[i].to_bits(),
                yf[i].to_bits(),
                "{ops:?} {rows}x{cols} element {i}"
            );
            let r = w.reference(tensors, Variant::Fused, i);
            let err = (yf[i] as f64 - r).abs();
            assert!(
                err <= 1e-6 + 1e-5 * r.abs(),
                "{ops:?} {rows}x{cols} element {i}: {} vs {r}",
                yf[i]
            );
        }
    }

    #[test]
    fn experiment_slowdown_redoes_whole_outputs_and_a_prefix_with_the_same_result() {
        let w = Elementwise {
            ops: vec![ElemOp::BiasAdd, ElemOp::Gelu],
            rows: 9,
            cols: 1001,
            dtype: DType::F32,
            scale: 1.0,
        };
        let inputs = Arc::new(w.inputs(3));
        let mut plain = ElementwiseKernels::new(w.clone(), inputs.clone(), false);
        let mut a = vec![0f32; 9009];
        plain.run(Variant::Fused, &mut a);
        for (outputs, whole, prefix) in [
            (0.25, 0, (9.0f64 * 1001.0 * 0.25).round() as usize),
            (1.0, 1, 0),
            (2.5, 2, (9.0f64 * 1001.0 * 0.5).round() as usize),
            (100.0, 8, 0),
        ] {
            let mut slow =
                ElementwiseKernels::new(w.clone(), inputs.clone(), false).with_slowdown(outputs);
            assert_eq!((slow.redo_whole, slow.redo_elements), (whole, prefix));
            let mut b = vec![0f32; 9009];
            slow.run(Variant::Fused, &mut b);
            assert_eq!(a, b, "{outputs}");
        }
        let warning = |f| experiment_warning(&Workload::Elementwise(w.clone()), f);
        assert!(warning(0.5)[0].contains("compute 50% of its output twice"));
        assert!(warning(3.0)[0].contains("compute its output 4.00 times over"));
        assert!(warning(0.0).is_empty());
    }

    #[test]
    fn every_op_alone_and_in_chains_matches_f64_reference() {
        use ElemOp::*;
        for op in [BiasAdd, Add, Mul, Scale, Relu, Gelu, Silu] {
            check(&[op], 3, 37);
        }
        check(&[BiasAdd, Gelu], 5, 1031);
        check(&[Scale, Add, Relu, Mul], 7, 333);
        check(&[BiasAdd, Silu, Mul, Gelu, Add, Relu, Scale], 3, 4099);
        // Sizes that are not multiples of the vector width, tile or chunk; one long row.
        check(&[BiasAdd, Gelu], 1, (CHUNK + TILE + 3) as u64);
        check(&[Gelu, Silu], 131, 1);
    }
}
