//! The cold-cache flush before every timed sample, two ways:
//!
//! - **evict** (the default wherever the CPU evicts lines by address: every x86-64): every cache
//!   line of the case's own buffers — its inputs, both sides' outputs, the kernels'
//!   intermediates and packed copies ([`crate::Kernels::buffers`]) — is evicted from every level
//!   of the hierarchy (`clflushopt`, or `clflush` where the CPU lacks it; dirty lines are written
//!   back first), then a buffer of twice the cores' L2 caches is read, which clears their
//!   private caches of whatever else the run left there. Every byte the kernels read or write
//!   then comes from memory, as after a read of twice the last level, at the cost of the case's
//!   own lines instead of the last level's (docs/measurement.md: the two measured side by side).
//! - **read**: a buffer of twice the last-level cache read (`--flush-mib` sets its size): for
//!   what opledger cannot enumerate — a worker's process reads its own —, for a case of more
//!   than twice its bytes (sooner read than evicted: [`EVICT_OVER_READ`]), and where the user
//!   asks for it.

use crate::simd::LineVec;
use opledger_model::device::FlushMethod;
use rayon::prelude::*;
use std::hint::black_box;

/// A read-only stream over a large buffer: it evicts the case's data, and since it writes
/// nothing, no dirty lines of its own are written back during the next timed run. The buffer
/// is made at the first flush, after the ceilings' probe has freed its arrays: a run's memory
/// is kept for reuse (`keep_freed_memory` in the backend), so the flush takes the probe's pages
/// instead of faulting in as many new ones.
pub struct FlushBuffer {
    bytes: u64,
    data: std::sync::OnceLock<LineVec>,
}

impl FlushBuffer {
    pub fn new(bytes: u64) -> Self {
        FlushBuffer {
            bytes: bytes / 4 * 4,
            data: std::sync::OnceLock::new(),
        }
    }
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
    /// Whether the buffer has been made (by a first flush).
    pub fn is_made(&self) -> bool {
        self.data.get().is_some()
    }
    fn data(&self) -> &[f32] {
        // On huge pages (LineVec): a 4 KiB page at a time, the buffer faulted in a quarter of
        // a million pages and its reads walked the page tables every 4 KiB.
        self.data
            .get_or_init(|| LineVec::filled((self.bytes / 4) as usize, 1.0))
    }
    /// Reads every line of the buffer: one word a 64-byte line (the buffer is line-aligned),
    /// which brings the whole line in and evicts what it replaces as a read of every word
    /// would, summed as integers (a float sum is one chain of dependent additions, which ran at
    /// a third of one core's read bandwidth). Every word of every line, in vectors of the
    /// baseline x86-64 level, was instruction-bound: a 600 MiB flush read at 16–17 GB/s where a
    /// word a line reads at 23 (docs/performance.md).
    pub fn flush(&self) {
        const LINE_WORDS: usize = 16;
        let s: u32 = self
            .data()
            .par_chunks(1 << 16)
            .map(|c| {
                c.iter()
                    .step_by(LINE_WORDS)
                    .fold(0u32, |a, x| a.wrapping_add(x.to_bits()))
            })
            .reduce(|| 0, u32::wrapping_add);
        black_box(s);
    }
}

/// How a CPU case's caches are made cold before each sample (see the module's note).
pub enum ColdFlush {
    /// The case's own lines evicted, then `private` read (twice the cores' L2 caches); `read`
    /// is the read flush for the sides of a pair whose other side is a worker's (made only if
    /// one is).
    Evict {
        private: FlushBuffer,
        read: FlushBuffer,
    },
    /// The buffer read, the case's lines untouched.
    Read(FlushBuffer),
}

impl ColdFlush {
    /// Evicting where this CPU can ([`can_evict`]), for a pool of `threads` threads, each core
    /// with an L2 of `l2_bytes`; else reading `read_bytes`.
    pub fn evicting_or_read(threads: usize, l2_bytes: u64, read_bytes: u64) -> ColdFlush {
        if can_evict() {
            // Twice the private caches, and at least 8 MiB: an L2 the machine does not report
            // is taken as large.
            let private = (2 * l2_bytes.max(1 << 20))
                .saturating_mul(threads.max(1) as u64)
                .max(8 << 20);
            ColdFlush::Evict {
                private: FlushBuffer::new(private),
                read: FlushBuffer::new(read_bytes),
            }
        } else {
            ColdFlush::Read(FlushBuffer::new(read_bytes))
        }
    }

    /// The run's method: how a case small enough to evict starts cold.
    pub fn method(&self) -> FlushMethod {
        match self {
            ColdFlush::Evict { .. } => FlushMethod::Evict,
            ColdFlush::Read(_) => FlushMethod::Read,
        }
    }

