//! The IO ledger of every kind, checked against hand-counted bytes and FLOPs.

use super::probe::PROBE_FMA_ITERS;
use super::*;
use crate::ledger::{Tiling, GEMM_DECODE_MAX_M, GEMM_KC, GEMM_MC, GEMM_NC};

fn ew(ops: &[ElemOp], rows: u64, cols: u64) -> Workload {
    Workload::Elementwise(Elementwise {
        ops: ops.to_vec(),
        rows,
        cols,
        dtype: DType::F32,
        scale: 0.5,
    })
}

#[test]
fn bias_gelu_8192x4096_exact_bytes() {
    let w = ew(&[ElemOp::BiasAdd, ElemOp::Gelu], 8192, 4096);
    let l = (w).ledger(Variant::Unfused, Variant::Fused, &Tiling::CPU);
    let t = 8192u64 * 4096 * 4; // 134_217_728
    assert_eq!(l.before.bytes_moved(), 4 * t + 4096 * 4);
    assert_eq!(l.before.bytes_moved(), 536_887_296);
    assert_eq!(l.after.bytes_moved(), 2 * t + 4096 * 4);
    assert_eq!(l.after.bytes_moved(), 268_451_840);
    assert_eq!(l.before.flops, 8192 * 4096 * 10);
    assert_eq!(l.after.flops, l.before.flops);
    assert_eq!(l.before.launches, 2);
    assert_eq!(l.after.launches, 1);
    let s = l.io_saving();
    assert!(
        (s - (1.0 - 268_451_840.0 / 536_887_296.0)).abs() < 1e-12,
        "{s}"
    );
}

#[test]
fn chain_with_operands_counts_every_tensor() {
    let w = ew(
        &[ElemOp::Scale, ElemOp::Add, ElemOp::Relu, ElemOp::Mul],
        4,
        8,
    );
    let l = (w).ledger(Variant::Unfused, Variant::Fused, &Tiling::CPU);
    let t = 4 * 8 * 4;
    // unfused: x r, add operand r, mul operand r, t1..t3 r+w, y w
    assert_eq!(l.before.bytes_moved(), (1 + 1 + 1 + 6 + 1) * t);
    // fused: x, two operands, y
    assert_eq!(l.after.bytes_moved(), 4 * t);
    assert!((l.io_saving() - 0.6).abs() < 1e-12);
}

#[test]
fn norms_and_softmax_save_their_intermediates() {
    let r = RowOp {
        rows: 8,
        cols: 16,
        dtype: DType::F32,
        eps: 1e-5,
    };
    let t = 8 * 16 * 4;
    let v = 8 * 4;
    let w = 16 * 4;
    let rms = (Workload::Rmsnorm(Rmsnorm(r.clone()))).ledger(
        Variant::Unfused,
        Variant::Fused,
        &Tiling::CPU,
    );
    assert_eq!(
        rms.before.bytes_moved(),
        2 * t + 2 * t + 2 * v + 2 * v + 2 * t + w + t
    );
    assert_eq!(rms.after.bytes_moved(), 2 * t + w);
    let sm = (Workload::Softmax(Softmax(r.clone()))).ledger(
        Variant::Unfused,
        Variant::Fused,
        &Tiling::CPU,
    );
    assert_eq!(sm.before.bytes_moved(), 2 * t + 2 * v + 3 * t + 2 * v + t);
    assert_eq!(sm.after.bytes_moved(), 2 * t);
    let ln =
        (Workload::Layernorm(Layernorm(r))).ledger(Variant::Unfused, Variant::Fused, &Tiling::CPU);
    assert_eq!(ln.after.bytes_moved(), 2 * t + 2 * w);
    assert!(ln.io_saving() > rms.io_saving() * 0.9);
}

