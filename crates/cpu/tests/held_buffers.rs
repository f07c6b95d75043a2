//! The cold flush evicts a case's inputs, its outputs and what its kernels list as their own
//! buffers (`Kernels::buffers`, and each thread's `Kernels::thread_buffers`): a buffer kept between runs
//! and left off that list would stay in the caches, and its side would be timed warm. This test
//! binary counts every large allocation (its own global allocator) while each kind's kernels
//! are made and run, and checks that every one still held afterwards lies in a listed buffer or
//! an output, and that no run allocates and frees a large buffer of its own (one the allocator
//! hands back warm at the next run).

use opledger_cpu::{kernels_of, CaseConfig, Kernels};
use opledger_model::kinds::tensors::LineVec;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Allocations from this size up are followed.
const LARGE_BYTES: usize = 256 << 10;
/// A buffer a run allocates and frees itself, from this size up, fails the test.
const TEMPORARY_BYTES: usize = 1 << 20;
const SLOTS: usize = 4096;

/// The live large allocations (address, bytes; address 0 is a free slot), and the largest one
/// freed since the counter was last reset.
static ADDRESSES: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
static SIZES: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
static LARGEST_FREED: AtomicUsize = AtomicUsize::new(0);

struct Following;

impl Following {
    fn born(p: *mut u8, bytes: usize) {
        if p.is_null() || bytes < LARGE_BYTES {
            return;
        }
        for (a, s) in ADDRESSES.iter().zip(&SIZES) {
            if a.compare_exchange(0, p as usize, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                s.store(bytes, Ordering::Release);
                return;
            }
        }
        panic!("more than {SLOTS} large allocations at once");
    }
    fn died(p: *mut u8, bytes: usize) {
        if bytes < LARGE_BYTES {
            return;
        }
        for a in &ADDRESSES {
            if a.compare_exchange(p as usize, 0, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                LARGEST_FREED.fetch_max(bytes, Ordering::AcqRel);
                return;
            }
        }
    }
}

// SAFETY: every call is passed on to the system allocator unchanged; the bookkeeping only
// reads the pointers it returns.
unsafe impl GlobalAlloc for Following {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.alloc(layout) };
        Self::born(p, layout.size());
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.alloc_zeroed(layout) };
        Self::born(p, layout.size());
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        Self::died(p, layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(p, layout) }
    }
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let q = unsafe { System.realloc(p, layout, new_size) };
        if !q.is_null() {
            Self::died(p, layout.size());
            Self::born(q, new_size);
        }
        q
    }
}

#[global_allocator]
static FOLLOWING: Following = Following;

fn live() -> Vec<(usize, usize)> {
    ADDRESSES
        .iter()
        .zip(&SIZES)
        .map(|(a, s)| (a.load(Ordering::Acquire), s.load(Ordering::Acquire)))
        .filter(|&(a, _)| a != 0)
        .collect()
}

/// A buffer's place: (address, bytes).
fn place(s: &[f32]) -> (usize, usize) {
    (s.as_ptr() as usize, std::mem::size_of_val(s))
}

fn overlaps((a, bytes): (usize, usize), (start, len): (usize, usize)) -> bool {
    len > 0 && a < start + len && start < a + bytes
}

/// Specs of every kind with kernels, at sizes whose buffers are large enough to be followed.
const SPECS: &[&str] = &[
    "kind: gemm\n  m: 96\n  n: 700\n  k: 600",
    // The decode product (a few rows of A).
    "kind: gemm\n  m: 8\n  n: 3000\n  k: 256",
    "kind: attention\n  batch: 1\n  heads: 2\n  seq_len: 600\n  head_dim: 64\n  causal: false",
    "kind: attention\n  batch: 1\n  heads: 2\n  seq_len: 600\n  head_dim: 64\n  causal: true",
    "kind: elementwise\n  ops: [bias_add, gelu]\n  rows: 512\n  cols: 512",
    "kind: elementwise\n  ops: [scale, add, relu, mul]\n  rows: 512\n  cols: 512",
    "kind: rmsnorm\n  rows: 512\n  cols: 512\n  eps: 1.0e-5",
    "kind: layernorm\n  rows: 512\n  cols: 512\n  eps: 1.0e-5",
    "kind: softmax\n  rows: 512\n  cols: 512",
    "kind: add_rmsnorm\n  rows: 512\n  cols: 512\n  eps: 1.0e-5",
    "kind: launch_chain\n  n_ops: 8\n  elements: 262144",
    "kind: probe\n  elements: 262144",
];

fn variants(kind: &str) -> &'static str {
    match kind {
        "gemm" => "{before: naive, after: tiled}",
        "attention" => "{before: standard, after: flash}",
        "launch_chain" => "{before: eager, after: graph}",
        "probe" => "{before: copy, after: triad}",
        _ => "{before: unfused, after: fused}",
    }
}

