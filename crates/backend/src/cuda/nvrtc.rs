//! The CUDA kernel sources (embedded in the binary) and their compilation with NVRTC, loaded at
//! run time. Compiling needs no GPU: CI compiles every source to an sm_90 CUBIN and to PTX.

use std::ffi::CString;

/// Helpers prepended to every source (NVRTC has no include path here).
const COMMON: &str = include_str!("kernels/common.cuh");

/// One kernel family's source.
#[derive(Debug, Clone, Copy)]
pub struct KernelSource {
    pub name: &'static str,
    pub source: &'static str,
}

/// Every CUDA source, one per workload family.
pub const SOURCES: &[KernelSource] = &[
    KernelSource {
        name: "elementwise",
        source: include_str!("kernels/elementwise.cu"),
    },
    KernelSource {
        name: "rows",
        source: include_str!("kernels/rows.cu"),
    },
    KernelSource {
        name: "gemm",
        source: include_str!("kernels/gemm.cu"),
    },
    KernelSource {
        name: "attention",
        source: include_str!("kernels/attention.cu"),
    },
    KernelSource {
        name: "attention_bf16",
        source: include_str!("kernels/attention_bf16.cu"),
    },
    KernelSource {
        name: "launch",
        source: include_str!("kernels/launch.cu"),
    },
    KernelSource {
        name: "probe",
        source: include_str!("kernels/probe.cu"),
    },
    KernelSource {
        name: "add_rmsnorm",
        source: include_str!("kernels/add_rmsnorm.cu"),
    },
];

/// What to produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Machine code for one architecture (`sm_90`): loads only on that architecture.
    Cubin,
    /// Virtual ISA (`compute_90`): the driver JIT-compiles it for newer GPUs.
    Ptx,
}

/// True when libnvrtc can be loaded (checked before any call: a missing library would panic).
pub fn available() -> bool {
    // SAFETY: is_culib_present only tries to dlopen the library and reports success.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// NVRTC's version (`NVRTC 13.0`), or `None` where the library is absent: the compiler of the
/// CUDA backend's kernels, which a GPU's counts are made with.
pub fn version() -> Option<String> {
    if !available() {
        return None;
    }
    let (mut major, mut minor) = (0, 0);
    // SAFETY: the library is present (checked above); nvrtcVersion writes two ints through
    // the pointers, which point at live locals.
    let r = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    (r == cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS).then(|| format!("NVRTC {major}.{minor}"))
}

/// The full text NVRTC compiles for a source.
pub fn full_source(src: &KernelSource) -> String {
    format!("{COMMON}\n// ---- {}.cu ----\n{}", src.name, src.source)
}

/// Compiles `src` for compute capability `arch` (e.g. 90). Errors carry NVRTC's log.
pub fn compile(src: &KernelSource, arch: u32, output: Output) -> Result<Vec<u8>, String> {
    compile_with(src, arch, output, &[]).map(|(bytes, _log)| bytes)
}

/// What ptxas reports for one kernel of a CUBIN: the static facts that decide occupancy and
/// whether registers spill to local memory, known without a GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelResources {
    pub name: String,
    pub registers: u32,
    pub smem_bytes: u32,
    pub stack_bytes: u32,
    pub spill_store_bytes: u32,
    pub spill_load_bytes: u32,
}

/// The CUBIN of `src` for `arch` and the resources of every kernel in it (ptxas `-v`, through
/// NVRTC), from one compilation.
pub fn compile_cubin_with_resources(
    src: &KernelSource,
    arch: u32,
) -> Result<(Vec<u8>, Vec<KernelResources>), String> {
    let (cubin, log) = compile_with(src, arch, Output::Cubin, &["--ptxas-options=-v".into()])?;
    let found = parse_ptxas_log(&log);
    if found.is_empty() {
        return Err(format!(
            "{}: ptxas reported no kernel resources; its log:\n{log}",
            src.name
        ));
    }
    Ok((cubin, found))
}

/// Reads ptxas's `-v` report: for each "Compiling entry function 'k'", the stack/spill line and
/// the "Used N registers, …, M bytes smem" line that follow it.
fn parse_ptxas_log(log: &str) -> Vec<KernelResources> {
    // The number just before `unit` in `text` ("202 registers" → 202), 0 when absent.
    fn number_before(text: &str, unit: &str) -> u32 {
        text.split(',')
            .find_map(|part| {
                let part = part.trim();
                let value = part.strip_suffix(unit)?.trim();
                value.rsplit(' ').next()?.parse().ok()
            })
            .unwrap_or(0)
    }
    let mut out: Vec<KernelResources> = Vec::new();
    for line in log.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let name = rest.split('\'').next().unwrap_or("").to_string();
            out.push(KernelResources {
                name,
                registers: 0,
                smem_bytes: 0,
                stack_bytes: 0,
                spill_store_bytes: 0,
                spill_load_bytes: 0,
            });
        } else if let Some(k) = out.last_mut() {
            let text = line
                .split_once(':')
                .map_or(line, |(_, t)| t)
                .trim_start_matches(['.', ' ']);
            if line.contains("bytes stack frame") {
                k.stack_bytes = number_before(text, "bytes stack frame");
                k.spill_store_bytes = number_before(text, "bytes spill stores");
                k.spill_load_bytes = number_before(text, "bytes spill loads");
            } else if line.contains("Used ") && line.contains(" registers") {
                k.registers = number_before(text, "registers");
                k.smem_bytes = number_before(text, "bytes smem");
            }
        }
    }
    out
}

