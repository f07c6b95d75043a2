//! Checked numbers of the input grammar: a tensor dimension, a non-negative and a finite number.
//! Each refuses a bad value while serde still stands on it, so a YAML error gives the value's
//! own line and column.

use crate::kinds::MAX_TENSOR_ELEMENTS;
use serde::{Deserialize, Serialize};

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
