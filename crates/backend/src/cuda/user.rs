//! The user's own CUDA kernel as one side of a spec (`cuda:` in `variants:`): compiled by NVRTC
//! for the device once per spec, its arguments bound by name (the kind's tensors as device
//! buffers, workload keys as the parameter's number type), launched on the backend's stream and
//! timed with its events, after the same L2 flush as the built-in kernels.

use super::gpu::{driver_error, Gpu};
use super::nvrtc::{self, Output};
use crate::error::{BackendError, Result};
use crate::kinds::{Scalar, Tensors, Variant, Workload};
use crate::ledger::Tiling;
use crate::spec::kernel_source::{self, ScalarType};
use crate::{UserKernel, UserSource};
use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};
use std::borrow::Cow;
use std::sync::Arc;

/// One argument of the launch.
enum Arg {
    Buffer(usize),
    I32(i32),
    U32(u32),
    I64(i64),
    U64(u64),
    F32(f32),
    F64(f64),
}

pub struct UserKernelGpu {
    gpu: Arc<Gpu>,
    func: CudaFunction,
    cfg: LaunchConfig,
    args: Vec<Arg>,
    buffers: Vec<CudaSlice<f32>>,
    /// The tensor name of each buffer.
    names: Vec<String>,
    output: usize,
    output_len: usize,
    about: String,
    ran: bool,
}

fn fail(src: &UserSource, message: String) -> BackendError {
    BackendError::Kernel(format!("{}: {message}", src.path.display()))
}

/// The module of a user's source: its CUBIN for the device, or its PTX for the driver to JIT
/// where the CUBIN does not load.
fn compile(
    gpu: &Gpu,
    file_name: &str,
    text: &str,
    options: &[String],
) -> Result<Arc<cudarc::driver::CudaModule>> {
    let cubin = nvrtc::compile_source(file_name, text, gpu.arch, Output::Cubin, options)
        .map_err(|log| BackendError::Compile { log })?;
    if let Ok(m) = gpu.ctx.load_module(cudarc::nvrtc::Ptx::from_binary(cubin)) {
        return Ok(m);
    }
    let ptx = nvrtc::compile_source(file_name, text, gpu.arch, Output::Ptx, options)
        .map_err(|log| BackendError::Compile { log })?;
    gpu.ctx
        .load_module(cudarc::nvrtc::Ptx::from_src(
            String::from_utf8_lossy(&ptx).into_owned(),
        ))
        .map_err(driver_error("loading the user's module"))
}

/// The dynamic shared memory a kernel may use without raising its limit (every CUDA GPU's).
const DEFAULT_DYNAMIC_SMEM_BYTES: u32 = 48 * 1024;