#[test]
fn bf16_attention_moves_half_the_bytes_and_follows_the_bf16_tiles() {
    let at = |dtype| Attention {
        batch: 1,
        heads: 2,
        seq_len: 1024,
        head_dim: 128,
        dtype,
        causal: false,
    };
    let w = |dtype| Workload::Attention(at(dtype));
    let std32 = w(DType::F32).variant_ledger(Variant::Standard);
    let std16 = w(DType::Bf16).variant_ledger(Variant::Standard);
    assert_eq!(std16.bytes_moved() * 2, std32.bytes_moved());
    assert_eq!(std16.flops, std32.flops);
    // CUDA bf16 flash: Q + O once, K and V once per 64-row Q tile (1024/64 = 16).
    let qkvo = 2 * 1024 * 128 * 2;
    let f = (w(DType::Bf16))
        .as_kind()
        .ledger(Variant::Flash, &Tiling::CUDA);
    assert_eq!(f.bytes_moved(), 2 * qkvo + 2 * 16 * qkvo);
    // With an L2 of 50 MiB one head's K and V (512 KiB) fit in a quarter: read once.
    let l2 = Tiling {
        reuse_cache_bytes: 50 << 20,
        ..Tiling::CUDA
    };
    let f = (w(DType::Bf16)).as_kind().ledger(Variant::Flash, &l2);
    assert_eq!(f.bytes_moved(), 4 * qkvo);
    // An L2 of 1 MiB is too small for that: the re-reads count again.
    let small = Tiling {
        reuse_cache_bytes: 1 << 20,
        ..Tiling::CUDA
    };
    let f = (w(DType::Bf16)).as_kind().ledger(Variant::Flash, &small);
    assert_eq!(f.bytes_moved(), 2 * qkvo + 2 * 16 * qkvo);
}

#[test]
fn attention_standard_is_quadratic_flash_linear() {
    let at = |n, causal| Attention {
        batch: 1,
        heads: 2,
        seq_len: n,
        head_dim: 64,
        dtype: DType::F32,
        causal,
    };
    let bytes = |n, v| {
        Workload::Attention(at(n, false))
            .variant_ledger(v)
            .bytes_moved()
    };
    // Standard: doubling N roughly quadruples the bytes once N² dominates.
    let (s1, s2) = (
        bytes(4096, Variant::Standard),
        bytes(8192, Variant::Standard),
    );
    assert!(s2 as f64 / s1 as f64 > 3.9);
    // Flash with K,V re-read once per Q tile: bytes = Q+O + 2·(N/Br)·KV: grows as N²/Br,
    // but with a coefficient d/Br·... far below standard.
    let f1 = bytes(4096, Variant::Flash);
    assert!(f1 * 4 < s1, "{f1} vs {s1}");
    // FLOPs: 4·N²·d per head, halved when causal.
    let l = Workload::Attention(at(1024, false)).variant_ledger(Variant::Flash);
    assert_eq!(l.flops, 4 * 2 * 1024 * 1024 * 64);
    let c = Workload::Attention(at(1024, true)).variant_ledger(Variant::Flash);
    assert_eq!(c.flops, l.flops / 2);
}

