//! Workload kinds. A kind is one module: the `workload:` keys it takes and their checks, the
//! variants it compares, its IO ledger, its seeded input tensors and the f64 reference computed
//! from them, and its memory need. Nothing here knows a backend: the backends implement their
//! kernels per kind in their own folders, in tables generated from the registry below, so the
//! compiler names every backend that lacks a kernel for a new kind.
//!
//! The registry is the one list of kinds: [`WorkloadKind`] (what `kind:` accepts), [`Workload`]
//! (a validated workload, as results and baselines store it) and the backends' tables are
//! generated from it.

pub mod add_rmsnorm;
pub mod attention;
pub mod custom;
pub mod elementwise;
pub mod gemm;
pub mod launch_chain;
pub mod probe;
pub mod rows;
pub mod tensors;
#[cfg(test)]
mod tests;

pub use attention::Attention;
pub use elementwise::{ElemOp, Elementwise};
pub use gemm::Gemm;
pub use launch_chain::LaunchChain;
pub use probe::ProbeWorkload;
pub use rows::{Layernorm, Rmsnorm, RowOp, Softmax};
pub use tensors::Tensors;

use crate::ledger::{Ledger, Tiling, VariantLedger};
pub use crate::values::{DType, Variant, MAX_TENSOR_ELEMENTS};
use crate::values::{Dim, Finite};
use serde::{Deserialize, Serialize};

/// The registry: every workload kind once, as `Variant("kind name") => module::Type`. It calls
/// the macro it is given with the list; [`WorkloadKind`], [`Workload`] and each backend's kernel
/// table are made that way (exported: the CPU and CUDA backends are crates of their own).
#[macro_export]
macro_rules! registry {
    ($then:ident) => {
        $then! {
            Elementwise("elementwise") => elementwise::Elementwise,
            Rmsnorm("rmsnorm") => rows::Rmsnorm,
            Layernorm("layernorm") => rows::Layernorm,
            Softmax("softmax") => rows::Softmax,
            Gemm("gemm") => gemm::Gemm,
            Attention("attention") => attention::Attention,
            LaunchChain("launch_chain") => launch_chain::LaunchChain,
            Probe("probe") => probe::ProbeWorkload,
            AddRmsnorm("add_rmsnorm") => add_rmsnorm::AddRmsnorm,
            Custom("custom") => custom::Custom,
        }
    };
}
pub use crate::registry;

/// What a kind refuses in a `workload:` mapping: the key at fault (the spec locates it in the
/// file) and what was expected.
#[derive(Debug, Clone, PartialEq)]
pub struct Invalid {
    pub key: &'static str,
    /// Keys below `key` leading to the element at fault (`[unfused, reads, a]`), when known.
    pub within: Vec<String>,
    pub message: String,
}

impl Invalid {
    pub fn at(key: &'static str, message: impl Into<String>) -> Self {
        Invalid {
            key,
            within: Vec::new(),
            message: message.into(),
        }
    }

    /// The same error, located at a key below `key`.
    pub fn within<S: Into<String>>(mut self, path: impl IntoIterator<Item = S>) -> Self {
        self.within = path.into_iter().map(Into::into).collect();
        self
    }

    /// The key path of the element at fault inside the spec: `workload`, `key`, then `within`.
    pub fn key_path(&self) -> Vec<&str> {
        ["workload", self.key]
            .into_iter()
            .chain(self.within.iter().map(String::as_str))
            .collect()
    }
}

