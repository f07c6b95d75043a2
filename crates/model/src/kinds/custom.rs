//! `kind: custom`: an op opledger does not know, with its ledger declared in the spec. The spec
//! names its own sizes, its tensors (shapes as expressions over the sizes), which tensors are
//! inputs and which one is the output, and for each variant the reads and writes of every tensor,
//! the FLOPs and the launches. The ledger, roofline, bound check, savings, sweeps, gate and
//! checklist then work as for the built-in kinds. There is no f64 reference and no built-in
//! kernel: both sides are the user's implementations (workers), and the `before` side's output
//! is the reference of the `after` side's, element by element.

use super::tensors::{uniform, Tensors};
use super::{DType, FromRaw, Invalid, Kind, RawWorkload, Variant, MAX_TENSOR_ELEMENTS};
use crate::expr::Expr;
use crate::ledger::{mv, Tiling, VariantLedger};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A number or an expression over the spec's sizes, as written (`64`, `2 * cols`).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[schemars(with = "serde_json::Value")]
pub struct ExprText(pub String);

impl<'de> Deserialize<'de> for ExprText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = ExprText;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a whole number or an expression over the sizes, such as `2 * cols`")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<ExprText, E> {
                Ok(ExprText(v.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<ExprText, E> {
                Ok(ExprText(v.to_string()))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ExprText, E> {
                Expr::parse(v).map_err(E::custom)?;
                Ok(ExprText(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// A tensor of a custom op as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, expecting = "a mapping {shape: [SIZE, ...]}")]
pub struct RawTensor {
    /// Row-major shape: whole numbers or expressions over the sizes.
    pub shape: Vec<ExprText>,
}

/// One variant's traffic and work as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping {reads: {TENSOR: COUNT}, writes: {TENSOR: COUNT}, flops: EXPR, launches: N}"
)]
pub struct RawCustomLedger {
    /// How many times each tensor is read from memory in one execution.
    #[serde(default)]
    pub reads: BTreeMap<String, ExprText>,
    /// How many times each tensor is written.
    #[serde(default)]
    pub writes: BTreeMap<String, ExprText>,
    /// FLOPs of one execution (an expression over the sizes).
    pub flops: ExprText,
    /// Kernel launches per execution (default 1).
    #[serde(default)]
    pub launches: Option<u64>,
}

/// A validated custom op.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Custom {
    pub sizes: BTreeMap<String, u64>,
    /// Every tensor with its evaluated shape, in the order written.
    pub tensors: Vec<CustomTensor>,
    pub inputs: Vec<String>,
    pub output: String,
    pub ledgers: Vec<CustomLedger>,
    pub dtype: DType,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CustomTensor {
    pub name: String,
    pub shape: Vec<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CustomLedger {
    pub variant: Variant,
    /// (tensor, reads, writes)
    pub moves: Vec<(String, u64, u64)>,
    pub flops: u64,
    pub launches: u64,
}

impl Custom {
    fn tensor(&self, name: &str) -> Option<&CustomTensor> {
        self.tensors.iter().find(|t| t.name == name)
    }
    fn elements(&self, name: &str) -> u64 {
        self.tensor(name)
            .map_or(0, |t| t.shape.iter().product::<u64>())
    }
}

/// Most bytes one execution of a declared variant may move (1 EiB): sums and ratios of ledgers
/// stay far inside 64 bits.
pub const MAX_LEDGER_BYTES: u64 = 1 << 60;
/// Most FLOPs one execution of a declared variant may count.
pub const MAX_LEDGER_FLOPS: u64 = 1 << 60;

fn name_ok(n: &str) -> bool {
    let mut c = n.chars();
    c.next().is_some_and(|f| f.is_ascii_lowercase() || f == '_')
        && c.all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_')
        && n.len() <= 32
}

/// Evaluates `e` with the sizes, as a count ≥ `min`.
fn count(
    e: &ExprText,
    sizes: &BTreeMap<String, i64>,
    key: &'static str,
    what: &str,
    min: i64,
) -> Result<u64, Invalid> {
    let v = Expr::parse(&e.0)
        .and_then(|x| x.eval(sizes))
        .map_err(|m| Invalid::at(key, format!("workload.{key}: {what} `{}`: {m}", e.0)))?;
    if v < min {
        return Err(Invalid::at(
            key,
            format!(
                "workload.{key}: {what} `{}` is {v}: expected at least {min}",
                e.0
            ),
        ));
    }
    Ok(v as u64)
}

impl FromRaw for Custom {
    const KEYS: (&'static [&'static str], &'static [&'static str]) = (
        &["sizes", "tensors", "inputs", "output", "ledger"],
        &["dtype"],
    );
    const BUILTIN_KERNELS: bool = false;

    fn from_raw(raw: &RawWorkload) -> Result<Self, Invalid> {
        let sizes = sizes_of(raw)?;
        let tensors = tensors_of(raw, &sizes)?;
        let inputs = raw.inputs.clone().unwrap_or_default();
        let output = raw.output.clone().unwrap_or_default();
        check_inputs_and_output(&tensors, &inputs, &output)?;
        let mut ledgers = Vec::new();
        for (vname, l) in raw.ledger.clone().unwrap_or_default() {
            let ledger = Tensorset {
                sizes: &sizes,
                tensors: &tensors,
                output: &output,
                dtype_bytes: raw.dtype().bytes(),
            };
            ledgers.push(ledger.variant(&vname, &l)?);
        }
        if ledgers.len() < 2 {
            return Err(Invalid::at(
                "ledger",
                "workload.ledger: expected the ledgers of at least two variants (the two a spec compares)",
            ));
        }
        Ok(Custom {
            sizes: sizes.into_iter().map(|(k, v)| (k, v as u64)).collect(),
            tensors,
            inputs,
            output,
            ledgers,
            dtype: raw.dtype(),
        })
    }
}

/// The named sizes, each a valid name.
fn sizes_of(raw: &RawWorkload) -> Result<BTreeMap<String, i64>, Invalid> {
    let raw_sizes = raw.sizes.clone().unwrap_or_default();
    let mut sizes = BTreeMap::new();
    for (name, v) in &raw_sizes {
        if !name_ok(name) {
            return Err(Invalid::at(
                    "sizes",
                    format!("workload.sizes: `{name}`: expected a name of [a-z_][a-z0-9_]*, at most 32 characters"),
                ));
        }
        sizes.insert(name.clone(), v.0 as i64);
    }
    Ok(sizes)
}

/// The tensors: valid names, 1 to 8 dimensions given by the sizes, within the element limit.
fn tensors_of(
    raw: &RawWorkload,
    sizes: &BTreeMap<String, i64>,
) -> Result<Vec<CustomTensor>, Invalid> {
    let raw_tensors = raw.tensors.clone().unwrap_or_default();
    let mut tensors = Vec::new();
    for (name, t) in &raw_tensors {
        if !name_ok(name) {
            return Err(Invalid::at(
                    "tensors",
                    format!("workload.tensors: `{name}`: expected a name of [a-z_][a-z0-9_]*, at most 32 characters"),
                ));
        }
        if t.shape.is_empty() || t.shape.len() > 8 {
            return Err(Invalid::at(
                "tensors",
                format!("workload.tensors.{name}.shape: expected 1 to 8 dimensions"),
            ));
        }
        let shape = t
            .shape
            .iter()
            .map(|d| count(d, sizes, "tensors", &format!("{name}.shape"), 1))
            .collect::<Result<Vec<u64>, Invalid>>()?;
        shape
                .iter()
                .try_fold(1u64, |a, &d| a.checked_mul(d))
                .filter(|&n| n <= MAX_TENSOR_ELEMENTS)
                .ok_or_else(|| {
                    Invalid::at(
                        "tensors",
                        format!("workload.tensors.{name}: shape {shape:?} exceeds the limit of {MAX_TENSOR_ELEMENTS} elements per tensor"),
                    )
                })?;
        tensors.push(CustomTensor {
            name: name.clone(),
            shape,
        });
    }
    Ok(tensors)
}

/// The names of the tensors, for messages.
fn tensor_names(tensors: &[CustomTensor]) -> String {
    tensors
        .iter()
        .map(|t| t.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// One or more inputs and one output, all tensors of the workload, the output not an input.
fn check_inputs_and_output(
    tensors: &[CustomTensor],
    inputs: &[String],
    output: &String,
) -> Result<(), Invalid> {
    let known = |n: &str| tensors.iter().any(|t| t.name == n);
    let names = || tensor_names(tensors);
    if inputs.is_empty() {
        return Err(Invalid::at(
            "inputs",
            "workload.inputs: expected the names of one or more tensors",
        ));
    }
    for i in inputs.iter().chain([output]) {
        if !known(i) {
            return Err(Invalid::at(
                if i == output { "output" } else { "inputs" },
                format!(
                    "workload: `{i}` is no tensor of workload.tensors (its tensors: {})",
                    names()
                ),
            ));
        }
    }
    if inputs.contains(output) {
        return Err(Invalid::at(
                "output",
                format!("workload.output `{output}` is also an input: the output is what the variants write"),
            ));
    }
    Ok(())
}

/// What a variant's ledger is counted against: the sizes, the tensors, the output, the dtype.
struct Tensorset<'a> {
    sizes: &'a BTreeMap<String, i64>,
    tensors: &'a [CustomTensor],
    output: &'a str,
    dtype_bytes: u64,
}

impl Tensorset<'_> {
    /// One variant's ledger: reads and writes of known tensors, the output written, every
    /// count and sum in range, at least one launch.
    fn variant(&self, vname: &str, l: &RawCustomLedger) -> Result<CustomLedger, Invalid> {
        let (sizes, tensors, output, dtype_bytes) =
            (self.sizes, self.tensors, self.output, self.dtype_bytes);
        let known = |n: &str| tensors.iter().any(|t| t.name == n);
        let names = || tensor_names(tensors);
        let variant = Variant::deserialize(serde::de::value::StrDeserializer::<
            serde::de::value::Error,
        >::new(vname))
        .map_err(|e| Invalid::at("ledger", format!("workload.ledger.{vname}: {e}")))?;
        let mut moves: Vec<(String, u64, u64)> = Vec::new();
        for (tensor, _) in l.reads.iter().chain(&l.writes) {
            if !known(tensor) {
                return Err(Invalid::at(
                        "ledger",
                        format!("workload.ledger.{vname}: `{tensor}` is no tensor of workload.tensors (its tensors: {})", names()),
                    ));
            }
        }
        for t in tensors {
            let reads = l.reads.get(&t.name).map_or(Ok(0), |e| {
                count(e, sizes, "ledger", &format!("{vname}.reads.{}", t.name), 0)
            })?;
            let writes = l.writes.get(&t.name).map_or(Ok(0), |e| {
                count(e, sizes, "ledger", &format!("{vname}.writes.{}", t.name), 0)
            })?;
            if reads + writes > 0 {
                moves.push((t.name.clone(), reads, writes));
            }
        }
        if !moves.iter().any(|(t, _, w)| *t == output && *w > 0) {
            return Err(Invalid::at(
                "ledger",
                format!("workload.ledger.{vname}: the variant never writes the output `{output}`"),
            ));
        }
        // Every product and sum of the ledger in range: bytes = elements × dtype bytes ×
        // (reads + writes), summed over the tensors, and the FLOPs. A count that wraps would
        // show as a tiny traffic and a nonsense saving.
        let mut total: u64 = 0;
        for (tensor, reads, writes) in &moves {
            let elements = tensors
                .iter()
                .find(|t| t.name == *tensor)
                .map_or(0, |t| t.shape.iter().product::<u64>());
            let traffic = elements
                .checked_mul(dtype_bytes)
                .zip(reads.checked_add(*writes))
                .and_then(|(bytes, moves)| bytes.checked_mul(moves))
                .filter(|&b| b <= MAX_LEDGER_BYTES);
            total = match traffic.and_then(|t| total.checked_add(t)) {
                Some(t) if t <= MAX_LEDGER_BYTES => t,
                _ => {
                    let side = if l.reads.contains_key(tensor) {
                        "reads"
                    } else {
                        "writes"
                    };
                    return Err(Invalid::at(
                            "ledger",
                            format!(
                                "workload.ledger.{vname}.{side}.{tensor}: {elements} elements of {dtype_bytes} bytes, read {reads} and written {writes} times, bring the variant's traffic past {MAX_LEDGER_BYTES} bytes (2^60): the counts overflow; expected counts per execution"
                            ),
                        )
                        .within([vname, side, tensor.as_str()]));
                }
            };
        }
        let launches = l.launches.unwrap_or(1);
        if launches == 0 {
            return Err(Invalid::at(
                "ledger",
                format!("workload.ledger.{vname}.launches: expected at least 1"),
            ));
        }
        let flops = count(&l.flops, sizes, "ledger", &format!("{vname}.flops"), 0)?;
        if flops > MAX_LEDGER_FLOPS {
            return Err(Invalid::at(
                    "ledger",
                    format!("workload.ledger.{vname}.flops: {flops} is past {MAX_LEDGER_FLOPS} (2^60): expected the FLOPs of one execution"),
                )
                .within([vname, "flops"]));
        }
        Ok(CustomLedger {
            variant,
            moves,
            flops,
            launches,
        })
    }
}

impl Kind for Custom {
    fn variants(&self) -> Vec<Variant> {
        self.ledgers.iter().map(|l| l.variant).collect()
    }
    fn dtype(&self) -> DType {
        self.dtype
    }
    fn describe(&self) -> String {
        let shape = |n: &str| {
            self.tensor(n).map_or(String::new(), |t| {
                t.shape
                    .iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join("x")
            })
        };
        format!(
            "custom {} -> {}[{}] {}",
            self.inputs
                .iter()
                .map(|i| format!("{i}[{}]", shape(i)))
                .collect::<Vec<_>>()
                .join(", "),
            self.output,
            shape(&self.output),
            self.dtype.name()
        )
    }
    fn reduction_len(&self) -> u64 {
        1
    }
    fn ledger(&self, variant: Variant, _: &Tiling) -> VariantLedger {
        let bytes = self.dtype.bytes();
        match self.ledgers.iter().find(|l| l.variant == variant) {
            Some(l) => VariantLedger::new(
                variant,
                l.moves
                    .iter()
                    .map(|(t, r, w)| mv(t, self.elements(t) * bytes, *r, *w))
                    .collect(),
                l.flops,
                l.launches,
            ),
            None => VariantLedger::new(variant, Vec::new(), 0, 0),
        }
    }
    fn output_len(&self) -> u64 {
        self.elements(&self.output)
    }
    fn output_name(&self) -> String {
        self.output.clone()
    }
    fn output_shape(&self) -> Vec<u64> {
        self.tensor(&self.output)
            .map_or_else(|| vec![0], |t| t.shape.clone())
    }
    fn input_bytes(&self) -> u64 {
        self.inputs.iter().map(|i| self.elements(i) * 4).sum()
    }
    fn inputs(&self, seed: u64) -> Tensors {
        let mut t = Tensors::new();
        for (k, name) in self.inputs.iter().enumerate() {
            if let Some(tensor) = self.tensor(name) {
                let n = self.elements(name) as usize;
                t.put_shaped(
                    name.clone(),
                    tensor.shape.clone(),
                    uniform(n, seed, k as u64, -2.0, 2.0),
                );
            }
        }
        t
    }
    /// No reference: the `before` side's output is the `after` side's.
    fn reference(&self, _: &Tensors, _: Variant, _: usize) -> f64 {
        f64::NAN
    }
    fn has_reference(&self) -> bool {
        false
    }
}