#[test]
fn cuda_tiling_rereads_more_than_the_cpu_tiles() {
    let a = Workload::Attention(Attention {
        batch: 1,
        heads: 2,
        seq_len: 4096,
        head_dim: 128,
        causal: false,
        dtype: DType::F32,
    });
    let qkvo = 2 * 4096 * 128 * 4;
    let cpu = (a).ledger(Variant::Standard, Variant::Flash, &Tiling::CPU);
    let gpu = a.ledger(Variant::Standard, Variant::Flash, &Tiling::CUDA);
    // Q read once, O written once; the CUDA kernel reads K and V once per Q tile of 32 rows
    // (4096/32 = 128); the CPU kernel reads them once to pack them, writes the packed copies
    // and re-reads those once per Q tile of 256 rows (16), and writes one worker's tiles
    // (packed Q 256×128, the score tile and packed P 256×256).
    let tiles = (256 * 128 + 2 * 256 * 256) * 4;
    assert_eq!(
        cpu.after.bytes_moved(),
        qkvo * (2 + 2 + 2 * (16 + 1)) + tiles
    );
    assert_eq!(
        cpu.after.tile_bytes,
        Some(tiles + 2 * 256 * 128 * 4),
        "the tiles with one key tile's K and V"
    );
    assert_eq!(gpu.after.tile_bytes, None);
    assert_eq!(gpu.after.bytes_moved(), qkvo * (2 + 2 * 128));
    // Standard on the CPU packs K and V too and re-reads the packed copies once per query
    // tile (16); its output rows are read back once per key tile after the first (15) and
    // written once per key tile (16). The GPU's standard reads K and V once.
    let s = 2 * 4096 * 4096 * 4;
    assert_eq!(
        cpu.before.bytes_moved(),
        3 * qkvo + 2 * qkvo * (16 + 1) + 4 * s + qkvo * (15 + 16)
    );
    assert_eq!(gpu.before.bytes_moved(), 3 * qkvo + 4 * s + qkvo);
    let g = Workload::Gemm(Gemm {
        m: 1024,
        n: 1024,
        k: 1024,
        dtype: DType::F32,
    });
    let l = g.ledger(Variant::Naive, Variant::Tiled, &Tiling::CUDA);
    let mat = 1024 * 1024 * 4;
    // A and B once per 64-wide block, C written once (accumulated in registers).
    assert_eq!(l.after.bytes_moved(), mat * 16 + mat * 16 + mat);
}

#[test]
fn gemm_naive_rereads_b_tiled_by_blocks() {
    let g = Gemm {
        m: 1024,
        n: 1024,
        k: 1024,
        dtype: DType::F32,
    };
    let mat = 1024 * 1024 * 4;
    let naive = Workload::Gemm(g.clone()).variant_ledger(Variant::Naive);
    assert_eq!(naive.bytes_moved(), mat + 1024 * mat + mat);
    let tiled = Workload::Gemm(g).variant_ledger(Variant::Tiled);
    let expect = mat * 1024u64.div_ceil(GEMM_NC)
        + mat * 1024u64.div_ceil(GEMM_MC)
        + mat * (2 * 1024u64.div_ceil(GEMM_KC) - 1);
    assert_eq!(tiled.bytes_moved(), expect);
    assert_eq!(tiled.flops, 2 * 1024 * 1024 * 1024);
}

/// Up to GEMM_DECODE_MAX_M rows of A the CPU's tiled GEMM is the decode product: A and B read
/// once, A's transposed copy and C written once, nothing packed, with a reuse cache or without;
/// one row more and it is the packed micro-kernel path again. The CUDA kernel has no such path.
#[test]
fn the_cpu_gemm_of_a_few_rows_is_the_decode_product() {
    let gemm = |m| Gemm {
        m,
        n: 3000,
        k: 256,
        dtype: DType::F32,
    };
    let (a, b, c) = (16 * 256 * 4, 256 * 3000 * 4, 16 * 3000 * 4);
    for reuse in [0, 1 << 20] {
        let t = Tiling {
            reuse_cache_bytes: reuse,
            ..Tiling::CPU
        };
        let l = Workload::Gemm(gemm(GEMM_DECODE_MAX_M)).ledger(Variant::Naive, Variant::Tiled, &t);
        let read: u64 = l.after.movements.iter().map(|m| m.bytes * m.reads).sum();
        let written: u64 = l.after.movements.iter().map(|m| m.bytes * m.writes).sum();
        assert_eq!((read, written), (a + b, a + c), "reuse {reuse}");
        assert!(l.after.movements.iter().any(|m| m.tensor == "A transposed"));
        assert_eq!(l.after.flops, 2 * 16 * 3000 * 256);
        let packed =
            Workload::Gemm(gemm(GEMM_DECODE_MAX_M + 1)).ledger(Variant::Naive, Variant::Tiled, &t);
        assert!(!packed
            .after
            .movements
            .iter()
            .any(|m| m.tensor == "A transposed"));
    }
    let cuda = Workload::Gemm(gemm(16)).ledger(Variant::Naive, Variant::Tiled, &Tiling::CUDA);
    assert!(!cuda
        .after
        .movements
        .iter()
        .any(|m| m.tensor == "A transposed"));
}