/// One workload kind, as the pipeline, the ledger and the verdicts use it. Object-safe: the
/// pipeline holds `&dyn Kind` and never matches on the kind.
pub trait Kind: Send + Sync {
    /// The variants this kind compares (a spec picks two).
    fn variants(&self) -> Vec<Variant>;
    /// The element type of the workload's tensors.
    fn dtype(&self) -> DType;
    /// A one-line description for tables and logs.
    fn describe(&self) -> String;
    /// How many rounded terms one output element sums: the length of its reduction. Rounding
    /// error grows with it, so the default tolerance does too.
    fn reduction_len(&self) -> u64;
    /// The IO ledger of one variant, with a backend's tiling.
    fn ledger(&self, variant: Variant, tiling: &Tiling) -> VariantLedger;
    /// Elements of the output (f32 on the host).
    fn output_len(&self) -> u64;
    /// The output tensor's name in the ledger (`y`, `C`, `O`).
    fn output_name(&self) -> String {
        "y".into()
    }
    /// The output's shape (row-major), as workers must return it.
    fn output_shape(&self) -> Vec<u64> {
        vec![self.output_len()]
    }
    /// Host bytes of the input tensors, without generating them.
    fn input_bytes(&self) -> u64;
    /// The input tensors, seeded, named as the ledger names them.
    fn inputs(&self, seed: u64) -> Tensors;
    /// The f64 value `variant` must produce at output element `index`, from the inputs.
    fn reference(&self, inputs: &Tensors, variant: Variant, index: usize) -> f64;
    /// How many sampled output elements to check against the reference (fewer when each costs
    /// O(N)).
    fn reference_samples(&self) -> usize {
        4096
    }
    /// Whether both variants compute the same output (then they are compared element by
    /// element); false where each variant computes its own function (the probes).
    fn variants_agree(&self) -> bool {
        true
    }
    /// For kinds whose variants differ only in launches: the number of launches the slower
    /// variant makes, so that the per-launch overhead is Δt/(n − 1). The time ceiling of the
    /// roofline does not apply to them.
    fn launch_chain_ops(&self) -> Option<u64> {
        None
    }
    /// Whether [`Kind::reference`] is an f64 reference (false: the `before` side's output is
    /// the reference of the `after` side's).
    fn has_reference(&self) -> bool {
        true
    }
}

/// Building a kind from the `workload:` mapping.
pub trait FromRaw: Kind + Sized {
    /// Keys of `workload:` this kind takes besides `kind`: required ones, then optional ones.
    const KEYS: (&'static [&'static str], &'static [&'static str]);
    /// The element types this kind has kernels for.
    const DTYPES: &'static [DType] = &[DType::F32];
    /// Whether the backends have kernels of this kind (false: both sides are the user's code).
    const BUILTIN_KERNELS: bool = true;
    /// Builds the kind from a mapping whose keys are already checked against [`Self::KEYS`]
    /// and whose dtype is one of [`Self::DTYPES`].
    fn from_raw(raw: &RawWorkload) -> Result<Self, Invalid>;
}

macro_rules! define_kinds {
    ($($variant:ident($name:literal) => $module:ident :: $ty:ident),* $(,)?) => {
        /// What `kind:` accepts.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
        #[serde(rename_all = "snake_case")]
        pub enum WorkloadKind {
            $($variant),*
        }

        impl WorkloadKind {
            pub const ALL: &'static [WorkloadKind] = &[$(WorkloadKind::$variant),*];
            pub fn name(self) -> &'static str {
                match self {
                    $(WorkloadKind::$variant => $name),*
                }
            }
            /// Keys of `workload:` this kind takes (besides `kind`), required ones first.
            pub fn keys(self) -> (&'static [&'static str], &'static [&'static str]) {
                match self {
                    $(WorkloadKind::$variant => <$module::$ty as FromRaw>::KEYS),*
                }
            }
            /// Whether the backends have kernels of this kind (false: both sides of a spec are
            /// the user's implementations).
            pub fn builtin_kernels(self) -> bool {
                match self {
                    $(WorkloadKind::$variant => <$module::$ty as FromRaw>::BUILTIN_KERNELS),*
                }
            }
            /// The element types this kind has kernels for.
            pub fn dtypes(self) -> &'static [DType] {
                match self {
                    $(WorkloadKind::$variant => <$module::$ty as FromRaw>::DTYPES),*
                }
            }
            fn build(self, raw: &RawWorkload) -> Result<Workload, Invalid> {
                match self {
                    $(WorkloadKind::$variant => {
                        <$module::$ty as FromRaw>::from_raw(raw).map(Workload::$variant)
                    })*
                }
            }
        }

        /// A validated workload: its kind and that kind's parameters.
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
        #[serde(tag = "kind", rename_all = "snake_case")]
        pub enum Workload {
            $($variant($module::$ty)),*
        }

        impl Workload {
            pub fn kind(&self) -> WorkloadKind {
                match self {
                    $(Workload::$variant(_) => WorkloadKind::$variant),*
                }
            }
            /// The kind's behaviour: ledger, inputs, reference.
            pub fn as_kind(&self) -> &dyn Kind {
                match self {
                    $(Workload::$variant(k) => k),*
                }
            }
        }
    };
}
registry!(define_kinds);

