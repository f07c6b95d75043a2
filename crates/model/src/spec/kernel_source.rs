//! A `cuda:` implementation checked against its source file without a GPU: the entry is an
//! `extern "C" __global__` function of the file, its parameters match `args` in number and kind
//! (pointers for tensors, numbers for workload keys whose values fit the parameter's type), every
//! name is a tensor of the ledger or a key of the workload, and the launch geometry evaluates to
//! sizes every GPU can launch (threads per block, block and grid dimensions, shared memory).
//! Errors name the key and the element of the `cuda:` mapping at fault, for the spec to locate.

use super::{CudaSource, Spec};
use crate::expr::Expr;
use crate::kinds::{Scalar, Workload};
use crate::ledger::Tiling;
use std::collections::BTreeMap;

/// One parameter of a kernel's signature.
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    /// The declaration as written (`const float* __restrict__ x`).
    pub text: String,
    pub pointer: bool,
    /// How a number is passed to it.
    pub scalar: Option<ScalarType>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ScalarType {
    I32,
    U32,
    I64,
    U64,
    F32,
    F64,
}

/// Source text without comments (so that a commented-out kernel is not found).
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
            i += 2;
            while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                i += 1;
            }
            i += 2;
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

/// The parameters of `__global__` function `entry` in `text`.
pub fn signature(text: &str, entry: &str) -> Result<Vec<Param>, String> {
    let text = strip_comments(text);
    let mut found = Vec::new();
    let mut rest = text.as_str();
    while let Some(i) = rest.find("__global__") {
        rest = &rest[i + "__global__".len()..];
        let Some(open) = rest.find('(') else { break };
        let head = &rest[..open];
        let name = head
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .rfind(|s| !s.is_empty())
            .unwrap_or("");
        found.push(name.to_string());
        if name != entry {
            continue;
        }
        let mut depth = 0usize;
        let mut end = None;
        for (k, c) in rest[open..].char_indices() {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(open + k);
                        break;
                    }
                }
                _ => {}
            }
        }
        let end = end.ok_or_else(|| format!("the parameter list of `{entry}` does not close"))?;
        let list = rest[open + 1..end].trim();
        if list.is_empty() || list == "void" {
            return Ok(Vec::new());
        }
        return list.split(',').map(param).collect();
    }
    Err(if found.is_empty() {
        format!("no `__global__` function `{entry}` in the file (it has no __global__ function)")
    } else {
        format!(
            "no `__global__` function `{entry}` in the file (it has: {})",
            found.join(", ")
        )
    })
}

fn param(decl: &str) -> Result<Param, String> {
    let text = decl.split_whitespace().collect::<Vec<_>>().join(" ");
    let pointer = text.contains('*');
    // The type: every word but the last (the name), without qualifiers.
    let words: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || c == '*' || c == '&')
        .filter(|w| !w.is_empty())
        .filter(|w| !matches!(*w, "const" | "__restrict__" | "volatile" | "restrict"))
        .collect();
    let ty = words[..words.len().saturating_sub(1)].join(" ");
    let scalar = if pointer {
        None
    } else {
        Some(match ty.as_str() {
            "int" | "int32_t" | "signed int" => ScalarType::I32,
            "unsigned" | "unsigned int" | "uint32_t" => ScalarType::U32,
            "long long" | "long long int" | "long" | "int64_t" | "ptrdiff_t" => ScalarType::I64,
            "unsigned long long" | "unsigned long" | "uint64_t" | "size_t" => ScalarType::U64,
            "float" => ScalarType::F32,
            "double" => ScalarType::F64,
            _ => {
                return Err(format!(
                    "parameter `{text}`: opledger passes tensors as pointers and workload keys as int, unsigned, long long, size_t, float or double"
                ))
            }
        })
    };
    Ok(Param {
        text,
        pointer,
        scalar,
    })
}

/// The integer keys of a workload, for launch geometry.
pub fn int_keys(w: &Workload) -> BTreeMap<String, i64> {
    w.scalars()
        .into_iter()
        .filter_map(|(k, v)| match v {
            Scalar::Int(i) => Some((k, i)),
            Scalar::Float(_) => None,
        })
        .collect()
}

