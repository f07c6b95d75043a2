//! Workload kinds: the raw `workload:` mapping as read, and the validated workload of each kind
//! with the variants it compares.

use super::{find_key, Dim, ElemOp, Finite, MAX_TENSOR_ELEMENTS};
use crate::error::Position;
use serde::{Deserialize, Serialize};

type Invalid = (Option<Position>, String);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WorkloadKind {
    Elementwise,
    Rmsnorm,
    Layernorm,
    Softmax,
    Gemm,
    Attention,
    LaunchChain,
    Probe,
}

impl WorkloadKind {
    pub fn name(self) -> &'static str {
        match self {
            WorkloadKind::Elementwise => "elementwise",
            WorkloadKind::Rmsnorm => "rmsnorm",
            WorkloadKind::Layernorm => "layernorm",
            WorkloadKind::Softmax => "softmax",
            WorkloadKind::Gemm => "gemm",
            WorkloadKind::Attention => "attention",
            WorkloadKind::LaunchChain => "launch_chain",
            WorkloadKind::Probe => "probe",
        }
    }
    pub const ALL: [WorkloadKind; 8] = [
        WorkloadKind::Elementwise,
        WorkloadKind::Rmsnorm,
        WorkloadKind::Layernorm,
        WorkloadKind::Softmax,
        WorkloadKind::Gemm,
        WorkloadKind::Attention,
        WorkloadKind::LaunchChain,
        WorkloadKind::Probe,
    ];
    /// Keys of `workload:` this kind takes (besides `kind`), required ones first.
    pub fn keys(self) -> (&'static [&'static str], &'static [&'static str]) {
        match self {
            WorkloadKind::Elementwise => (&["ops", "rows", "cols"], &["dtype", "scale"]),
            WorkloadKind::Rmsnorm | WorkloadKind::Layernorm => {
                (&["rows", "cols"], &["dtype", "eps"])
            }
            WorkloadKind::Softmax => (&["rows", "cols"], &["dtype"]),
            WorkloadKind::Gemm => (&["m", "n", "k"], &["dtype"]),
            WorkloadKind::Attention => (
                &["batch", "heads", "seq_len", "head_dim"],
                &["causal", "dtype"],
            ),
            WorkloadKind::LaunchChain => (&["n_ops", "elements"], &["dtype"]),
            WorkloadKind::Probe => (&["elements"], &["dtype"]),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DType {
    F32,
    /// bfloat16 storage with f32 accumulation, for attention on tensor cores (CUDA backend).
    Bf16,
}

impl DType {
    pub fn bytes(self) -> u64 {
        match self {
            DType::F32 => 4,
            DType::Bf16 => 2,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::Bf16 => "bf16",
        }
    }
}

/// The `workload:` mapping as written; which keys apply depends on `kind`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with `kind` and the keys of that kind"
)]
pub struct RawWorkload {
    pub kind: Option<WorkloadKind>,
    pub ops: Option<Vec<ElemOp>>,
    pub rows: Option<Dim>,
    pub cols: Option<Dim>,
    pub dtype: Option<DType>,
    /// The factor of `scale` ops (default 0.5).
    pub scale: Option<Finite>,
    /// Epsilon of the norms (default 1e-5).
    pub eps: Option<Finite>,
    pub m: Option<Dim>,
    pub n: Option<Dim>,
    pub k: Option<Dim>,
    pub batch: Option<Dim>,
    pub heads: Option<Dim>,
    pub seq_len: Option<Dim>,
    pub head_dim: Option<Dim>,
    pub causal: Option<bool>,
    pub n_ops: Option<Dim>,
    pub elements: Option<Dim>,
}

/// A validated elementwise chain: `y = op_n(...op_1(x))`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Elementwise {
    pub ops: Vec<ElemOp>,
    pub rows: u64,
    pub cols: u64,
    pub dtype: DType,
    pub scale: f64,
}

impl Elementwise {
    pub fn elements(&self) -> u64 {
        self.rows * self.cols
    }
}

/// A row-wise operator (RMSNorm, LayerNorm, softmax) over `rows` rows of `cols` values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RowOp {
    pub rows: u64,
    pub cols: u64,
    pub dtype: DType,
    /// Epsilon of the norms (unused by softmax).
    pub eps: f64,
}

impl RowOp {
    pub fn elements(&self) -> u64 {
        self.rows * self.cols
    }
}

/// C[m×n] = A[m×k] · B[k×n].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Gemm {
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub dtype: DType,
}