    /// How a case whose buffers hold `case_bytes` starts cold: evicted where the run evicts,
    /// unless its lines are more than [`EVICT_OVER_READ`] times the read flush's, which then
    /// costs less and is as cold (a read of twice the last level).
    pub fn method_for(&self, case_bytes: u64) -> FlushMethod {
        match self {
            ColdFlush::Evict { read, .. }
                if case_bytes > EVICT_OVER_READ.saturating_mul(read.bytes()) =>
            {
                FlushMethod::Read
            }
            _ => self.method(),
        }
    }

    /// Bytes the read flush reads ([`ColdFlush::flush_by_reading`]): a worker's process reads
    /// as many.
    pub fn read_bytes(&self) -> u64 {
        match self {
            ColdFlush::Evict { read, .. } | ColdFlush::Read(read) => read.bytes(),
        }
    }

    /// Bytes of the buffer it reads before a sample (made at the first flush).
    pub fn buffer_bytes(&self) -> u64 {
        match self {
            ColdFlush::Evict { private, .. } | ColdFlush::Read(private) => private.bytes(),
        }
    }

    /// The read flush, whatever the method: a worker's process reads as many bytes before each
    /// of its cold samples, and the built-in side of its pair starts cold by the same means
    /// (whatever a read of the whole last level leaves behind it, both sides meet it).
    pub fn flush_by_reading(&self) {
        match self {
            ColdFlush::Evict { read, .. } | ColdFlush::Read(read) => read.flush(),
        }
    }

    /// Makes the caches cold for a sample of a case whose buffers are `case_buffers`
    /// (the inputs and outputs and what `kernels` list) and whose kernels are `kernels`.
    pub fn flush(&self, case_buffers: &[&[f32]], kernels: &dyn crate::Kernels) {
        if self.method_for(bytes_of(case_buffers)) == FlushMethod::Read {
            return self.flush_by_reading();
        }
        match self {
            ColdFlush::Evict { private, .. } => {
                evict(case_buffers);
                kernels.thread_buffers(&evict_here);
                private.flush();
            }
            ColdFlush::Read(buffer) => buffer.flush(),
        }
    }
}

/// Where a case's buffers hold more than this many times the read flush's bytes, it starts cold
/// by the read flush instead of by evicting them: `clflushopt` costs about half of what reading
/// a line does (`cargo bench --bench kernels -- flush`; docs/performance.md), so past twice the
/// read the read costs less — on a machine with a 32 MiB last level (a read of 64 MiB) a
/// streaming case of 1 GiB would evict sixteen times the lines.
pub const EVICT_OVER_READ: u64 = 2;

/// The bytes `buffers` hold.
pub fn bytes_of(buffers: &[&[f32]]) -> u64 {
    buffers
        .iter()
        .map(|b| std::mem::size_of_val(*b) as u64)
        .sum()
}

/// What a case's cold flush evicts besides each thread's own buffers: its inputs, its outputs
/// and what its kernels keep ([`crate::Kernels::buffers`]).
pub fn case_buffers<'a>(
    inputs: &'a crate::kinds::Tensors,
    outputs: impl IntoIterator<Item = &'a [f32]>,
    kernels: &'a dyn crate::Kernels,
) -> Vec<&'a [f32]> {
    let mut held: Vec<&[f32]> = inputs.iter().map(|(_, _, t)| t).collect();
    held.extend(outputs);
    held.extend(kernels.buffers());
    held
}

/// Whether this CPU evicts cache lines by address: every x86-64 does (`clflush` is SSE2's).
pub fn can_evict() -> bool {
    cfg!(target_arch = "x86_64")
}

/// Floats of a buffer one task evicts: 256 KiB, so that a large tensor's lines are evicted by
/// every thread of the pool and a small one's by one.
#[cfg(target_arch = "x86_64")]
const EVICT_CHUNK: usize = 1 << 16;

/// Evicts every cache line of `bufs` from every level of the cache hierarchy (a dirty line is
/// written back first), on the pool's threads, each thread's evictions fenced before it ends;
/// nothing where the CPU cannot ([`can_evict`]). The values are unchanged.
pub fn evict(bufs: &[&[f32]]) {
    #[cfg(target_arch = "x86_64")]
    {
        let opt = has_clflushopt();
        bufs.par_iter()
            .flat_map(|b| b.par_chunks(EVICT_CHUNK))
            .for_each(|c| evict_lines(c, opt));
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bufs;
}

/// [`evict`] on this thread alone (on each thread of the pool, its own buffers).
pub fn evict_here(bufs: &[&[f32]]) {
    #[cfg(target_arch = "x86_64")]
    {
        let opt = has_clflushopt();
        for b in bufs {
            evict_lines(b, opt);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bufs;
}

/// Whether the CPU has `clflushopt` (CPUID leaf 7, EBX bit 23): `clflush` evicts one line
/// after another, `clflushopt` many at once. Read once.
#[cfg(target_arch = "x86_64")]
fn has_clflushopt() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        use std::arch::x86_64::{__cpuid, __cpuid_count};
        // Leaf 7 is read only where leaf 0 says it exists.
        __cpuid(0).eax >= 7 && __cpuid_count(7, 0).ebx & (1 << 23) != 0
    })
}

