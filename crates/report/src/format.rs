//! Every number the outputs print, formatted in one place: durations, binary and decimal
//! bytes, rates, and the three ways a median in milliseconds is shown (with its unit in
//! sentences, a bare number in tables and CSV, a readable unit on the dashboard).

/// A count and its noun, singular for one: `1 spec`, `2 specs`, `1 check failed`.
pub fn counted(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A signed change with thousands separators: `+3,149,952`, `-1,024`, `+0`.
pub fn delta(n: i128) -> String {
    format!(
        "{}{}",
        if n < 0 { '-' } else { '+' },
        thousands(u64::try_from(n.unsigned_abs()).unwrap_or(u64::MAX))
    )
}

/// Seconds with a readable unit.
pub fn duration(secs: f64) -> String {
    let a = secs.abs();
    if a >= 1.0 {
        format!("{secs:.3} s")
    } else if a >= 1e-3 {
        format!("{:.3} ms", secs * 1e3)
    } else if a >= 1e-6 {
        format!("{:.2} µs", secs * 1e6)
    } else {
        format!("{:.1} ns", secs * 1e9)
    }
}

/// Bytes with a binary prefix (256.0 MiB).
pub fn bytes(n: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n:.0} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// A rate with a decimal prefix (12.34 GB/s).
pub fn rate(v: f64, unit: &str) -> String {
    let (scale, prefix) = if v >= 1e12 {
        (1e12, "T")
    } else if v >= 1e9 {
        (1e9, "G")
    } else if v >= 1e6 {
        (1e6, "M")
    } else {
        (1.0, "")
    };
    format!("{:.2} {prefix}{unit}", v / scale)
}

/// Bytes with a decimal prefix, as ncu counts them (2.491 MB).
pub fn decimal_bytes(b: f64) -> String {
    let (v, unit) = match b {
        b if b >= 1e12 => (b / 1e12, "TB"),
        b if b >= 1e9 => (b / 1e9, "GB"),
        b if b >= 1e6 => (b / 1e6, "MB"),
        b if b >= 1e3 => (b / 1e3, "kB"),
        b => (b, "B"),
    };
    format!("{v:.3} {unit}")
}

/// Bytes in MiB, two decimals, for a table whose header names the unit.
pub fn mib(bytes: u64) -> String {
    format!("{:.2}", bytes as f64 / (1u64 << 20) as f64)
}

/// A median in milliseconds with its unit, or a dash where there is none.
pub fn ms_with_unit(v: Option<f64>) -> String {
    v.map_or("—".to_string(), |t| format!("{:.3} ms", t * 1e3))
}

/// A median in milliseconds as a bare number (the table's header names the unit), or a dash.
pub fn ms_number(v: Option<f64>) -> String {
    v.map_or("—".into(), |t| format!("{:.3}", t * 1e3))
}

/// A duration in a readable unit, or a dash.
pub fn duration_or_dash(v: Option<f64>) -> String {
    v.map_or("—".into(), duration)
}

/// A count with thousands separated: `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A number without trailing zeros: `1`, `0.5`, `2.25`.
pub fn trim_float(v: f64) -> String {
    let s = format!("{v:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

/// A limit as a percentage, whole where it is 1% or more (`10`), to a tenth below (`0.1`).
pub fn limit_percent(fraction: f64) -> String {
    let pct = fraction * 100.0;
    if pct.abs() >= 1.0 {
        format!("{pct:.0}")
    } else {
        trim_float((pct * 10.0).round() / 10.0)
    }
}

#[cfg(test)]
mod counts_format_tests {
    #[test]
    fn counts_and_limits_read_well() {
        assert_eq!(super::thousands(0), "0");
        assert_eq!(super::thousands(999), "999");
        assert_eq!(super::thousands(1000), "1,000");
        assert_eq!(super::thousands(240_682_383), "240,682,383");
        assert_eq!(super::trim_float(1.0), "1");
        assert_eq!(super::trim_float(2.5), "2.5");
        assert_eq!(super::limit_percent(0.10), "10");
        assert_eq!(super::limit_percent(0.001), "0.1");
        assert_eq!(super::limit_percent(0.0), "0");
    }
}