/// Scaled dot-product attention forward, O = softmax(QKᵀ/√d)·V per (batch, head).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Attention {
    pub batch: u64,
    pub heads: u64,
    pub seq_len: u64,
    pub head_dim: u64,
    pub causal: bool,
    pub dtype: DType,
}

impl Attention {
    pub fn heads_total(&self) -> u64 {
        self.batch * self.heads
    }
}

/// A decode-like chain of `n_ops` small elementwise kernels on a tensor of `elements` values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LaunchChain {
    pub n_ops: u64,
    pub elements: u64,
    pub dtype: DType,
}

/// The machine's ceilings as a spec: copy, triad and FMA probes over arrays of `elements`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProbeWorkload {
    pub elements: u64,
    pub dtype: DType,
}

/// A validated workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Workload {
    Elementwise(Elementwise),
    Rmsnorm(RowOp),
    Layernorm(RowOp),
    Softmax(RowOp),
    Gemm(Gemm),
    Attention(Attention),
    LaunchChain(LaunchChain),
    Probe(ProbeWorkload),
}

/// Variant pairs of each kind.
const UNFUSED_FUSED: &[super::Variant] = &[super::Variant::Unfused, super::Variant::Fused];

impl Workload {
    pub fn kind(&self) -> WorkloadKind {
        match self {
            Workload::Elementwise(_) => WorkloadKind::Elementwise,
            Workload::Rmsnorm(_) => WorkloadKind::Rmsnorm,
            Workload::Layernorm(_) => WorkloadKind::Layernorm,
            Workload::Softmax(_) => WorkloadKind::Softmax,
            Workload::Gemm(_) => WorkloadKind::Gemm,
            Workload::Attention(_) => WorkloadKind::Attention,
            Workload::LaunchChain(_) => WorkloadKind::LaunchChain,
            Workload::Probe(_) => WorkloadKind::Probe,
        }
    }

    /// The element type of the workload's tensors.
    pub fn dtype(&self) -> DType {
        match self {
            Workload::Elementwise(e) => e.dtype,
            Workload::Rmsnorm(r) | Workload::Layernorm(r) | Workload::Softmax(r) => r.dtype,
            Workload::Gemm(g) => g.dtype,
            Workload::Attention(a) => a.dtype,
            Workload::LaunchChain(l) => l.dtype,
            Workload::Probe(p) => p.dtype,
        }
    }

    /// The variants this workload kind can run.
    /// How many rounded terms one output element sums: the length of its reduction (1 for
    /// elementwise chains). Rounding error grows with it, so the default tolerance does too.
    pub fn reduction_len(&self) -> u64 {
        match self {
            Workload::Elementwise(e) => e.ops.len() as u64,
            Workload::Rmsnorm(r) | Workload::Layernorm(r) | Workload::Softmax(r) => r.cols,
            Workload::Gemm(g) => g.k,
            Workload::Attention(a) => a.seq_len.max(a.head_dim),
            Workload::LaunchChain(l) => l.n_ops,
            // The FMA probe chains 256 dependent FMAs per element.
            Workload::Probe(_) => 256,
        }
    }

    /// The correctness tolerance a spec gets when it names none: rounding of the dtype grown
    /// with the square root of the reduction length (errors of independent roundings add like a
    /// random walk), with floors that cover transcendental approximations (GELU, exp).
    /// f32: rtol = atol = max(1e-5, 16·2⁻²³·√K); bf16 (f32 accumulation, bf16 inputs and
    /// P): rtol 2e-2, atol = max(5e-3, 2⁻⁸·√K/64).
    pub fn default_tolerance(&self) -> super::Tolerance {
        let k = (self.reduction_len().max(1) as f64).sqrt();
        let (rtol, atol) = match self.dtype() {
            DType::F32 => {
                let t = (16.0 * f32::EPSILON as f64 * k).max(1e-5);
                (t, t)
            }
            DType::Bf16 => (2e-2, (k / 64.0 / 256.0).max(5e-3)),
        };
        super::Tolerance {
            rtol: super::NonNeg(rtol),
            atol: super::NonNeg(atol),
        }
    }