/// Evicts the lines `c` covers, the first from the line it starts in, then fences them.
#[cfg(target_arch = "x86_64")]
fn evict_lines(c: &[f32], opt: bool) {
    // An empty buffer's address points at nothing (an empty vector's is a placeholder).
    if c.is_empty() {
        return;
    }
    let end = c.as_ptr() as usize + std::mem::size_of_val(c);
    let mut line = c.as_ptr() as usize & !63;
    while line < end {
        // SAFETY: `line` is an address in a line that holds part of `c`, on a page of `c`'s
        // (a 64-byte line never crosses a page): mapped. Evicting a line changes no value in
        // memory, only where it is cached.
        unsafe {
            if opt {
                std::arch::asm!(
                    "clflushopt [{0}]",
                    in(reg) line,
                    options(nostack, preserves_flags)
                );
            } else {
                std::arch::x86_64::_mm_clflush(line as *const u8);
            }
        }
        line += 64;
    }
    // SAFETY: sfence has no preconditions; it orders this thread's evictions before what the
    // thread does next (the sample follows the pool's join).
    unsafe { std::arch::x86_64::_mm_sfence() };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kernels that keep no buffer of their own: a flush sees only the buffers it is given.
    struct NoKernels;
    impl crate::Kernels for NoKernels {
        fn run(&mut self, _: crate::kinds::Variant, _: &mut [f32]) {}
        fn buffers(&self) -> Vec<&[f32]> {
            Vec::new()
        }
    }

    /// Evicting leaves every value as it was, at any offset and length, tails included.
    #[test]
    fn eviction_changes_no_value() {
        let a: Vec<f32> = (0..300_001).map(|i| i as f32 * 0.5).collect();
        let b = LineVec::filled(17, -1.0);
        // Empty ones too: an empty vector's address is a placeholder, not memory.
        let empty: Vec<f32> = Vec::new();
        evict(&[&a[3..], &b, &a[..1], &[], &empty]);
        evict_here(&[&empty, &[], &b, &a[5..9]]);
        assert!(a.iter().enumerate().all(|(i, &v)| v == i as f32 * 0.5));
        assert!(b.iter().all(|&v| v == -1.0));
    }

    /// The evicting flush reads a buffer of twice the cores' L2 caches (at least 8 MiB); the
    /// read flush the size asked for.
    #[test]
    fn each_flush_reads_what_it_says() {
        let f = ColdFlush::evicting_or_read(4, 2 << 20, 600 << 20);
        if can_evict() {
            assert_eq!(f.method(), FlushMethod::Evict);
            assert_eq!(f.buffer_bytes(), 16 << 20);
            assert_eq!(
                ColdFlush::evicting_or_read(1, 256 << 10, 600 << 20).buffer_bytes(),
                8 << 20
            );
        } else {
            assert_eq!(f.method(), FlushMethod::Read);
            assert_eq!(f.buffer_bytes(), 600 << 20);
        }
        let r = ColdFlush::Read(FlushBuffer::new(3 << 20));
        assert_eq!(r.method(), FlushMethod::Read);
        let x = LineVec::filled(1000, 2.0);
        r.flush(&[&x], &NoKernels);
        f.flush(&[&x], &NoKernels);
        assert!(x.iter().all(|&v| v == 2.0));
    }

    /// A case of more than twice the read flush's bytes starts cold by the read flush, which
    /// costs less; one of twice those bytes or fewer by eviction. Where the run reads, every
    /// case reads.
    #[test]
    fn a_case_larger_than_twice_the_read_reads() {
        let read_bytes = 1 << 20;
        let f = ColdFlush::evicting_or_read(1, 256 << 10, read_bytes);
        let ColdFlush::Evict { private, read } = &f else {
            assert!(!can_evict(), "every x86-64 evicts");
            return;
        };
        // Twice the read: evicted; a float more: read.
        let (a, b) = (LineVec::filled(1 << 18, 1.0), LineVec::filled(1 << 18, 2.0));
        assert_eq!(bytes_of(&[&a, &b]), 2 * read_bytes);
        assert_eq!(f.method_for(2 * read_bytes), FlushMethod::Evict);
        f.flush(&[&a, &b], &NoKernels);
        assert!(private.is_made() && !read.is_made(), "evicted, not read");
        let c = LineVec::filled(1, 3.0);
        assert_eq!(f.method_for(bytes_of(&[&a, &b, &c])), FlushMethod::Read);
        f.flush(&[&a, &b, &c], &NoKernels);
        assert!(read.is_made(), "read");
        assert!(a.iter().all(|&v| v == 1.0) && b.iter().all(|&v| v == 2.0) && c[0] == 3.0);
        let r = ColdFlush::Read(FlushBuffer::new(read_bytes));
        assert_eq!(r.method_for(1), FlushMethod::Read);
    }
}
