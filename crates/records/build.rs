//! Marks the store's PostgreSQL unit test ignored, with its reason, where no server is named
//! (`has_postgres`, found as the integration tests find it: `tests/common/parts.rs`).

#[path = "../../tests/common/parts.rs"]
#[allow(dead_code)]
mod parts;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(has_postgres)");
    if std::env::var_os("CARGO_FEATURE_POSTGRES").is_some() && parts::postgres() {
        println!("cargo::rustc-cfg=has_postgres");
    }
    println!("cargo::rerun-if-env-changed=OPLEDGER_TEST_POSTGRES");
    println!("cargo::rerun-if-changed=build.rs");
}