fn compile_with(
    src: &KernelSource,
    arch: u32,
    output: Output,
    extra: &[String],
) -> Result<(Vec<u8>, String), String> {
    // opledger's own kernels are written for fast math (their tolerances say so).
    let mut opts = vec!["--use_fast_math".to_string()];
    opts.extend(extra.iter().cloned());
    compile_text(src.name, &full_source(src), arch, output, &opts)
}

/// Compiles a user's kernel source as written (nothing prepended, no option of opledger's: fast
/// math only where the user's `options` ask for it), named after its file so that NVRTC's log
/// points into it (`bias_gelu.cu(12): error: …`). The CUDA toolkit's headers (`cuda_fp16.h`,
/// `cuda_bf16.h`), which NVRTC before 13.3 does not bundle, are on the include path where a
/// toolkit is found ([`cuda_include_dir`]).
pub fn compile_source(
    file_name: &str,
    text: &str,
    arch: u32,
    output: Output,
    options: &[String],
) -> Result<Vec<u8>, String> {
    let stem = file_name.strip_suffix(".cu").unwrap_or(file_name);
    let mut opts: Vec<String> = cuda_include_dir()
        .map(|d| format!("--include-path={}", d.display()))
        .into_iter()
        .collect();
    opts.extend(options.iter().cloned());
    compile_text(stem, text, arch, output, &opts).map(|(bytes, _)| bytes)
}

/// The CUDA toolkit's include folder, the first that holds `cuda_fp16.h` of: `$CUDA_HOME` and
/// `$CUDA_PATH` (their `include/`), `/usr/local/cuda/include`, `/opt/cuda/include`, and the
/// `include/` beside each folder of `LD_LIBRARY_PATH` (where a toolkit's or a wheel's
/// `lib/` is, as NVRTC's own is found).
pub fn cuda_include_dir() -> Option<std::path::PathBuf> {
    use std::path::PathBuf;
    let mut candidates: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(std::env::var_os)
        .map(|d| PathBuf::from(d).join("include"))
        .collect();
    candidates.push("/usr/local/cuda/include".into());
    candidates.push("/opt/cuda/include".into());
    if let Some(paths) = std::env::var_os("LD_LIBRARY_PATH") {
        candidates.extend(
            std::env::split_paths(&paths).filter_map(|d| d.parent().map(|p| p.join("include"))),
        );
    }
    candidates
        .into_iter()
        .find(|d| d.is_absolute() && d.join("cuda_fp16.h").is_file())
}

fn compile_text(
    name: &str,
    text: &str,
    arch: u32,
    output: Output,
    extra: &[String],
) -> Result<(Vec<u8>, String), String> {
    struct Named<'a> {
        name: &'a str,
    }
    let src = Named { name };
    if !available() {
        return Err("libnvrtc could not be loaded (install NVRTC, e.g. pip's nvidia-cuda-nvrtc, and put its lib folder on LD_LIBRARY_PATH)".into());
    }
    let text = CString::new(text).map_err(|e| format!("source {}: {e}", src.name))?;
    let name = CString::new(format!("{}.cu", src.name)).map_err(|e| e.to_string())?;
    let prog = cudarc::nvrtc::result::create_program(&text, Some(&name))
        .map_err(|e| format!("{}: create_program: {e:?}", src.name))?;
    let arch_opt = match output {
        Output::Cubin => format!("--gpu-architecture=sm_{arch}"),
        Output::Ptx => format!("--gpu-architecture=compute_{arch}"),
    };
    let mut opts = vec![arch_opt, "--std=c++17".into(), "-default-device".into()];
    opts.extend(extra.iter().cloned());
    // SAFETY: `prog` was created above and is destroyed once, at the end of this block; `text`
    // and `name` outlive it.
    let result = unsafe {
        let compiled = cudarc::nvrtc::result::compile_program(prog, &opts);
        let log = cudarc::nvrtc::result::get_program_log(prog)
            .map(|l| {
                l.iter()
                    .take_while(|&&c| c != 0)
                    // c_char is i8 on x86-64 and u8 on aarch64: the cast is needed on one of them.
                    .map(|&c| {
                        #[allow(clippy::unnecessary_cast)]
                        let b = c as u8;
                        b as char
                    })
                    .collect::<String>()
            })
            .unwrap_or_default();
        let out = match compiled {
            Err(e) => Err(format!(
                "{}.cu does not compile for sm_{arch} ({e:?}):\n{log}",
                src.name
            )),
            Ok(()) => match output {
                Output::Ptx => cudarc::nvrtc::result::get_ptx(prog)
                    .map(|p| {
                        p.iter()
                            .take_while(|&&c| c != 0)
                            .map(|&c| {
                                #[allow(clippy::unnecessary_cast)]
                                let b = c as u8; // c_char: i8 or u8 by platform
                                b
                            })
                            .collect()
                    })
                    .map_err(|e| format!("{}: get_ptx: {e:?}", src.name)),
                Output::Cubin => {
                    let mut size = 0usize;
                    let sys = &cudarc::nvrtc::sys::nvrtcGetCUBINSize(prog, &mut size);
                    if *sys != cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS {
                        Err(format!("{}: nvrtcGetCUBINSize: {sys:?}", src.name))
                    } else {
                        let mut buf = vec![0u8; size];
                        let r = cudarc::nvrtc::sys::nvrtcGetCUBIN(
                            prog,
                            buf.as_mut_ptr() as *mut std::ffi::c_char,
                        );
                        if r == cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS {
                            Ok(buf)
                        } else {
                            Err(format!("{}: nvrtcGetCUBIN: {r:?}", src.name))
                        }
                    }
                }
            },
        };
        let _ = cudarc::nvrtc::result::destroy_program(prog);
        out.map(|bytes| (bytes, log))
    };
    result
}

