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

/// The full text NVRTC compiles for a source.
pub fn full_source(src: &KernelSource) -> String {
    format!("{COMMON}\n// ---- {}.cu ----\n{}", src.name, src.source)
}

/// Compiles `src` for compute capability `arch` (e.g. 90). Errors carry NVRTC's log.
pub fn compile(src: &KernelSource, arch: u32, output: Output) -> Result<Vec<u8>, String> {
    if !available() {
        return Err("libnvrtc could not be loaded (install NVRTC, e.g. pip's nvidia-cuda-nvrtc, and put its lib folder on LD_LIBRARY_PATH)".into());
    }
    let text = CString::new(full_source(src)).map_err(|e| format!("source {}: {e}", src.name))?;
    let name = CString::new(format!("{}.cu", src.name)).map_err(|e| e.to_string())?;
    let prog = cudarc::nvrtc::result::create_program(&text, Some(&name))
        .map_err(|e| format!("{}: create_program: {e:?}", src.name))?;
    let arch_opt = match output {
        Output::Cubin => format!("--gpu-architecture=sm_{arch}"),
        Output::Ptx => format!("--gpu-architecture=compute_{arch}"),
    };
    let opts = [
        arch_opt,
        "--std=c++17".into(),
        "-default-device".into(),
        "--use_fast_math".into(),
    ];
    // SAFETY: `prog` was created above and is destroyed once, at the end of this block; `text`
    // and `name` outlive it.
    let result = unsafe {
        let compiled = cudarc::nvrtc::result::compile_program(prog, &opts);
        let out = match compiled {
            Err(e) => {
                let log = cudarc::nvrtc::result::get_program_log(prog)
                    .map(|l| {
                        l.iter()
                            .take_while(|&&c| c != 0)
                            .map(|&c| c as u8 as char)
                            .collect::<String>()
                    })
                    .unwrap_or_default();
                Err(format!(
                    "{}.cu does not compile for sm_{arch} ({e:?}):\n{log}",
                    src.name
                ))
            }
            Ok(()) => match output {
                Output::Ptx => cudarc::nvrtc::result::get_ptx(prog)
                    .map(|p| {
                        p.iter()
                            .take_while(|&&c| c != 0)
                            .map(|&c| c as u8)
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
        out
    };
    result
}