impl Workload {
    pub fn dtype(&self) -> DType {
        self.as_kind().dtype()
    }
    pub fn variants(&self) -> Vec<Variant> {
        self.as_kind().variants()
    }
    pub fn describe(&self) -> String {
        self.as_kind().describe()
    }
    pub fn reduction_len(&self) -> u64 {
        self.as_kind().reduction_len()
    }
    /// The ledger of both variants with a backend's tiling.
    pub fn ledger(&self, before: Variant, after: Variant, tiling: &Tiling) -> Ledger {
        let k = self.as_kind();
        Ledger {
            before: k.ledger(before, tiling),
            after: k.ledger(after, tiling),
        }
    }
    /// The workload's numbers by key (`rows`, `eps`, a custom op's sizes): what expressions
    /// and kernel arguments may name.
    pub fn scalars(&self) -> std::collections::BTreeMap<String, Scalar> {
        let mut out = std::collections::BTreeMap::new();
        let mut add = |k: &str, v: &serde_json::Value| {
            if let Some(i) = v.as_i64() {
                out.insert(k.to_string(), Scalar::Int(i));
            } else if let Some(f) = v.as_f64() {
                out.insert(k.to_string(), Scalar::Float(f));
            }
        };
        if let Ok(serde_json::Value::Object(m)) = serde_json::to_value(self) {
            for (k, v) in &m {
                add(k, v);
            }
            if let Some(serde_json::Value::Object(sizes)) = m.get("sizes") {
                for (k, v) in sizes {
                    add(k, v);
                }
            }
        }
        out
    }

    /// The ledger of one variant with the CPU kernels' tiling.
    pub fn variant_ledger(&self, variant: Variant) -> VariantLedger {
        self.as_kind().ledger(variant, &Tiling::CPU)
    }

    /// The correctness tolerance (rtol, atol) a spec gets when it names none: rounding of the
    /// dtype grown with the square root of the reduction length (errors of independent
    /// roundings add like a random walk), with floors that cover transcendental approximations
    /// (GELU, exp). f32: rtol = atol = max(1e-5, 16·2⁻²³·√K); bf16 (f32 accumulation, bf16
    /// inputs and P): rtol 2e-2, atol = max(5e-3, 2⁻⁸·√K/64).
    pub fn default_tolerance(&self) -> (f64, f64) {
        let k = (self.reduction_len().max(1) as f64).sqrt();
        match self.dtype() {
            DType::F32 => {
                let t = (16.0 * f32::EPSILON as f64 * k).max(1e-5);
                (t, t)
            }
            DType::Bf16 => (2e-2, (k / 64.0 / 256.0).max(5e-3)),
        }
    }
}

/// A number of a workload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    Int(i64),
    Float(f64),
}

/// Variant pair of the fusion kinds.
pub const UNFUSED_FUSED: &[Variant] = &[Variant::Unfused, Variant::Fused];

// A kind that needs a key no kind has yet adds one field here (a whole number also to `dims!`).
/// The `workload:` mapping as written: the keys of every kind (which apply depends on `kind`).
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
    /// kind custom: the op's own whole-number keys, named in shapes and FLOPs (sweepable).
    pub sizes: Option<std::collections::BTreeMap<String, Dim>>,
    /// kind custom: every tensor with its shape (expressions over `sizes`).
    pub tensors: Option<std::collections::BTreeMap<String, custom::RawTensor>>,
    /// kind custom: the tensors opledger generates and hands to the implementations.
    pub inputs: Option<Vec<String>>,
    /// kind custom: the tensor the variants write and are compared on.
    pub output: Option<String>,
    /// kind custom: each variant's reads and writes per tensor, FLOPs and launches.
    pub ledger: Option<std::collections::BTreeMap<String, custom::RawCustomLedger>>,
}

