//! `opledger roofline`: the roofline worked through for given ceilings or a datasheet entry.

use crate::device::{find_profile, profiles};
use crate::error::{Error, ExitCode, Result};
use crate::report;

/// What the roofline is worked through for: ceilings given, or a datasheet device's.
pub struct Inputs<'a> {
    pub peak_tflops: Option<f64>,
    pub bw_gbps: Option<f64>,
    pub device: Option<&'a str>,
    pub flops: f64,
    pub bytes: f64,
}

/// `opledger roofline`: the roofline worked through for given ceilings or a datasheet entry.
pub fn roofline(a: &Inputs) -> Result<ExitCode> {
    let (peak_tflops, bw_gbps, label) = match &a.device {
        Some(d) => {
            let p = find_profile(d).ok_or_else(|| {
                Error::Flag(format!(
                    "unknown device {d:?}; known: {}",
                    profiles()
                        .iter()
                        .map(|p| p.key)
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?;
            (
                p.tensor_tflops,
                p.bw_gbps,
                format!("{} (datasheet, tensor-core peak)", p.name),
            )
        }
        None => (
            a.peak_tflops.unwrap_or(0.0),
            a.bw_gbps.unwrap_or(0.0),
            "given ceilings".into(),
        ),
    };
    for (name, v) in [
        ("peak", peak_tflops),
        ("bandwidth", bw_gbps),
        ("flops", a.flops),
        ("bytes", a.bytes),
    ] {
        if !(v.is_finite() && v >= 0.0) || (v == 0.0 && (name == "peak" || name == "bandwidth")) {
            return Err(Error::Flag(format!(
                "{name} must be a finite positive number, got {v}"
            )));
        }
    }
    print!(
        "{}",
        report::text::roofline(peak_tflops, bw_gbps, a.flops, a.bytes, &label)
    );
    Ok(ExitCode::Pass)
}
