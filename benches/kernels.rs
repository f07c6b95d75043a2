//! Times the CPU kernels alone (no flush, no statistics beyond a median; the probe's FMA loop
//! only beside the micro-kernel, for its fraction of the peak): the quick loop for tuning a
//! kernel. `cargo bench --bench kernels [-- FILTER]`; `OPLEDGER_SIMD=avx2`
//! picks the AVX2 path on an AVX-512 CPU. The gate's numbers come from `opledger run`.
//! `-- flush` (only by name) times the two cold flushes and what follows each, then both on a
//! case larger than the last level. `-- blocks` (only by name) times the tiled GEMM at other
//! cache blockings against the ledger's, in turns (`OPLEDGER_BENCH_BLOCKS`, `_SIZES`, `_PAIRS`).

use opledger::backend::cpu::attention::AttentionKernels;
use opledger::backend::cpu::gemm::GemmKernels;
use opledger::backend::cpu::Kernels;
use opledger::kinds::attention::Attention;
use opledger::kinds::gemm::Gemm;
use opledger::kinds::{DType, Kind, Variant};
use std::sync::Arc;
use std::time::Instant;

fn median_secs(runs: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut t: Vec<f64> = (0..runs)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[runs / 2]
}

#[cfg(target_arch = "x86_64")]
fn best_secs(runs: usize, mut f: impl FnMut()) -> f64 {
    (0..runs)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

#[expect(
    clippy::too_many_lines,
    reason = "the benchmark table: one row per kernel group, in the order the filter names them"
)]
fn main() {
    let filter = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with("--"))
        .unwrap_or_default();
    // OPLEDGER_SIMD caps the level here as it does for the binary.
    match opledger::settings::Settings::from_env() {
        Ok(s) => opledger::device::simd::install_cap(s.simd),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    }
    println!(
        "simd {}, {} threads",
        opledger::device::simd::level().name(),
        rayon::current_num_threads()
    );
    if "micro".contains(&filter) || filter.is_empty() {
        // One core, operands in L1: the micro-kernel's own ceiling.
        let t = opledger::backend::cpu::gemm::Tile::of_this_cpu();
        let kc = 256;
        let ap = vec![0.5f32; t.a_len(t.mr, kc)];
        let bp = vec![0.25f32; t.b_len(t.nr, kc)];
        let mut c = vec![0f32; t.mr * t.nr];
        let reps = 2000;
        let s = median_secs(9, || {
            for _ in 0..reps {
                t.full(kc, &ap, &bp, &mut c, t.nr, true);
            }
        });
        let flops = 2.0 * (t.mr * t.nr * kc * reps) as f64;
        println!(
            "micro {}x{} kc={kc}, one core, in L1: {:.1} GFLOP/s",
            t.mr,
            t.nr,
            flops / s / 1e9
        );
        // The same against the probe's FMA loop on this core, the two in turns: this machine's
        // FMA rate can change from one second to the next, so a fraction of a peak measured
        // at another moment says little.
        let rounds = 15;
        let mut fractions: Vec<f64> = (0..rounds)
            .map(|_| {
                let s = Instant::now();
                let (kept, fma_flops) = opledger::backend::cpu::probe::fma_loop(1 << 20);
                let peak = fma_flops / s.elapsed().as_secs_f64();
                std::hint::black_box(kept);
                let s = Instant::now();
                for _ in 0..reps {
                    t.full(kc, &ap, &bp, &mut c, t.nr, true);
                }
                flops / s.elapsed().as_secs_f64() / peak
            })
            .collect();
        fractions.sort_by(f64::total_cmp);
        println!(
            "micro {}x{} kc={kc}, one core, in L1, of the probe's FMA rate timed in turns: {:.1}% [{:.1}–{:.1}%] ({rounds} rounds)",
            t.mr,
            t.nr,
            fractions[rounds / 2] * 100.0,
            fractions[0] * 100.0,
            fractions[rounds - 1] * 100.0
        );
        // The same with A streamed from a 22-panel block (L2), as inside the GEMM.
        let ablk = vec![0.5f32; t.a_len(22 * t.mr, kc)];
        let s = median_secs(9, || {
            for r in 0..reps / 22 {
                for ip in 0..22 {
                    let _ = r;
                    t.full(kc, &ablk[ip * kc * t.mr..], &bp, &mut c, t.nr, true);
                }
            }
        });
        let flops = 2.0 * (t.mr * t.nr * kc * (reps / 22) * 22) as f64;
        println!(
            "micro {}x{} kc={kc}, one core, A from L2: {:.1} GFLOP/s",
            t.mr,
            t.nr,
            flops / s / 1e9
        );
        // And C a tile of a 1024-wide row-major matrix, as inside the GEMM.
        let mut cbig = vec![0f32; 1024 * 1024];
        let s = median_secs(9, || {
            for r in 0..reps / 22 {
                let jp = r % (1024 / t.nr);
                for ip in 0..22 {
                    let at = ((r / (1024 / t.nr)) % 7 * 132 + ip * t.mr) * 1024 + jp * t.nr;
                    t.full(
                        kc,
                        &ablk[ip * kc * t.mr..],
                        &bp,
                        &mut cbig[at..],
                        1024,
                        true,
                    );
                }
            }
        });
        println!(
            "micro {}x{} kc={kc}, one core, A from L2, C 1024 wide: {:.1} GFLOP/s",
            t.mr,
            t.nr,
            flops / s / 1e9
        );
    }
    #[cfg(target_arch = "x86_64")]
    if ("stream".contains(&filter) || filter.is_empty())
        && opledger::backend::cpu::vector::available()
    {
        use opledger::backend::cpu::math::Operand;
        use opledger::backend::cpu::simd::store_fence;
        use opledger::backend::cpu::vector::chain_segment;
        use opledger::kinds::tensors::LineVec;
        use opledger::spec::ElemOp;
        use rayon::prelude::*;
        let (rows, cols) = (8192usize, 8192usize);
        let x = LineVec::filled(rows * cols, 0.5);
        let c = LineVec::filled(rows * cols, 0.25);
        let bias = vec![0.1f32; cols];
        let mut y = LineVec::zeroed(rows * cols);
        let s = median_secs(9, || triad_pass(&mut y, &x, &c));
        let triad = 3.0 * (rows * cols * 4) as f64 / s / 1e9;
        println!("triad 8192^2: {triad:.1} GB/s");
        // bias+ReLU has next to no arithmetic: what a one-in, one-out stream reaches at best.
        for (name, op) in [("GELU", ElemOp::Gelu), ("ReLU", ElemOp::Relu)] {
            let steps = [(ElemOp::BiasAdd, Operand::Bias(&bias)), (op, Operand::None)];
            let s = median_secs(9, || {
                y.par_chunks_mut(cols)
                    .zip(x.par_chunks(cols))
                    .for_each(|(o, i)| {
                        chain_segment(&steps, o, i, true);
                        store_fence();
                    })
            });
            let gbps = 2.0 * (rows * cols * 4) as f64 / s / 1e9;
            println!(
                "bias+{name} 8192^2 fused: {gbps:.1} GB/s = {:.0}% of triad",
                100.0 * gbps / triad
            );
        }
        // The same chain on one core with its operands in L1: the arithmetic's own rate, no
        // memory in the way (what the fused kernel would take if memory were free).
        let n = 2048usize;
        let xs: Vec<f32> = (0..n).map(|i| (i as f32 / n as f32) * 8.0 - 4.0).collect();
        let bs = vec![0.1f32; n];
        let mut ys = vec![0f32; n];
        let reps = 20_000;
        for (name, op) in [("GELU", ElemOp::Gelu), ("ReLU", ElemOp::Relu)] {
            let steps = [(ElemOp::BiasAdd, Operand::Bias(&bs)), (op, Operand::None)];
            // The fastest of the timings: the arithmetic's rate with the least interference.
            let s = best_secs(15, || {
                for _ in 0..reps {
                    chain_segment(&steps, &mut ys, &xs, false);
                }
            });
            let per_core = (n * reps) as f64 / s;
            println!(
                "bias+{name} in L1, one core: {:.2} Gelem/s ({:.2} ms for 8192^2 on {} cores)",
                per_core / 1e9,
                (rows * cols) as f64 / (per_core * rayon::current_num_threads() as f64) * 1e3,
                rayon::current_num_threads()
            );
        }
    }
    #[cfg(target_arch = "x86_64")]
    if ("rows".contains(&filter) || filter.is_empty())
        && opledger::backend::cpu::vector::available()
    {
        rows_interleaved();
    }
    if "gemm".contains(&filter) || filter.is_empty() {
        // 1152 and 1536 are not multiples of the blocking: the edges and the split over threads.
        for size in [1024u64, 1152, 1536] {
            let g = Gemm {
                m: size,
                n: size,
                k: size,
                dtype: DType::F32,
            };
            let mut k = GemmKernels::new(g.clone(), Arc::new(g.inputs(1)));
            let mut out = opledger::kinds::tensors::LineVec::zeroed((size * size) as usize);
            let s = median_secs(15, || k.run(Variant::Tiled, &mut out));
            println!(
                "gemm tiled {size}^3: {:.2} ms = {:.1} GFLOP/s",
                s * 1e3,
                2.0 * (size as f64).powi(3) / s / 1e9
            );
        }
    }
    if filter == "blocks" {
        gemm_blocks();
    }
    if filter == "prefill" {
        // A language model's prefill: 2048 tokens through a 4096-wide layer (the peers script's
        // shape), only by name, its runs a third of a second each.
        let g = Gemm {
            m: 2048,
            n: 4096,
            k: 4096,
            dtype: DType::F32,
        };
        let mut k = GemmKernels::new(g.clone(), Arc::new(g.inputs(1)));
        let mut out = opledger::kinds::tensors::LineVec::zeroed((g.m * g.n) as usize);
        let s = median_secs(7, || k.run(Variant::Tiled, &mut out));
        println!(
            "gemm tiled prefill 2048x4096x4096: {:.1} ms = {:.1} GFLOP/s",
            s * 1e3,
            2.0 * (g.m * g.n * g.k) as f64 / s / 1e9
        );
    }
    if "decode".contains(&filter) || filter.is_empty() {
        // GEMV-like shapes: B (k × n, 64 MiB) read from memory once per run; at k = 256 it
        // fits the cache, and the time is the kernel's own.
        for (m, k) in [
            (1, 4096),
            (4, 4096),
            (8, 4096),
            (16, 4096),
            (8, 256),
            (16, 256),
        ] {
            let g = Gemm {
                m,
                n: 4096,
                k,
                dtype: DType::F32,
            };
            let mut kern = GemmKernels::new(g.clone(), Arc::new(g.inputs(1)));
            let mut out = opledger::kinds::tensors::LineVec::zeroed(m as usize * 4096);
            let s = median_secs(31, || kern.run(Variant::Tiled, &mut out));
            println!(
                "decode m={m} n=4096 k={k}: {:.3} ms = {:.1} GB/s of B, {:.1} GFLOP/s",
                s * 1e3,
                (k * 4096 * 4) as f64 / s / 1e9,
                2.0 * (m * k * 4096) as f64 / s / 1e9
            );
        }
    }
    if filter == "flush" {
        cold_flushes();
    }
    if "attention".contains(&filter) || filter.is_empty() || filter == "flash" {
        let a = Attention {
            batch: 1,
            heads: 1,
            seq_len: 4096,
            head_dim: 128,
            causal: false,
            dtype: DType::F32,
        };
        let mut k = AttentionKernels::new(a.clone(), Arc::new(a.inputs(1)));
        let mut out = vec![0f32; a.output_len() as usize];
        let flops = 4.0 * 4096f64 * 4096.0 * 128.0;
        for v in [Variant::Flash, Variant::Standard] {
            if filter == "flash" && v != Variant::Flash {
                continue;
            }
            let s = median_secs(5, || k.run(v, &mut out));
            println!(
                "attention {v:?} N=4096 d=128: {:.2} ms = {:.1} GFLOP/s",
                s * 1e3,
                flops / s / 1e9
            );
        }
    }
}