#[test]
fn the_cpu_gemm_with_a_reuse_cache_reads_a_and_b_once_where_its_buffers_fit() {
    let g = Workload::Gemm(Gemm {
        m: 768,
        n: 768,
        k: 768,
        dtype: DType::F32,
    });
    let mat = 768 * 768 * 4;
    // The packed A slice (every row over KC), the packed B block (KC × NC), a C block (MC × NC).
    let (a_buf, b_buf, c_block) = (
        768 * GEMM_KC * 4,
        GEMM_KC * GEMM_NC * 4,
        GEMM_MC * GEMM_NC * 4,
    );
    let with = |reuse: u64| {
        let t = Tiling {
            reuse_cache_bytes: reuse,
            ..Tiling::CPU
        };
        g.ledger(Variant::Naive, Variant::Tiled, &t).after
    };
    // 8 MiB: the buffers (twice over) fit, and C beside them: A and B read once, the buffers'
    // first writes, C written once.
    let l = with(8 << 20);
    assert_eq!(l.tile_bytes, Some(2 * (a_buf + b_buf + c_block)));
    let read: u64 = l.movements.iter().map(|m| m.bytes * m.reads).sum();
    let written: u64 = l.movements.iter().map(|m| m.bytes * m.writes).sum();
    assert_eq!((read, written), (2 * mat, mat + a_buf + b_buf));
    // 2 MiB: the working set does not fit; the blocked model, with its tiles named.
    let small = with(2 << 20);
    assert_eq!(small.tile_bytes, Some(2 * (a_buf + b_buf + c_block)));
    assert_eq!(
        small.bytes_moved(),
        Workload::Gemm(Gemm {
            m: 768,
            n: 768,
            k: 768,
            dtype: DType::F32,
        })
        .variant_ledger(Variant::Tiled)
        .bytes_moved()
    );
    // No reuse cache (the time ledger): the blocked model, no tiles named.
    assert_eq!(with(0).tile_bytes, None);
}

#[test]
fn launch_chain_differs_only_in_launches() {
    let l = LaunchChain {
        n_ops: 200,
        elements: 4096,
        dtype: DType::F32,
    };
    let e = Workload::LaunchChain(l.clone()).variant_ledger(Variant::Eager);
    let g = Workload::LaunchChain(l).variant_ledger(Variant::Graph);
    assert_eq!(e.bytes_moved(), g.bytes_moved());
    assert_eq!((e.launches, g.launches), (200, 1));
}

#[test]
fn probes_move_stream_bytes_and_fma_is_compute_bound() {
    let p = ProbeWorkload {
        elements: 1000,
        dtype: DType::F32,
    };
    let l = |v| Workload::Probe(p.clone()).variant_ledger(v);
    assert_eq!(l(Variant::Copy).bytes_moved(), 8000);
    assert_eq!(l(Variant::Triad).bytes_moved(), 12000);
    assert_eq!(l(Variant::Triad).flops, 2000);
    assert_eq!(l(Variant::Fma).flops, 2 * PROBE_FMA_ITERS * 1000);
    assert!(l(Variant::Fma).intensity() > 50.0);
}