    pub fn variants(&self) -> &'static [super::Variant] {
        use super::Variant::*;
        match self {
            Workload::Elementwise(_)
            | Workload::Rmsnorm(_)
            | Workload::Layernorm(_)
            | Workload::Softmax(_) => UNFUSED_FUSED,
            Workload::Gemm(_) => &[Naive, Tiled],
            Workload::Attention(_) => &[Standard, Flash],
            Workload::LaunchChain(_) => &[Eager, Graph],
            Workload::Probe(_) => &[Copy, Triad, Fma],
        }
    }

    /// A one-line description for tables and logs.
    pub fn describe(&self) -> String {
        match self {
            Workload::Elementwise(e) => format!(
                "elementwise [{}] {}x{} {}",
                e.ops
                    .iter()
                    .map(|o| o.name())
                    .collect::<Vec<_>>()
                    .join(" -> "),
                e.rows,
                e.cols,
                e.dtype.name()
            ),
            Workload::Rmsnorm(r) | Workload::Layernorm(r) | Workload::Softmax(r) => {
                format!(
                    "{} {}x{} {}",
                    self.kind().name(),
                    r.rows,
                    r.cols,
                    r.dtype.name()
                )
            }
            Workload::Gemm(g) => format!("gemm {}x{}x{} {}", g.m, g.n, g.k, g.dtype.name()),
            Workload::Attention(a) => format!(
                "attention b={} h={} N={} d={}{} {}",
                a.batch,
                a.heads,
                a.seq_len,
                a.head_dim,
                if a.causal { " causal" } else { "" },
                a.dtype.name()
            ),
            Workload::LaunchChain(l) => {
                format!(
                    "launch_chain {} ops on {} elements {}",
                    l.n_ops,
                    l.elements,
                    l.dtype.name()
                )
            }
            Workload::Probe(p) => format!("probe {} elements {}", p.elements, p.dtype.name()),
        }
    }
}

impl RawWorkload {
    /// Parameters a sweep may vary.
    pub const SWEEPABLE: [&'static str; 11] = [
        "rows", "cols", "m", "n", "k", "batch", "heads", "seq_len", "head_dim", "n_ops", "elements",
    ];

    /// Sets a sweepable parameter; false for any other key.
    pub fn set(&mut self, key: &str, v: u64) -> bool {
        let d = Some(Dim(v));
        match key {
            "rows" => self.rows = d,
            "cols" => self.cols = d,
            "m" => self.m = d,
            "n" => self.n = d,
            "k" => self.k = d,
            "batch" => self.batch = d,
            "heads" => self.heads = d,
            "seq_len" => self.seq_len = d,
            "head_dim" => self.head_dim = d,
            "n_ops" => self.n_ops = d,
            "elements" => self.elements = d,
            _ => return false,
        }
        true
    }

    fn set_keys(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        let mut add = |name, set: bool| {
            if set {
                v.push(name)
            }
        };
        add("ops", self.ops.is_some());
        add("rows", self.rows.is_some());
        add("cols", self.cols.is_some());
        add("dtype", self.dtype.is_some());
        add("scale", self.scale.is_some());
        add("eps", self.eps.is_some());
        add("m", self.m.is_some());
        add("n", self.n.is_some());
        add("k", self.k.is_some());
        add("batch", self.batch.is_some());
        add("heads", self.heads.is_some());
        add("seq_len", self.seq_len.is_some());
        add("head_dim", self.head_dim.is_some());
        add("causal", self.causal.is_some());
        add("n_ops", self.n_ops.is_some());
        add("elements", self.elements.is_some());
        v
    }