/// The two cold flushes side by side, in rounds (each round every way once, in turn): what each
/// flush costs, and the flash attention of a small case (2 heads, N = 512, d = 128: compute-bound,
/// 2 MiB of inputs and output) timed right after each, and after nothing. The read flush is the
/// backend's default size, twice the last-level cache. Then [`large_case_flushes`].
fn cold_flushes() {
    use opledger::backend::cpu::{ColdFlush, FlushBuffer};
    let llc = opledger::device::last_level_cache_bytes();
    let read = ColdFlush::Read(FlushBuffer::new((2 * llc).max(64 << 20)));
    let evict = ColdFlush::evicting_or_read(
        rayon::current_num_threads(),
        opledger::device::l2_cache_bytes().unwrap_or(2 << 20),
        0,
    );
    let a = Attention {
        batch: 1,
        heads: 2,
        seq_len: 512,
        head_dim: 128,
        causal: false,
        dtype: DType::F32,
    };
    let inputs = Arc::new(a.inputs(1));
    let mut k = AttentionKernels::new(a.clone(), inputs.clone());
    let mut out = vec![0f32; a.output_len() as usize];
    k.run(Variant::Flash, &mut out);
    let ways: [(&str, Option<&ColdFlush>); 3] = [
        ("read flush", Some(&read)),
        ("evicting flush", Some(&evict)),
        ("no flush", None),
    ];
    let (mut flush_secs, mut kernel_secs) = (vec![Vec::new(); 3], vec![Vec::new(); 3]);
    for _ in 0..31 {
        for (w, (_, flush)) in ways.iter().enumerate() {
            let s = Instant::now();
            if let Some(f) = flush {
                let held = opledger::backend::cpu::cold::case_buffers(&inputs, [&out[..]], &k);
                f.flush(&held, &k);
            }
            flush_secs[w].push(s.elapsed().as_secs_f64());
            let s = Instant::now();
            k.run(Variant::Flash, &mut out);
            kernel_secs[w].push(s.elapsed().as_secs_f64());
        }
    }
    let mid = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2], v[0], v[v.len() - 1])
    };
    for (w, (name, _)) in ways.iter().enumerate() {
        let (f, _, _) = mid(&mut flush_secs[w]);
        let (m, lo, hi) = mid(&mut kernel_secs[w]);
        println!(
            "{name}: {:.2} ms; then flash attention 2x512x128: {:.3} ms [{:.3}-{:.3}], 31 rounds",
            f * 1e3,
            m * 1e3,
            lo * 1e3,
            hi * 1e3
        );
    }
    large_case_flushes(&read);
}