impl UserKernelGpu {
    #[expect(
        clippy::too_many_lines,
        reason = "the user's kernel made ready in order (signature read, compiled, loaded, buffers bound, geometry checked), each step's error naming the spec key at fault from the same locals"
    )]
    pub fn new(
        gpu: Arc<Gpu>,
        src: &UserSource,
        workload: &Workload,
        variant: Variant,
        inputs: &Tensors,
    ) -> Result<Self> {
        super::gpu::refuse_if_lost()?;
        let spec = &src.spec;
        let params = kernel_source::signature(&src.text, &spec.entry).map_err(|m| fail(src, m))?;
        let file_name = src
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "kernel.cu".into());
        let mut options = spec.options.clone();
        options.push(format!(
            "--include-path={}",
            src.path
                .parent()
                .map_or(".".into(), |p| p.display().to_string())
        ));
        let key =
            crate::spec::sha256_hex(format!("{file_name}\0{}\0{options:?}", src.text).as_bytes());
        let cached = gpu
            .user_modules
            .lock()
            .map_err(|_| BackendError::Kernel("the module cache is poisoned".into()))?
            .get(&key)
            .cloned();
        let module = match cached {
            Some(m) => m,
            None => {
                let m = compile(&gpu, &file_name, &src.text, &options)?;
                if let Ok(mut cache) = gpu.user_modules.lock() {
                    cache.insert(key, m.clone());
                }
                m
            }
        };
        let func = module.load_function(&spec.entry).map_err(|e| {
            fail(
                src,
                format!(
                    "no kernel `{}` in the compiled module ({e:?}): is it extern \"C\"?",
                    spec.entry
                ),
            )
        })?;
        let kind = workload.as_kind();
        let output_name = kind.output_name();
        let output_len = kind.output_len() as usize;
        let ledger = kind.ledger(variant, &Tiling::CUDA);
        let scalars = workload.scalars();
        let mut buffers: Vec<CudaSlice<f32>> = Vec::new();
        let mut names: Vec<String> = Vec::new();
        let mut args = Vec::new();
        let mut output = None;
        for (name, p) in spec.args.iter().zip(&params) {
            if p.pointer {
                let index = match names.iter().position(|n| n == name) {
                    Some(i) => i,
                    None => {
                        let data = inputs.get(name);
                        let buffer = if !data.is_empty() {
                            gpu.upload(data)?
                        } else if *name == output_name {
                            gpu.zeros(output_len as u64)?
                        } else {
                            // An intermediate of the ledger: scratch of its size.
                            let bytes = ledger
                                .movements
                                .iter()
                                .find(|m| m.tensor == *name)
                                .map_or(0, |m| m.bytes);
                            if bytes == 0 {
                                return Err(fail(
                                    src,
                                    format!(
                                        "`{name}` is no tensor of the {} ledger",
                                        variant.name()
                                    ),
                                )
                                .into());
                            }
                            gpu.zeros(bytes / 4)?
                        };
                        buffers.push(buffer);
                        names.push(name.clone());
                        buffers.len() - 1
                    }
                };
                if *name == output_name {
                    output = Some(index);
                }
                args.push(Arg::Buffer(index));
                continue;
            }
            let value = scalars
                .get(name)
                .ok_or_else(|| fail(src, format!("`{name}` is no workload key")))?;
            let (i, f) = match *value {
                Scalar::Int(i) => (i, i as f64),
                Scalar::Float(f) => (f as i64, f),
            };
            args.push(match p.scalar {
                Some(ScalarType::I32) => Arg::I32(i as i32),
                Some(ScalarType::U32) => Arg::U32(i as u32),
                Some(ScalarType::I64) => Arg::I64(i),
                Some(ScalarType::U64) => Arg::U64(i as u64),
                Some(ScalarType::F32) => Arg::F32(f as f32),
                Some(ScalarType::F64) | None => Arg::F64(f),
            });
        }
        let output = output.ok_or_else(|| {
            fail(
                src,
                format!(
                    "`args` does not name the output `{output_name}`: the kernel must write it"
                ),
            )
        })?;
        let keys = kernel_source::int_keys(workload);
        let g = kernel_source::geometry(spec, &keys).map_err(|e| fail(src, e.message))?;
        // The spec's check held the limit of every GPU; this device may allow less.
        if let Some(max) = gpu.max_shared_optin_bytes {
            if g.smem_bytes as u64 > max {
                return Err(fail(
                    src,
                    format!(
                        "smem_bytes: {} bytes, but a block of this device ({}, sm_{}) can opt into at most {max}",
                        g.smem_bytes, gpu.name, gpu.arch
                    ),
                )
                .into());
            }
        }
        // A block gets more than 48 KiB of dynamic shared memory only once its function's limit
        // is raised to what it asks (up to the device's opt-in limit, checked above).
        if g.smem_bytes > DEFAULT_DYNAMIC_SMEM_BYTES {
            let bytes = i32::try_from(g.smem_bytes)
                .map_err(|_| fail(src, format!("smem_bytes {} is too large", g.smem_bytes)))?;
            func.set_attribute(
                cudarc::driver::sys::CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                bytes,
            )
            .map_err(driver_error("raising the kernel's dynamic shared memory limit"))?;
        }
        let cfg = LaunchConfig {
            grid_dim: (g.grid[0], g.grid[1], g.grid[2]),
            block_dim: (g.block[0], g.block[1], g.block[2]),
            shared_mem_bytes: g.smem_bytes,
        };
        gpu.warm_up()?;
        Ok(UserKernelGpu {
            about: format!(
                "{} (entry {}), compiled by NVRTC for sm_{}, grid {:?}, block {:?}",
                spec.source, spec.entry, gpu.arch, cfg.grid_dim, cfg.block_dim
            ),
            gpu,
            func,
            cfg,
            args,
            buffers,
            names,
            output,
            output_len,
            ran: false,
        })
    }

    fn enqueue(&self) -> Result<()> {
        let mut b = self.gpu.stream.launch_builder(&self.func);
        for a in &self.args {
            match a {
                Arg::Buffer(i) => b.arg(&self.buffers[*i]),
                Arg::I32(v) => b.arg(v),
                Arg::U32(v) => b.arg(v),
                Arg::I64(v) => b.arg(v),
                Arg::U64(v) => b.arg(v),
                Arg::F32(v) => b.arg(v),
                Arg::F64(v) => b.arg(v),
            };
        }
        // SAFETY: the arguments follow the kernel's own signature, read from its source: a device
        // buffer for each pointer parameter (the tensor's full size) and a number of the
        // parameter's type for each scalar one. What the kernel does with them is the user's
        // code; an out-of-bounds access is reported by the driver as a launch error.
        unsafe { b.launch(self.cfg) }
            .map(|_| ())
            .map_err(driver_error("launching the user's kernel"))
    }
}

impl UserKernel for UserKernelGpu {
    fn run_timed(&mut self) -> Result<f64> {
        let gpu = self.gpu.clone();
        let t = gpu.time(|| self.enqueue())?;
        self.ran = true;
        Ok(t)
    }
    fn flush_caches(&mut self) {
        let _ = self.gpu.flush_l2();
    }
    fn output(&self) -> Result<Cow<'_, [f32]>> {
        if !self.ran {
            return Err(BackendError::NotRun {
                variant: "user kernel",
            }
            .into());
        }
        let mut host = self
            .gpu
            .stream
            .clone_dtoh(&self.buffers[self.output])
            .map_err(driver_error("copying the output to the host"))?;
        host.truncate(self.output_len);
        Ok(Cow::Owned(host))
    }
    fn poison_output(&mut self) -> Result<()> {
        let nan = vec![f32::NAN; self.buffers[self.output].len()];
        self.gpu
            .stream
            .memcpy_htod(&nan, &mut self.buffers[self.output])
            .map_err(driver_error("poisoning the output"))?;
        Ok(())
    }
    fn set_inputs(&mut self, inputs: &Tensors) -> Result<()> {
        // Copied into the buffers the kernel already has: its arguments stay the same.
        for (name, buffer) in self.names.iter().zip(&mut self.buffers) {
            let data = inputs.get(name);
            if !data.is_empty() {
                self.gpu
                    .stream
                    .memcpy_htod(data, buffer)
                    .map_err(driver_error("copying the checked run's inputs"))?;
            }
        }
        Ok(())
    }
    fn describe(&self) -> String {
        self.about.clone()
    }
}
