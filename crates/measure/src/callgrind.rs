//! Valgrind's Callgrind as the counts engine: the client requests a counted process makes
//! around the call it wants counted, and the command line that runs such a process under the
//! simulator on a fixed cache model.
//!
//! Client requests are a special instruction sequence that does nothing on a real CPU and that
//! Valgrind's JIT recognises. Starting and stopping instrumentation is global (every thread's
//! work counts while it is on, so a kernel's thread pool is counted), and Callgrind empties its
//! simulated caches when instrumentation starts: each counted call starts cold, as the ledger
//! assumes. Facts about Debian 12's Valgrind 3.19 that this relies on are in `docs/counts.md`.

use super::counts::CacheModel;
use std::path::Path;

/// Callgrind's client requests (`valgrind/callgrind.h`): `VG_USERREQ_TOOL_BASE('C','T')` + k.
const CALLGRIND_BASE: usize = ((b'C' as usize) << 24) | ((b'T' as usize) << 16);
const DUMP_STATS: usize = CALLGRIND_BASE;
const START_INSTRUMENTATION: usize = CALLGRIND_BASE + 4;
const STOP_INSTRUMENTATION: usize = CALLGRIND_BASE + 5;
/// `VG_USERREQ__RUNNING_ON_VALGRIND` (`valgrind/valgrind.h`).
const RUNNING_ON_VALGRIND: usize = 0x1001;

/// One client request with one argument; `default` is what a real CPU leaves (no Valgrind).
#[cfg(target_arch = "x86_64")]
#[inline(never)]
fn request(default: usize, code: usize, arg: usize) -> usize {
    let args: [usize; 6] = [code, arg, 0, 0, 0, 0];
    let result: usize;
    // SAFETY: Valgrind's special instruction sequence for amd64: four rotations of rdi by 3,
    // 13, 61 and 51 bits (128 in all: rdi ends as it began) and an exchange of rbx with itself.
    // On a CPU it changes nothing but the flags, and rdx keeps `default`; under Valgrind it is
    // the request whose six words rax points to (`args`, alive across the sequence), answered
    // in rdx. rdi is declared clobbered though it is restored; memory is not declared
    // untouched, since the simulator may read `args`.
    unsafe {
        std::arch::asm!(
            "rol rdi, 3",
            "rol rdi, 13",
            "rol rdi, 61",
            "rol rdi, 51",
            "xchg rbx, rbx",
            in("rax") args.as_ptr(),
            inout("rdx") default => result,
            inout("rdi") 0usize => _,
            options(nostack),
        );
    }
    result
}

/// Elsewhere there is no counts engine: every request answers its default.
#[cfg(not(target_arch = "x86_64"))]
fn request(default: usize, _code: usize, _arg: usize) -> usize {
    default
}

/// Whether this process runs under Valgrind.
pub fn running_on_valgrind() -> bool {
    request(0, RUNNING_ON_VALGRIND, 0) != 0
}

/// Starts counting (and empties the simulated caches).
pub fn start() {
    request(0, START_INSTRUMENTATION, 0);
}

/// Stops counting.
pub fn stop() {
    request(0, STOP_INSTRUMENTATION, 0);
}

/// Writes the counts since the last dump to a file of their own and starts a new interval.
pub fn dump() {
    request(0, DUMP_STATS, 0);
}

/// The name of the Valgrind program.
pub const VALGRIND: &str = "valgrind";

/// The Valgrind program on PATH, as an absolute path: found once, it is the one whose version
/// the engine records and the one every counted process is started with (a counted process's
/// own PATH is another one).
pub fn find() -> Result<std::path::PathBuf, String> {
    crate::files::program_on_path(VALGRIND).ok_or_else(|| {
        "valgrind is not on PATH (an absolute folder of it): install it (Debian: apt-get install valgrind)".into()
    })
}

/// The version (`valgrind-3.19.0`) of the Valgrind at `program`, or why it cannot be run.
pub fn version_of(program: &Path) -> Result<String, String> {
    let o = std::process::Command::new(program)
        .arg("--version")
        .output()
        .map_err(|e| {
            format!("valgrind cannot be run ({e}): install it (Debian: apt-get install valgrind)")
        })?;
    if !o.status.success() {
        return Err(format!("valgrind --version failed: {}", o.status));
    }
    Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
}

/// The Valgrind on PATH and its version, or why there is none to count with.
pub fn found() -> Result<(std::path::PathBuf, String), String> {
    let program = find()?;
    let version = version_of(&program)?;
    Ok((program, version))
}

/// The arguments of a Callgrind run on `model` whose output files are `out` (`out.1`, `out.2`,
/// … one per dump): counting only between the client requests, with the cache and write-back
/// simulation, no per-instruction detail.
pub fn args(model: &CacheModel, out: &Path) -> Vec<String> {
    vec![
        // What counts is this command line alone: `~/.valgrindrc`, `$VALGRIND_OPTS` and a
        // `.valgrindrc` in the counted process's folder (a spec's) are not read.
        "--command-line-only=yes".into(),
        // No gdbserver: it makes three FIFOs in /tmp for every counted process, and a process
        // killed (a timeout, Ctrl-C) leaves them there. Counts are the same either way.
        "--vgdb=no".into(),
        "--tool=callgrind".into(),
        "--instr-atstart=no".into(),
        "--cache-sim=yes".into(),
        "--simulate-wb=yes".into(),
        format!("--I1={}", model.i1.arg()),
        format!("--D1={}", model.d1.arg()),
        format!("--LL={}", model.ll.arg()),
        "--dump-instr=no".into(),
        "--dump-line=no".into(),
        "--compress-strings=no".into(),
        "--compress-pos=no".into(),
        format!("--callgrind-out-file={}", out.display()),
        "--quiet".into(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outside_valgrind_requests_do_nothing() {
        assert!(!running_on_valgrind());
        start();
        dump();
        stop();
    }
}