/// What each flush costs a case of tensors larger than the last level (a streaming spec's:
/// four 256 MiB buffers, as fused bias+GELU holds its input, both outputs and the unfused
/// side's intermediate), each buffer written first as a run leaves it, in alternated rounds.
fn large_case_flushes(read: &opledger::backend::cpu::ColdFlush) {
    use opledger::backend::cpu::{ColdFlush, FlushBuffer};
    use rayon::prelude::*;
    let mut bufs: Vec<Vec<f32>> = (0..4).map(|_| vec![1f32; 64 << 20]).collect();
    // The read flush of a machine whose last level is 32 MiB: what such a case reads there
    // instead of evicting its 1 GiB (more than twice those bytes: `cold::EVICT_OVER_READ`).
    let small = ColdFlush::Read(FlushBuffer::new(64 << 20));
    let (mut read_secs, mut evict_secs, mut small_secs) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..11 {
        for way in 0..3 {
            // What a run leaves: every line written, the newest still cached.
            for b in &mut bufs {
                b.par_chunks_mut(1 << 16)
                    .for_each(|c| c.fill((round * 3 + way) as f32));
            }
            let held: Vec<&[f32]> = bufs.iter().map(|b| &b[..]).collect();
            let s = Instant::now();
            match way {
                0 => {
                    read.flush_by_reading();
                    read_secs.push(s.elapsed().as_secs_f64());
                }
                1 => {
                    opledger::backend::cpu::cold::evict(&held);
                    evict_secs.push(s.elapsed().as_secs_f64());
                }
                _ => {
                    small.flush_by_reading();
                    small_secs.push(s.elapsed().as_secs_f64());
                }
            }
        }
    }
    for (name, v) in [
        ("read flush", &mut read_secs),
        ("evicting a case's 1 GiB", &mut evict_secs),
        (
            "a 64 MiB read flush (a 32 MiB last level's)",
            &mut small_secs,
        ),
    ] {
        v.sort_by(f64::total_cmp);
        println!(
            "{name} after the case's buffers were written: {:.1} ms [{:.1}-{:.1}], 11 rounds",
            v[5] * 1e3,
            v[0] * 1e3,
            v[10] * 1e3
        );
    }
}