/// The keys of [`RawWorkload`] with a whole-number value, in field order: the ones a sweep may
/// vary.
macro_rules! dims {
    ($($key:ident),*) => {
        impl RawWorkload {
            /// Parameters a sweep may vary.
            pub const SWEEPABLE: &'static [&'static str] = &[$(stringify!($key)),*];
            /// Sets a sweepable parameter (a built-in key, or one of a custom op's sizes); false
            /// for any other key.
            pub fn set(&mut self, key: &str, v: u64) -> bool {
                // A custom op's own size first: its names may be the built-in kinds' too.
                if let Some(d) = self.sizes.as_mut().and_then(|s| s.get_mut(key)) {
                    *d = Dim(v);
                    return true;
                }
                match key {
                    $(stringify!($key) => self.$key = Some(Dim(v)),)*
                    _ => return false,
                }
                true
            }
            /// Whether a sweep may vary `key` here.
            pub fn sweepable(&self, key: &str) -> bool {
                Self::SWEEPABLE.contains(&key)
                    || self.sizes.as_ref().is_some_and(|s| s.contains_key(key))
            }
            /// The value of a whole-number key (0 when absent: kinds read their required keys,
            /// whose presence is checked first).
            pub fn dim(&self, key: &str) -> u64 {
                match key {
                    $(stringify!($key) => self.$key.map_or(0, |d| d.0),)*
                    _ => 0,
                }
            }
            fn set_dims(&self) -> Vec<&'static str> {
                let mut v = Vec::new();
                $(if self.$key.is_some() { v.push(stringify!($key)); })*
                v
            }
        }
    };
}
dims!(rows, cols, m, n, k, batch, heads, seq_len, head_dim, n_ops, elements);

impl RawWorkload {
    fn set_keys(&self) -> Vec<&'static str> {
        let mut v = self.set_dims();
        for (key, set) in [
            ("sizes", self.sizes.is_some()),
            ("tensors", self.tensors.is_some()),
            ("inputs", self.inputs.is_some()),
            ("output", self.output.is_some()),
            ("ledger", self.ledger.is_some()),
            ("ops", self.ops.is_some()),
            ("dtype", self.dtype.is_some()),
            ("scale", self.scale.is_some()),
            ("eps", self.eps.is_some()),
            ("causal", self.causal.is_some()),
        ] {
            if set {
                v.push(key);
            }
        }
        v
    }

    /// The element type (f32 when absent).
    pub fn dtype(&self) -> DType {
        self.dtype.unwrap_or(DType::F32)
    }

    /// The product of `dims`, refused at `key` when a tensor of that shape would exceed
    /// [`MAX_TENSOR_ELEMENTS`].
    pub fn elements(&self, dims: &[&str], key: &'static str) -> Result<u64, Invalid> {
        dims.iter()
            .try_fold(1u64, |acc, k| acc.checked_mul(self.dim(k)))
            .filter(|&n| n <= MAX_TENSOR_ELEMENTS)
            .ok_or_else(|| {
                Invalid::at(
                    key,
                    format!(
                        "{} exceeds the limit of {MAX_TENSOR_ELEMENTS} elements per tensor",
                        dims.iter()
                            .map(|k| format!("{k} {}", self.dim(k)))
                            .collect::<Vec<_>>()
                            .join(" x ")
                    ),
                )
            })
    }

    /// Checks the keys against the kind and builds the validated workload.
    pub fn validate(&self) -> Result<Workload, Invalid> {
        let kind = self.kind.ok_or_else(|| {
            Invalid::at(
                "kind",
                format!(
                    "workload needs `kind`: one of {}",
                    WorkloadKind::ALL
                        .iter()
                        .map(|k| k.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        })?;
        let (required, optional) = kind.keys();
        let set = self.set_keys();
        for key in &set {
            if !required.contains(key) && !optional.contains(key) {
                return Err(Invalid::at(
                    key,
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
            return Err(Invalid::at(
                "kind",
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
        // A dtype is a claim that kernels exist for it: refused where none do.
        let dtype = self.dtype();
        if !kind.dtypes().contains(&dtype) {
            let with: Vec<&str> = WorkloadKind::ALL
                .iter()
                .filter(|k| k.dtypes().contains(&dtype))
                .map(|k| k.name())
                .collect();
            return Err(Invalid::at(
                "dtype",
                format!(
                    "workload.dtype {} is supported for kind {} only (kind {} runs in {})",
                    dtype.name(),
                    with.join(", "),
                    kind.name(),
                    kind.dtypes()
                        .iter()
                        .map(|d| d.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        kind.build(self)
    }
}
