//! The ledger and roofline commands: exact bytes, the seed's roofline, tilings.

use crate::common;
use common::{bin, fixture, text};
use std::path::Path;

#[test]
fn ledger_prints_exact_bytes_of_bias_gelu_8192x4096() {
    let o = bin()
        .arg("ledger")
        .arg(fixture("good/bias-gelu-8192x4096.yaml"))
        .output()
        .unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    // unfused: 4 tensor crossings + bias; fused: 2 + bias.
    assert!(out.contains("536,887,296"), "{out}");
    assert!(out.contains("268,451,840"), "{out}");
    assert!(out.contains("io_saving  50.00%"), "{out}");
}

#[test]
fn roofline_reproduces_the_seed_example_in_seconds() {
    let o = bin()
        .args([
            "roofline",
            "--peak-tflops",
            "362",
            "--bw-gbps",
            "864",
            "--flops",
            "2e12",
            "--bytes",
            "8e9",
        ])
        .output()
        .unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("= 9.259259e-3 s = 9.259 ms"), "{out}");
    assert!(out.contains("bound         bandwidth"), "{out}");
    let o = bin()
        .args([
            "roofline", "--device", "l40s", "--flops", "2e15", "--bytes", "8e9",
        ])
        .output()
        .unwrap();
    assert!(text(&o).contains("bound         compute"), "{}", text(&o));
    let o = bin()
        .args([
            "roofline", "--device", "nope", "--flops", "1", "--bytes", "1",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn ledger_follows_the_chosen_tiling_and_l2() {
    let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("specs/flash-attention.yaml");
    let flash_bytes = |args: &[&str]| -> (Option<i32>, String) {
        let o = bin().arg("ledger").arg(&spec).args(args).output().unwrap();
        let out = text(&o);
        // The first summary line of the flash variant (N = 512): "flash  FLOPs  bytes ...".
        let line = out
            .lines()
            .find(|l| l.starts_with("flash ") && l.split_whitespace().count() == 5)
            // Printed with thousands separators: read back as a number.
            .map(|l| l.split_whitespace().nth(2).unwrap().replace(',', ""))
            .unwrap_or(out);
        (o.status.code(), line)
    };
    // N = 512, 2 heads, d = 128, f32: Q, K, V, O are 524288 bytes each.
    // CPU: Q, K, V read once (K and V to pack them), the packed K and V written once and
    // re-read by each of the two 256-row query tiles, O written once, and one worker's tiles
    // (packed Q 256×128, the score tile and packed P 256×256) written once.
    let tiles = (256 * 128 + 2 * 256 * 256) * 4;
    assert_eq!(
        flash_bytes(&[]),
        (
            Some(0),
            (3 * 524288 + 2 * (1 + 2) * 524288 + 524288 + tiles).to_string()
        )
    );
    // CUDA without L2: K and V once per 32-row tile (16 tiles).
    assert_eq!(
        flash_bytes(&["--tiling", "cuda"]),
        (Some(0), (2 * 524288 + 2 * 16 * 524288).to_string())
    );
    // CUDA with a 60 MiB L2: the re-reads are served by it.
    assert_eq!(
        flash_bytes(&["--tiling", "cuda", "--l2-mib", "60"]),
        (Some(0), (4 * 524288).to_string())
    );
    let o = bin()
        .arg("ledger")
        .arg(&spec)
        .args(["--l2-mib", "60"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains("use it with --tiling cuda"),
        "{}",
        text(&o)
    );
}
