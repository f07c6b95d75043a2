//! Marks the integration tests whose optional part is missing: each part found sets
//! `has_<part>` (`tests/common/parts.rs` says how each is found), and a test that needs a missing
//! one is compiled with `#[ignore = "needs …"]`, so the runner counts it as ignored, with the
//! part's name, never as passed.

#[path = "tests/common/parts.rs"]
#[allow(dead_code)]
mod parts;

fn main() {
    for part in parts::PARTS {
        println!("cargo::rustc-check-cfg=cfg({})", part.cfg);
        // A part opledger was built without (a cargo feature off) is as good as missing.
        let built = part.feature.is_none_or(|f| {
            std::env::var_os(format!("CARGO_FEATURE_{}", f.to_uppercase())).is_some()
        });
        if built && (part.found)() {
            println!("cargo::rustc-cfg={}", part.cfg);
        }
    }
    for var in parts::INPUTS {
        println!("cargo::rerun-if-env-changed={var}");
    }
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=tests/common/parts.rs");
}