#[test]
fn cpu_attention_re_reads_follow_the_reuse_cache() {
    let at = |n, d| Attention {
        batch: 1,
        heads: 1,
        seq_len: n,
        head_dim: d,
        causal: false,
        dtype: DType::F32,
    };
    let mib = Tiling {
        reuse_cache_bytes: 1 << 20,
        ..Tiling::CPU
    };
    let reads = |l: &crate::ledger::VariantLedger, name: &str| {
        l.movements
            .iter()
            .find(|m| m.tensor == name)
            .map(|m| m.reads)
    };
    // d = 64: the flash tiles are 704 KiB; one head's packed K and V 2·N·256 B.
    let flash = |n| {
        Workload::Attention(at(n, 64))
            .as_kind()
            .ledger(Variant::Flash, &mib)
    };
    // N = 512: 960 KiB, within a quarter of the 1 MiB level: undecided, named.
    let l = flash(512);
    assert_eq!(l.near_cache_bytes, Some(704 * 1024 + 256 * 1024));
    // N = 1024: 1216 KiB exceed it: every query tile (4) re-reads them from memory.
    let l = flash(1024);
    assert_eq!((reads(&l, "K packed"), l.near_cache_bytes), (Some(4), None));
    assert_eq!(l.tile_bytes, Some(704 * 1024));
    // d = 16, N = 512: 560 + 64 KiB fit three quarters: the packed copies stay.
    let l = Workload::Attention(at(512, 16))
        .as_kind()
        .ledger(Variant::Flash, &mib);
    assert_eq!((reads(&l, "K packed"), l.near_cache_bytes), (Some(0), None));
    // Two heads of d = 16 at N = 1024 (256 KiB packed): one head's fit, all do not: once.
    let two = Attention {
        heads: 2,
        ..at(1024, 16)
    };
    let l = Workload::Attention(two)
        .as_kind()
        .ledger(Variant::Flash, &mib);
    assert_eq!((reads(&l, "K packed"), l.near_cache_bytes), (Some(1), None));
    // Standard: a query tile's S rows stream between two reads of the packed K, and the output
    // rows are read back per key tile: at N = 2048 (8 tiles each way) from memory.
    let l = Workload::Attention(at(2048, 64))
        .as_kind()
        .ledger(Variant::Standard, &mib);
    assert_eq!(reads(&l, "K packed"), Some(8));
    assert_eq!(reads(&l, "O"), Some(7));
    assert!(l.tile_bytes.is_some() && l.near_cache_bytes.is_none());
    // Where everything fits (N = 128 on 8 MiB), nothing is re-read and O is written once.
    let big = Tiling {
        reuse_cache_bytes: 8 << 20,
        ..Tiling::CPU
    };
    let l = Workload::Attention(at(128, 64))
        .as_kind()
        .ledger(Variant::Standard, &big);
    assert_eq!((reads(&l, "K packed"), reads(&l, "O")), (Some(0), Some(0)));
}

#[test]
fn cpu_naive_gemm_re_reads_b_only_where_it_exceeds_the_reuse_cache() {
    let g = |m, n, k| Gemm {
        m,
        n,
        k,
        dtype: DType::F32,
    };
    let with = |bytes: u64| Tiling {
        reuse_cache_bytes: bytes,
        ..Tiling::CPU
    };
    let b_reads = |l: &crate::ledger::VariantLedger| {
        l.movements
            .iter()
            .find(|m| m.tensor == "B")
            .map(|m| m.reads)
    };
    // 32 x 2048 x 256: B is 2 MiB. On 8 MiB it stays (read once); on 1.5 MiB every row of C
    // sweeps it from memory (32 times); on 2.25 MiB it is within a quarter: undecided.
    let naive = |t: &Tiling| g(32, 2048, 256).ledger(Variant::Naive, t);
    assert_eq!(b_reads(&naive(&with(8 << 20))), Some(1));
    let spilled = naive(&with(3 << 19));
    assert_eq!(b_reads(&spilled), Some(32));
    assert_eq!(spilled.tile_bytes, Some((256 + 2048) * 4));
    assert!(naive(&with(9 << 18)).near_cache_bytes.is_some());
    // Without a reuse cache (the time ledger) B is read once per row of C, as before.
    assert_eq!(b_reads(&naive(&Tiling::CPU)), Some(32));
    // The tiled side fits its buffers in 1.5 MiB: A and B once.
    let tiled = g(32, 2048, 256).ledger(Variant::Tiled, &with(3 << 19));
    assert!(tiled.tile_bytes.is_some_and(|t| t <= 3 << 19));
    assert_eq!(b_reads(&tiled), Some(1));
}