/// `opledger cuda-compile`: every kernel source to a CUBIN for sm_<arch> and to PTX, with what
/// ptxas says of each kernel; true when every source compiled.
pub fn compile_all(arch: u32, out: Option<&std::path::Path>) -> crate::error::Result<bool> {
    use self as nvrtc;
    if !nvrtc::available() {
        return Err(crate::error::Error::BackendUnavailable(
            "libnvrtc could not be loaded: install NVRTC (e.g. `pip install nvidia-cuda-nvrtc==13.0.88`) and put its lib folder on LD_LIBRARY_PATH".into(),
        ));
    }
    let mut failed = 0;
    // What ptxas says of each kernel (from the CUBIN compilation): registers (occupancy),
    // shared memory, and any spill to local memory — the static half of a kernel's performance,
    // known without a GPU.
    let mut resources = Vec::new();
    for src in nvrtc::SOURCES {
        for (kind, ext) in [(nvrtc::Output::Cubin, "cubin"), (nvrtc::Output::Ptx, "ptx")] {
            let compiled = match kind {
                nvrtc::Output::Cubin => {
                    nvrtc::compile_cubin_with_resources(src, arch).map(|(bytes, kernels)| {
                        resources.extend(kernels);
                        bytes
                    })
                }
                nvrtc::Output::Ptx => nvrtc::compile(src, arch, kind),
            };
            match compiled {
                Ok(bytes) => {
                    println!(
                        "ok    {:<12} {ext:<5} sm_{arch} {:>9} bytes",
                        src.name,
                        bytes.len()
                    );
                    if let Some(dir) = out {
                        crate::files::write_atomic(
                            &dir.join(format!("{}.sm_{arch}.{ext}", src.name)),
                            &bytes,
                        )?;
                    }
                }
                Err(log) => {
                    println!("FAIL  {:<12} {ext:<5} sm_{arch}\n{log}", src.name);
                    failed += 1;
                }
            }
        }
    }
    println!(
        "\n{:<24} {:>5} {:>10} {:>7} {:>13}",
        format!("kernel (sm_{arch})"),
        "regs",
        "smem B",
        "stack B",
        "spills st/ld"
    );
    for k in resources {
        println!(
            "{:<24} {:>5} {:>10} {:>7} {:>13}",
            k.name,
            k.registers,
            k.smem_bytes,
            k.stack_bytes,
            format!("{}/{}", k.spill_store_bytes, k.spill_load_bytes)
        );
    }
    Ok(failed == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ptxas_resource_reports() {
        // As NVRTC 13.0 prints them with --ptxas-options=-v.
        let log = "ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'flash_attn_bf16' for 'sm_90'
ptxas info    : Function properties for flash_attn_bf16
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 202 registers, used 1 barriers, 34816 bytes smem
ptxas info    : Compile time = 126.567 ms
ptxas info    : Compiling entry function 'k2' for 'sm_90'
ptxas info    : Function properties for k2
ptxas         .     24 bytes stack frame, 16 bytes spill stores, 8 bytes spill loads
ptxas info    : Used 255 registers, used 0 barriers, 368 bytes cmem[0]
";
        let r = parse_ptxas_log(log);
        assert_eq!(r.len(), 2);
        assert_eq!(
            r[0],
            KernelResources {
                name: "flash_attn_bf16".into(),
                registers: 202,
                smem_bytes: 34816,
                stack_bytes: 0,
                spill_store_bytes: 0,
                spill_load_bytes: 0,
            }
        );
        assert_eq!(
            (r[1].registers, r[1].smem_bytes, r[1].stack_bytes),
            (255, 0, 24)
        );
        assert_eq!((r[1].spill_store_bytes, r[1].spill_load_bytes), (16, 8));
        assert!(parse_ptxas_log("nothing here").is_empty());
    }
}