/// Evaluates a launch dimension (at least `min`).
pub fn dimension(e: &str, keys: &BTreeMap<String, i64>, min: i64) -> Result<u64, String> {
    let v = Expr::parse(e).and_then(|x| x.eval(keys))?;
    if v < min || v > u32::MAX as i64 {
        return Err(format!("`{e}` is {v}: expected {min} to {}", u32::MAX));
    }
    Ok(v as u64)
}

/// Threads per block on every CUDA architecture.
pub const MAX_THREADS_PER_BLOCK: u64 = 1024;
/// Largest block dimensions (x, y, z) on every CUDA architecture.
pub const MAX_BLOCK_DIM: [u64; 3] = [1024, 1024, 64];
/// Largest grid dimensions (x, y, z) on every architecture opledger compiles for (sm_50 on).
pub const MAX_GRID_DIM: [u64; 3] = [(1 << 31) - 1, 65535, 65535];
/// The most dynamic shared memory a block can opt into on any supported architecture
/// (227 KiB on sm_90 and sm_100; sm_80 allows 163 KiB, sm_86/89/120 99 KiB): more cannot run
/// on any GPU. Whether a device holds less is known at launch.
pub const MAX_SHARED_BYTES: u64 = 227 * 1024;

/// Where in a `cuda:` mapping a problem is: the key (`grid`, `args`, …; empty for the mapping
/// itself) and the element of its list, as written, when one is at fault.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceError {
    pub key: &'static str,
    pub element: Option<String>,
    pub message: String,
}

impl SourceError {
    fn at(key: &'static str, element: Option<&str>, message: String) -> Self {
        SourceError {
            key,
            element: element.map(str::to_string),
            message,
        }
    }
}

/// A launch geometry, evaluated and within what every GPU can launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub smem_bytes: u32,
}

/// Evaluates and checks the launch geometry of `src` with the workload's integer keys.
pub fn geometry(src: &CudaSource, keys: &BTreeMap<String, i64>) -> Result<Geometry, SourceError> {
    let mut out = Geometry {
        grid: [1; 3],
        block: [1; 3],
        smem_bytes: 0,
    };
    let axes = ["x", "y", "z"];
    for (key, dims, limits) in [
        ("block", &src.block, MAX_BLOCK_DIM),
        ("grid", &src.grid, MAX_GRID_DIM),
    ] {
        for (k, d) in dims.iter().enumerate() {
            let v = dimension(d, keys, 1)
                .map_err(|e| SourceError::at(key, Some(d), format!("{key}: {e}")))?;
            if v > limits[k] {
                return Err(SourceError::at(
                    key,
                    Some(d),
                    format!(
                        "{key}: `{d}` is {v}: a {key}'s {} dimension is at most {} on every GPU",
                        axes[k], limits[k]
                    ),
                ));
            }
            let slot = if key == "block" {
                &mut out.block
            } else {
                &mut out.grid
            };
            slot[k] = v as u32;
        }
    }
    let threads: u64 = out.block.iter().map(|&b| b as u64).product();
    if threads > MAX_THREADS_PER_BLOCK {
        return Err(SourceError::at(
            "block",
            None,
            format!(
                "block: {:?} is {threads} threads: a block holds at most {MAX_THREADS_PER_BLOCK} threads on every GPU",
                &out.block[..src.block.len()]
            ),
        ));
    }
    let smem = dimension(&src.smem_bytes, keys, 0).map_err(|e| {
        SourceError::at(
            "smem_bytes",
            Some(&src.smem_bytes),
            format!("smem_bytes: {e}"),
        )
    })?;
    if smem > MAX_SHARED_BYTES {
        return Err(SourceError::at(
            "smem_bytes",
            Some(&src.smem_bytes),
            format!(
                "smem_bytes: `{}` is {smem} bytes: a block can opt into at most {MAX_SHARED_BYTES} bytes (227 KiB, sm_90) of shared memory on any supported GPU",
                src.smem_bytes
            ),
        ));
    }
    out.smem_bytes = smem as u32;
    Ok(out)
}

