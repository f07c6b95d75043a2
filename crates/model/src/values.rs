//! The vocabulary every stage shares, at the bottom of the house: the checked numbers of the
//! input grammar (a tensor dimension, a non-negative and a finite number: each refuses a bad
//! value while serde still stands on it, so a YAML error gives the value's own line and
//! column), the element types and the names of the variants.

use serde::{Deserialize, Serialize};

/// Largest number of elements one tensor of a spec may have (2^34, 64 GiB of f32). Beyond this a
/// spec is refused outright; below it, the run still refuses cases that do not fit in memory.
pub const MAX_TENSOR_ELEMENTS: u64 = 1 << 34;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DType {
    F32,
    /// bfloat16 storage with f32 accumulation, for attention on tensor cores (CUDA backend).
    Bf16,
}

impl DType {
    pub const ALL: [DType; 2] = [DType::F32, DType::Bf16];
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

/// The implementation variants of the kinds; each kind takes its own pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Variant {
    /// One kernel per op; every intermediate goes through memory.
    Unfused,
    /// One kernel for the chain; intermediates stay on chip (registers, L1).
    Fused,
    /// Attention with S = QKᵀ and P = softmax(S) materialized in memory.
    Standard,
    /// FlashAttention: tiles of Q against tiles of K, V with online softmax.
    Flash,
    /// A chain of small kernels, each dispatched (launched) on its own.
    Eager,
    /// The same chain recorded once as a plan and replayed with one dispatch.
    Graph,
    /// Textbook triple loop.
    Naive,
    /// Cache-blocked, packed, register-tiled.
    Tiled,
    /// Probe: y = x (STREAM copy).
    Copy,
    /// Probe: a = b + s·c (STREAM triad).
    Triad,
    /// Probe: 256 dependent FMAs per element, many elements in flight (compute peak).
    Fma,
}

impl std::fmt::Display for Variant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::Unfused => "unfused",
            Variant::Fused => "fused",
            Variant::Standard => "standard",
            Variant::Flash => "flash",
            Variant::Eager => "eager",
            Variant::Graph => "graph",
            Variant::Naive => "naive",
            Variant::Tiled => "tiled",
            Variant::Copy => "copy",
            Variant::Triad => "triad",
            Variant::Fma => "fma",
        }
    }
}

/// A tensor dimension: a whole number ≥ 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Dim(pub u64);

impl TryFrom<i64> for Dim {
    type Error = String;
    fn try_from(v: i64) -> Result<Self, String> {
        if v < 1 {
            return Err(format!("invalid size {v}: expected a whole number >= 1"));
        }
        if v as u64 > MAX_TENSOR_ELEMENTS {
            return Err(format!(
                "invalid size {v}: larger than the limit of {MAX_TENSOR_ELEMENTS} elements"
            ));
        }
        Ok(Dim(v as u64))
    }
}

/// A finite, non-negative number (tolerances).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct NonNeg(pub f64);

impl TryFrom<f64> for NonNeg {
    type Error = String;
    fn try_from(v: f64) -> Result<Self, String> {
        if !v.is_finite() || v < 0.0 {
            return Err(format!("invalid value {v}: expected a finite number >= 0"));
        }
        Ok(NonNeg(v))
    }
}

/// A finite number (savings bounds, scale factors).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Finite(pub f64);

impl TryFrom<f64> for Finite {
    type Error = String;
    fn try_from(v: f64) -> Result<Self, String> {
        if !v.is_finite() {
            return Err(format!("invalid value {v}: expected a finite number"));
        }
        Ok(Finite(v))
    }
}

/// Deserializes a checked newtype through a visitor, so that a refused value is reported while
/// the parser still stands on it (serde_yaml then gives the value's own line and column).
macro_rules! checked_deserialize_ {
    ($ty:ty, $what:literal, $method:ident, [$($visit:ident: $arg:ty => $conv:expr),*]) => {
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> serde::de::Visitor<'de> for V {
                    type Value = $ty;
                    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                        f.write_str($what)
                    }
                    $(fn $visit<E: serde::de::Error>(self, v: $arg) -> Result<$ty, E> {
                        #[allow(clippy::redundant_closure_call)]
                        <$ty>::try_from(($conv)(v)).map_err(E::custom)
                    })*
                }
                d.$method(V)
            }
        }
    };
}
pub(crate) use checked_deserialize_ as checked_deserialize;

checked_deserialize!(Dim, "a whole number >= 1", deserialize_i64, [
    visit_i64: i64 => |v| v,
    visit_u64: u64 => |v: u64| i64::try_from(v).unwrap_or(i64::MAX)
]);
checked_deserialize!(NonNeg, "a finite number >= 0", deserialize_f64, [
    visit_f64: f64 => |v| v,
    visit_i64: i64 => |v| v as f64,
    visit_u64: u64 => |v| v as f64
]);
checked_deserialize!(Finite, "a finite number", deserialize_f64, [
    visit_f64: f64 => |v| v,
    visit_i64: i64 => |v| v as f64,
    visit_u64: u64 => |v| v as f64
]);

/// JSON Schema of a checked newtype: the rule its `TryFrom` enforces, for editors (`opledger
/// schema spec`). Inlined, so editors show the rule at the key itself.
macro_rules! newtype_schema_ {
    ($ty:ty, $name:literal, $schema:tt) => {
        impl schemars::JsonSchema for $ty {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                $name.into()
            }
            fn inline_schema() -> bool {
                true
            }
            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!($schema)
            }
        }
    };
}
pub(crate) use newtype_schema_ as newtype_schema;

newtype_schema!(Dim, "Dim", {
    "type": "integer",
    "minimum": 1,
    "maximum": MAX_TENSOR_ELEMENTS,
    "description": "a whole number >= 1"
});
newtype_schema!(NonNeg, "NonNeg", {
    "type": "number",
    "minimum": 0,
    "description": "a finite number >= 0"
});
newtype_schema!(Finite, "Finite", {
    "type": "number",
    "description": "a finite number"
});