/// Every kind of the registry with built-in kernels has a spec above: a new kind's kernels are
/// checked from the day they exist. (Part of the one test below: this binary follows every
/// allocation of the process, so no other test may run beside it.)
fn every_kind_with_kernels_is_followed() {
    use opledger_model::kinds::WorkloadKind;
    for k in WorkloadKind::ALL {
        let listed = SPECS
            .iter()
            .any(|s| s.starts_with(&format!("kind: {}\n", k.name())));
        assert!(
            listed || !k.builtin_kernels(),
            "kind {} has kernels and no spec in SPECS",
            k.name()
        );
    }
}

/// Each kind's kernels, made and run twice a side on both the plain and the streaming path:
/// every large buffer they still hold is one they list, and no run made a large one of its own.
#[test]
fn every_buffer_kernels_keep_is_one_the_cold_flush_evicts() {
    every_kind_with_kernels_is_followed();
    // The pool's own allocations first, and the flush's buffer (made at its first flush).
    rayon::broadcast(|_| ());
    struct NoKernels;
    impl Kernels for NoKernels {
        fn run(&mut self, _: opledger_model::kinds::Variant, _: &mut [f32]) {}
        fn buffers(&self) -> Vec<&[f32]> {
            Vec::new()
        }
    }
    // A read flush of 1 TiB, never made: no case here has more than twice its bytes, so every
    // case evicts (`cold::EVICT_OVER_READ`), as the backend's shipped cases do.
    let flush = opledger_cpu::ColdFlush::evicting_or_read(2, 1 << 20, 1 << 40);
    flush.flush(&[], &NoKernels);
    for workload in SPECS {
        let kind = workload
            .trim_start_matches("kind: ")
            .split('\n')
            .next()
            .unwrap_or("");
        let text = format!(
            "name: held\ntitle: held buffers\nworkload:\n  {workload}\nvariants: {}\nexpect: {{bound: bandwidth}}\n",
            variants(kind)
        );
        let spec = opledger_model::spec::parse(std::path::Path::new("held.yaml"), text.as_bytes())
            .unwrap_or_else(|e| panic!("{workload}: {e}"));
        let k = kernels_of(&spec.workload);
        for stream in [false, true] {
            let inputs = std::sync::Arc::new(spec.workload.as_kind().inputs(1));
            let before = live();
            let cfg = CaseConfig {
                stream,
                experiment_slowdown: 0.0,
            };
            let mut kernels: Box<dyn Kernels> = k.kernels(inputs.clone(), &cfg).expect("kernels");
            // The cold flush on kernels that have not run yet (their buffers, and each thread's,
            // may still be empty).
            flush.flush(&kernels.buffers(), kernels.as_ref());
            let mut outputs: Vec<LineVec> = Vec::new();
            let sides = [spec.variants.before, spec.variants.after];
            for v in sides {
                let mut out = LineVec::filled(k.output_len() as usize, f32::NAN);
                kernels.run(v, &mut out);
                outputs.push(out);
            }
            LARGEST_FREED.store(0, Ordering::Release);
            for (v, out) in sides.iter().zip(&mut outputs) {
                kernels.run(*v, out);
            }
            let freed = LARGEST_FREED.load(Ordering::Acquire);
            flush.flush(&kernels.buffers(), kernels.as_ref());
            assert!(
                freed < TEMPORARY_BYTES,
                "{kind} (stream {stream}): a run allocated and freed a buffer of {freed} bytes: keep it in the kernels and list it"
            );
            // What the backend's cold flush evicts (`cold::case_buffers`), as it lists it.
            let outs = outputs.iter().map(|o| &o[..]);
            let listed: Vec<(usize, usize)> =
                opledger_cpu::cold::case_buffers(&inputs, outs, kernels.as_ref())
                    .into_iter()
                    .map(place)
                    .collect();
            // Each thread's own.
            let per_thread = std::sync::Mutex::new(listed);
            kernels.thread_buffers(&|bufs: &[&[f32]]| {
                let mut p = per_thread.lock().unwrap_or_else(|e| e.into_inner());
                p.extend(bufs.iter().map(|b| place(b)));
            });
            let listed = per_thread.into_inner().unwrap_or_else(|e| e.into_inner());
            for held in live().into_iter().filter(|h| !before.contains(h)) {
                assert!(
                    listed.iter().any(|&s| overlaps(held, s)),
                    "{workload} (stream {stream}): the kernels hold {} bytes that no listed buffer covers",
                    held.1
                );
            }
            drop(kernels);
        }
    }
}