/// One STREAM triad `y = x + 3·c` over all threads, with the streaming stores the kernels use.
#[cfg(target_arch = "x86_64")]
fn triad_pass(y: &mut [f32], x: &[f32], c: &[f32]) {
    use opledger::backend::cpu::simd::store_fence;
    use opledger::backend::cpu::vector::triad_stream;
    use rayon::prelude::*;
    y.par_chunks_mut(1 << 16)
        .zip(x.par_chunks(1 << 16))
        .zip(c.par_chunks(1 << 16))
        .for_each(|((a, b), c)| {
            triad_stream(
                a,
                b,
                c,
                3.0,
                opledger::backend::cpu::simd::stream_prefetch(),
            );
            store_fence();
        })
}

/// The fused rows kernels at 16384×4096 (the example specs' size) against triad, in rounds:
/// each round times triad and then each kernel once, so a kernel's fraction of triad is taken
/// against the bandwidth of the same minute (on a shared machine it moves by tens of percent
/// between minutes). Prints the median and range of each kernel's time and of that fraction
/// (a kernel's bytes, two streams of the tensor's size for the norms and softmax and four for
/// add+RMSNorm, over the time triad's three streams take).
#[cfg(target_arch = "x86_64")]
fn rows_interleaved() {
    use opledger::backend::cpu::rows::RowKernels;
    use opledger::backend::cpu::{CaseConfig, CpuKernels};
    use opledger::kinds::add_rmsnorm::AddRmsnorm;
    use opledger::kinds::rows::{Layernorm, Rmsnorm, RowOp, Softmax};
    use opledger::kinds::tensors::LineVec;
    use opledger::kinds::{Workload, WorkloadKind};
    let (rows, cols) = (16384usize, 4096usize);
    let n = rows * cols;
    let r = RowOp {
        rows: rows as u64,
        cols: cols as u64,
        dtype: DType::F32,
        eps: 1e-5,
    };
    let mut kernels: Vec<(&str, Box<dyn Kernels>, f64)> = [
        ("RMSNorm", WorkloadKind::Rmsnorm),
        ("LayerNorm", WorkloadKind::Layernorm),
        ("softmax", WorkloadKind::Softmax),
    ]
    .into_iter()
    .map(|(name, kind)| {
        let w = match kind {
            WorkloadKind::Rmsnorm => Workload::Rmsnorm(Rmsnorm(r.clone())),
            WorkloadKind::Layernorm => Workload::Layernorm(Layernorm(r.clone())),
            _ => Workload::Softmax(Softmax(r.clone())),
        };
        let inputs = Arc::new(w.as_kind().inputs(1));
        let k: Box<dyn Kernels> = Box::new(RowKernels::new(kind, r.clone(), inputs, true));
        (name, k, 2.0)
    })
    .collect();
    let add = AddRmsnorm(r.clone());
    let cfg = CaseConfig {
        stream: true,
        experiment_slowdown: 0.0,
    };
    let add_kernels = add
        .kernels(Arc::new(add.inputs(1)), &cfg)
        .expect("add+RMSNorm's kernels");
    kernels.push(("add+RMSNorm", add_kernels, 4.0));
    let (ta, tb) = (LineVec::filled(n, 0.5), LineVec::filled(n, 0.25));
    let mut ty = LineVec::zeroed(n);
    let mut out = LineVec::zeroed(n);
    let time = |f: &mut dyn FnMut()| {
        let s = Instant::now();
        f();
        s.elapsed().as_secs_f64()
    };
    let mut triad = || triad_pass(&mut ty, &ta, &tb);
    triad();
    for (_, k, _) in kernels.iter_mut() {
        k.run(Variant::Fused, &mut out);
    }
    let rounds = 15;
    let mut secs = vec![Vec::new(); kernels.len()];
    let mut frac = vec![Vec::new(); kernels.len()];
    for _ in 0..rounds {
        let triad_bytes_per_sec = 3.0 * (n * 4) as f64 / time(&mut triad);
        for (j, (_, k, streams)) in kernels.iter_mut().enumerate() {
            let s = time(&mut || k.run(Variant::Fused, &mut out));
            secs[j].push(s);
            frac[j].push(*streams * (n * 4) as f64 / s / triad_bytes_per_sec);
        }
    }
    let mid = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2], v[0], v[v.len() - 1])
    };
    for (j, (name, _, _)) in kernels.iter().enumerate() {
        let (s, s_lo, s_hi) = mid(&mut secs[j]);
        let (f, f_lo, f_hi) = mid(&mut frac[j]);
        println!(
            "{name} {rows}x{cols} fused, {rounds} rounds: {:.2} ms [{:.2}-{:.2}], {:.0}% [{:.0}-{:.0}%] of the round's triad",
            s * 1e3,
            s_lo * 1e3,
            s_hi * 1e3,
            100.0 * f,
            100.0 * f_lo,
            100.0 * f_hi
        );
    }
}