    /// Checks the keys against the kind and builds the validated workload.
    pub fn validate(&self, text: &str) -> Result<Workload, Invalid> {
        let at = |key: &str| find_key(text, &["workload", key]);
        let kind = self.kind.ok_or_else(|| {
            (
                at("kind"),
                "workload needs `kind`: one of elementwise, rmsnorm, layernorm, softmax, gemm, attention, launch_chain".to_string(),
            )
        })?;
        let (required, optional) = kind.keys();
        let set = self.set_keys();
        for key in &set {
            if !required.contains(key) && !optional.contains(key) {
                return Err((
                    at(key),
                    format!(
                        "workload.{key} does not apply to kind {}; its keys are: {}",
                        kind.name(),
                        required
                            .iter()
                            .chain(optional)
                            .copied()
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
        }
        if let Some(missing) = required.iter().find(|k| !set.contains(k)) {
            return Err((
                at("kind"),
                format!(
                    "workload of kind {} needs {}; `{missing}` is missing",
                    kind.name(),
                    required
                        .iter()
                        .map(|k| format!("`{k}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        let d = |v: Option<Dim>| v.map_or(0, |d| d.0);
        let product = |dims: &[(&str, u64)], key: &str| -> Result<u64, Invalid> {
            dims.iter()
                .try_fold(1u64, |acc, (_, v)| acc.checked_mul(*v))
                .filter(|&n| n <= MAX_TENSOR_ELEMENTS)
                .ok_or_else(|| {
                    (
                        at(key),
                        format!(
                            "{} exceeds the limit of {MAX_TENSOR_ELEMENTS} elements per tensor",
                            dims.iter()
                                .map(|(k, v)| format!("{k} {v}"))
                                .collect::<Vec<_>>()
                                .join(" x ")
                        ),
                    )
                })
        };
        let dtype = self.dtype.unwrap_or(DType::F32);
        // bf16 exists for the workload that runs it on tensor cores; elsewhere it would be a
        // claim no kernel backs.
        if dtype == DType::Bf16 && kind != WorkloadKind::Attention {
            return Err((
                at("dtype"),
                format!(
                    "workload.dtype bf16 is supported for kind attention only (kind {} runs in f32)",
                    kind.name()
                ),
            ));
        }
        let rows_cols = || -> Result<(u64, u64), Invalid> {
            let (r, c) = (d(self.rows), d(self.cols));
            product(&[("rows", r), ("cols", c)], "cols")?;
            Ok((r, c))
        };
        let eps = self.eps.map_or(1e-5, |e| e.0);
        if eps <= 0.0 {
            return Err((
                at("eps"),
                format!("workload.eps {eps}: expected a number > 0"),
            ));
        }
        Ok(match kind {
            WorkloadKind::Elementwise => {
                let ops = self.ops.clone().unwrap_or_default();
                if ops.is_empty() {
                    return Err((
                        at("ops"),
                        "workload.ops is empty: expected a chain of at least one op (bias_add, add, mul, scale, relu, gelu, silu)".into(),
                    ));
                }
                if ops.len() > 256 {
                    return Err((
                        at("ops"),
                        format!(
                            "workload.ops has {} ops: at most 256 are supported",
                            ops.len()
                        ),
                    ));
                }
                let (rows, cols) = rows_cols()?;
                Workload::Elementwise(Elementwise {
                    ops,
                    rows,
                    cols,
                    dtype,
                    scale: self.scale.map_or(0.5, |s| s.0),
                })
            }
            WorkloadKind::Rmsnorm | WorkloadKind::Layernorm | WorkloadKind::Softmax => {
                let (rows, cols) = rows_cols()?;
                let r = RowOp {
                    rows,
                    cols,
                    dtype,
                    eps,
                };
                match kind {
                    WorkloadKind::Rmsnorm => Workload::Rmsnorm(r),
                    WorkloadKind::Layernorm => Workload::Layernorm(r),
                    _ => Workload::Softmax(r),
                }
            }
            WorkloadKind::Gemm => {
                let (m, n, k) = (d(self.m), d(self.n), d(self.k));
                product(&[("m", m), ("k", k)], "k")?;
                product(&[("k", k), ("n", n)], "n")?;
                product(&[("m", m), ("n", n)], "n")?;
                Workload::Gemm(Gemm { m, n, k, dtype })
            }
            WorkloadKind::Attention => {
                let a = Attention {
                    batch: d(self.batch),
                    heads: d(self.heads),
                    seq_len: d(self.seq_len),
                    head_dim: d(self.head_dim),
                    causal: self.causal.unwrap_or(false),
                    dtype,
                };
                product(
                    &[
                        ("batch", a.batch),
                        ("heads", a.heads),
                        ("seq_len", a.seq_len),
                        ("head_dim", a.head_dim),
                    ],
                    "head_dim",
                )?;
                if a.head_dim > 512 {
                    return Err((
                        at("head_dim"),
                        format!("workload.head_dim {}: at most 512 is supported", a.head_dim),
                    ));
                }
                Workload::Attention(a)
            }
            WorkloadKind::LaunchChain => {
                let l = LaunchChain {
                    n_ops: d(self.n_ops),
                    elements: d(self.elements),
                    dtype,
                };
                if l.n_ops < 2 || l.n_ops > 100_000 {
                    return Err((
                        at("n_ops"),
                        format!("workload.n_ops {}: expected 2 to 100000 (the overhead is (T_eager - T_graph)/(n_ops - 1))", l.n_ops),
                    ));
                }
                product(&[("elements", l.elements)], "elements")?;
                Workload::LaunchChain(l)
            }
            WorkloadKind::Probe => {
                let elements = d(self.elements);
                product(&[("elements", elements)], "elements")?;
                Workload::Probe(ProbeWorkload { elements, dtype })
            }
        })
    }
}