/// Whether workload value `v` fits a parameter of type `t` without changing: a fraction never
/// goes into an integer, a negative number never into an unsigned one, and an integer only
/// within the type's range.
fn fits(v: Scalar, t: ScalarType) -> Result<(), String> {
    let range = |i: i64, lo: i64, hi: i64, ty: &str| {
        if i < lo || i > hi {
            Err(format!("{i} does not fit {ty} ({lo} to {hi})"))
        } else {
            Ok(())
        }
    };
    match (v, t) {
        (Scalar::Float(f), ScalarType::I32 | ScalarType::U32 | ScalarType::I64 | ScalarType::U64) => Err(format!(
            "{f} is a fraction but the parameter is an integer (it would be truncated): declare it float or double"
        )),
        (Scalar::Int(i), ScalarType::I32) => range(i, i32::MIN as i64, i32::MAX as i64, "int"),
        (Scalar::Int(i), ScalarType::U32) => range(i, 0, u32::MAX as i64, "unsigned int"),
        (Scalar::Int(i), ScalarType::U64) => range(i, 0, i64::MAX, "an unsigned 64-bit integer"),
        (Scalar::Int(i), ScalarType::F32) if i.unsigned_abs() > 1 << 24 => Err(format!(
            "{i} is not exact as a float (integers above 2^24 round): declare it int, long long or double"
        )),
        _ => Ok(()),
    }
}

/// Checks a `cuda:` implementation of `spec`'s side `side` against its source `text`; an error
/// says which key (and element) of the `cuda:` mapping is at fault.
pub fn check(spec: &Spec, side: &str, src: &CudaSource, text: &str) -> Result<(), SourceError> {
    let params =
        signature(text, &src.entry).map_err(|m| SourceError::at("entry", Some(&src.entry), m))?;
    if params.len() != src.args.len() {
        return Err(SourceError::at(
            "args",
            None,
            format!(
                "`{}` takes {} parameters and `args` names {}",
                src.entry,
                params.len(),
                src.args.len()
            ),
        ));
    }
    let variant = if side == "before" {
        spec.variants.before
    } else {
        spec.variants.after
    };
    let ledger = spec.workload.as_kind().ledger(variant, &Tiling::CUDA);
    let mut tensors: Vec<String> = ledger.movements.iter().map(|m| m.tensor.clone()).collect();
    let output = spec.workload.as_kind().output_name();
    if !tensors.contains(&output) {
        tensors.push(output);
    }
    let scalars = spec.workload.scalars();
    for (name, p) in src.args.iter().zip(&params) {
        let at = |m: String| SourceError::at("args", Some(name), m);
        if tensors.contains(name) {
            if !p.pointer {
                return Err(at(format!(
                    "`{name}` is a tensor but the parameter `{}` is no pointer",
                    p.text
                )));
            }
        } else if let Some(&value) = scalars.get(name) {
            if p.pointer {
                return Err(at(format!(
                    "`{name}` is a workload key but the parameter `{}` is a pointer",
                    p.text
                )));
            }
            if let Some(t) = p.scalar {
                fits(value, t).map_err(|m| at(format!("`{name}` into `{}`: {m}", p.text)))?;
            }
        } else {
            return Err(at(format!(
                "`{name}` in args is no tensor of the {} ledger ({}) and no workload key ({})",
                variant.name(),
                tensors.join(", "),
                scalars.keys().cloned().collect::<Vec<_>>().join(", ")
            )));
        }
    }
    geometry(src, &int_keys(&spec.workload))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = r#"
// __global__ void commented_out(float* y) {}
extern "C" __global__ void bias_gelu(float* __restrict__ y, const float* x,
                                     const float* bias, long long n, int cols, float s) {}
/* __global__ void hidden() {} */
extern "C" __global__ void other(void) {}
"#;

    #[test]
    fn signatures_are_read_with_their_kinds() {
        let p = signature(SRC, "bias_gelu").unwrap();
        assert_eq!(p.len(), 6);
        assert!(p[0].pointer && p[1].pointer && p[2].pointer);
        assert_eq!(
            p[3..].iter().map(|p| p.scalar).collect::<Vec<_>>(),
            [
                Some(ScalarType::I64),
                Some(ScalarType::I32),
                Some(ScalarType::F32)
            ]
        );
        assert!(signature(SRC, "other").unwrap().is_empty());
        let e = signature(SRC, "commented_out").unwrap_err();
        assert!(e.contains("it has: bias_gelu, other"), "{e}");
        assert!(signature("__global__ void k(char c) {}", "k")
            .unwrap_err()
            .contains("opledger passes tensors as pointers"));
    }
}