/// `-- blocks` (only by name): the tiled GEMM at the ledger's blocking and at candidates
/// (`OPLEDGER_BENCH_BLOCKS="mc,nc,kc;mc,nc,kc"`), run in turns within one process so that the
/// machine's slow and fast seconds fall on both: each pair's time over the ledger's: the median
/// of the pairs and their middle half (quartiles) in brackets.
fn gemm_blocks() {
    use opledger::backend::cpu::gemm::Blocks;
    let candidates: Vec<Blocks> = triples(
        "OPLEDGER_BENCH_BLOCKS",
        "132,512,256;132,512,768;264,512,512;132,1024,512",
    )
    .into_iter()
    .map(|[mc, nc, kc]| Blocks {
        mc: mc as usize,
        nc: nc as usize,
        kc: kc as usize,
    })
    .collect();
    let sizes = triples(
        "OPLEDGER_BENCH_SIZES",
        "1152,1152,1152;1536,1536,1536;1000,1000,1000",
    );
    let pairs = match std::env::var("OPLEDGER_BENCH_PAIRS") {
        Err(_) => 21,
        Ok(p) => match p.trim().parse::<usize>() {
            Ok(p) if p > 0 => p,
            _ => bad_setting(
                "OPLEDGER_BENCH_PAIRS",
                &p,
                "a whole number of pairs, 1 or more",
            ),
        },
    };
    let name = |b: Blocks| format!("{}/{}/{}", b.mc, b.nc, b.kc);
    for [m, n, k] in sizes {
        let g = Gemm {
            m,
            n,
            k,
            dtype: DType::F32,
        };
        let inputs = Arc::new(g.inputs(1));
        let mut out = opledger::kinds::tensors::LineVec::zeroed((m * n) as usize);
        let mut base = GemmKernels::new(g.clone(), inputs.clone());
        for &b in &candidates {
            let mut cand = GemmKernels::with_blocks(g.clone(), inputs.clone(), b);
            base.run(Variant::Tiled, &mut out);
            cand.run(Variant::Tiled, &mut out);
            let (mut ratios, mut base_secs, mut cand_secs) = (vec![], vec![], vec![]);
            for i in 0..pairs {
                let mut time = |k: &mut GemmKernels| {
                    let s = Instant::now();
                    k.run(Variant::Tiled, &mut out);
                    s.elapsed().as_secs_f64()
                };
                // Which side goes first alternates, so that neither always follows the other.
                let (tb, tc) = if i % 2 == 0 {
                    let tb = time(&mut base);
                    (tb, time(&mut cand))
                } else {
                    let tc = time(&mut cand);
                    (time(&mut base), tc)
                };
                ratios.push(tc / tb);
                base_secs.push(tb);
                cand_secs.push(tc);
            }
            for v in [&mut ratios, &mut base_secs, &mut cand_secs] {
                v.sort_by(f64::total_cmp);
            }
            println!(
                "gemm {m}x{n}x{k} blocks {} over {}: {:.3} [quartiles {:.3}-{:.3}] ({:.2} ms against {:.2} ms, medians of {pairs} pairs)",
                name(b),
                name(Blocks::LEDGER),
                ratios[pairs / 2],
                ratios[pairs / 4],
                ratios[3 * pairs / 4],
                cand_secs[pairs / 2] * 1e3,
                base_secs[pairs / 2] * 1e3,
            );
        }
    }
}

/// The `a,b,c;a,b,c` triples an environment variable names (`default` where it is unset), each
/// value 1 or more; anything else stops the bench with what was expected.
fn triples(var: &str, default: &str) -> Vec<[u64; 3]> {
    let text = std::env::var(var).unwrap_or_else(|_| default.into());
    text.split(';')
        .map(|t| {
            let v: Vec<u64> = t
                .split(',')
                .map_while(|x| x.trim().parse().ok().filter(|&x| x > 0))
                .collect();
            match v[..] {
                [a, b, c] if t.split(',').count() == 3 => [a, b, c],
                _ => bad_setting(var, t, "three whole numbers of 1 or more, as `a,b,c`"),
            }
        })
        .collect()
}

/// Stops the bench on a setting it cannot use, saying which and what it expected.
fn bad_setting(var: &str, value: &str, expected: &str) -> ! {
    eprintln!("{var}: `{value}` is not {expected}");
    std::process::exit(2)
}
