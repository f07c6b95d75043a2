//! The optional parts the tests use (`tests/common/parts.rs`): a test whose part is missing is
//! compiled as ignored, with the part's name (the build script sets `has_<part>`). Here, what CI
//! requires (`OPLEDGER_REQUIRE_<PART>`) must have been found, so a required part cannot go
//! missing while its tests pass as ignored; and what the build found must still be there.

use crate::common::parts::PARTS;

/// Whether the build found the part named by `cfg`.
fn built_with(cfg: &str) -> bool {
    match cfg {
        "has_valgrind" => cfg!(has_valgrind),
        "has_postgres" => cfg!(has_postgres),
        "has_chromium" => cfg!(has_chromium),
        "has_nvrtc" => cfg!(has_nvrtc),
        "has_cudasim" => cfg!(has_cudasim),
        "has_python" => cfg!(has_python),
        "has_numpy" => cfg!(has_numpy),
        "has_cc" => cfg!(has_cc),
        "has_nvcc" => cfg!(has_nvcc),
        "has_actionlint" => cfg!(has_actionlint),
        "has_act" => cfg!(has_act),
        "has_root" => cfg!(has_root),
        other => panic!("{other} is a part this test does not know: add its arm"),
    }
}

#[test]
fn every_part_ci_requires_was_found() {
    let missing: Vec<String> = PARTS
        .iter()
        .filter(|p| {
            std::env::var_os(p.require).is_some() && feature_on(p.feature) && !built_with(p.cfg)
        })
        .map(|p| format!("{} ({} is set): {}", p.cfg, p.require, p.how))
        .collect();
    assert!(
        missing.is_empty(),
        "parts required here but not found when the tests were built: {missing:#?}"
    );
}

/// Whether this build has the cargo feature a part needs.
fn feature_on(feature: Option<&str>) -> bool {
    match feature {
        None => true,
        Some("cuda") => cfg!(feature = "cuda"),
        Some("postgres") => cfg!(feature = "postgres"),
        Some(other) => panic!("{other} is a feature this test does not know: add its arm"),
    }
}

#[test]
fn what_the_build_found_is_what_is_here_now() {
    let changed: Vec<String> = PARTS
        .iter()
        .filter(|p| feature_on(p.feature) && (p.found)() != built_with(p.cfg))
        .map(|p| {
            format!(
                "{}: built {}, now {}",
                p.cfg,
                built_with(p.cfg),
                (p.found)()
            )
        })
        .collect();
    assert!(
        changed.is_empty(),
        "the optional parts changed since the tests were built (`touch build.rs` and build \
         again, so that the tests they need are run or marked ignored): {changed:#?}"
    );
}
