//! Plain-text renderings for the terminal: the IO ledger of a spec with its roofline on the
//! datasheet devices (`opledger ledger`), and the seed's roofline worked through
//! (`opledger roofline`).

use crate::baseline::BaselineFile;
use crate::device::profiles;
use crate::format::thousands;
use crate::ledger::roofline as roofline_of;
use crate::spec;

/// The seed's roofline, with units spelled out (the seed's docstring says ms; it is seconds).
pub fn roofline(peak_tflops: f64, bw_gbps: f64, flops: f64, bytes: f64, label: &str) -> String {
    let r = roofline_of(peak_tflops * 1e12, bw_gbps * 1e9, flops, bytes);
    format!(
        "roofline on {label}: peak {peak_tflops} TFLOP/s, bandwidth {bw_gbps} GB/s\n\
         compute time  FLOPs/Peak = {flops:.3e} / {:.3e} FLOP/s = {:.6e} s ({:.3} ms)\n\
         memory time   Bytes/BW   = {bytes:.3e} / {:.3e} B/s    = {:.6e} s ({:.3} ms)\n\
         predicted     T = max(...) = {:.6e} s = {:.3} ms\n\
         bound         {} (AI {:.2} FLOP/byte vs ridge {:.2} FLOP/byte)\n",
        peak_tflops * 1e12,
        r.compute_secs,
        r.compute_secs * 1e3,
        bw_gbps * 1e9,
        r.memory_secs,
        r.memory_secs * 1e3,
        r.secs,
        r.secs * 1e3,
        r.bound.name(),
        r.intensity,
        r.ridge
    )
}

/// The ledger of a spec as text tables (exact counts, with thousands separators).
pub fn ledger(s: &spec::Spec, tiling: crate::ledger::Tiling) -> String {
    let l = s
        .workload
        .ledger(s.variants.before, s.variants.after, &tiling);
    let mut t = format!("{} — {}\n{}\n\n", s.name, s.title, s.workload.describe());
    t.push_str(&format!(
        "{:<10} {:<16} {:>16} {:>6} {:>6} {:>16}\n",
        "variant", "tensor", "bytes", "reads", "writes", "traffic"
    ));
    for v in [&l.before, &l.after] {
        for m in &v.movements {
            t.push_str(&format!(
                "{:<10} {:<16} {:>16} {:>6} {:>6} {:>16}\n",
                v.variant.name(),
                m.tensor,
                thousands(m.bytes),
                m.reads,
                m.writes,
                thousands(m.traffic_bytes())
            ));
        }
    }
    t.push_str(&format!(
        "\n{:<10} {:>16} {:>16} {:>12} {:>9}\n",
        "variant", "FLOPs", "bytes moved", "AI FLOP/B", "launches"
    ));
    for v in [&l.before, &l.after] {
        t.push_str(&format!(
            "{:<10} {:>16} {:>16} {:>12.4} {:>9}\n",
            v.variant.name(),
            thousands(v.flops),
            thousands(v.bytes_moved()),
            v.intensity(),
            v.launches
        ));
    }
    t.push_str(&format!(
        "io_saving  {:.2}% (1 - bytes(after)/bytes(before))\n\n",
        l.io_saving() * 100.0
    ));
    let f32_work = true;
    t.push_str(&format!(
        "{:<24} {:>12} {:>12} {:>10} {:>10}\n",
        "predicted on (datasheet)", "before", "after", "bound", "saving"
    ));
    for p in profiles() {
        let pk = p.peak_flops_per_sec(f32_work);
        let rb = roofline_of(
            pk,
            p.bw_bytes_per_sec(),
            l.before.flops as f64,
            l.before.bytes_moved() as f64,
        );
        let ra = roofline_of(
            pk,
            p.bw_bytes_per_sec(),
            l.after.flops as f64,
            l.after.bytes_moved() as f64,
        );
        t.push_str(&format!(
            "{:<24} {:>9.3} ms {:>9.3} ms {:>10} {:>9.1}%\n",
            p.name,
            rb.secs * 1e3,
            ra.secs * 1e3,
            ra.bound.name(),
            (1.0 - ra.secs / rb.secs) * 100.0
        ));
    }
    t.push('\n');
    t
}

/// A few lines that say what a baseline claims; diffed when accepting.
pub fn baseline_summary(b: &BaselineFile) -> String {
    let ms = |s: f64| s * 1e3;
    let mut t = format!(
        "spec: {}\ndevice: {}\nworkload: {}\nrecorded: {} ({})\nbefore median: {:.3} ms (95% CI {:.3} .. {:.3}), n={}\nafter median: {:.3} ms (95% CI {:.3} .. {:.3}), n={}\n",
        b.spec,
        b.device.key,
        serde_json::to_string(&b.workload).unwrap_or_default(),
        b.recorded_utc,
        b.git_sha,
        ms(b.before.median_secs),
        ms(b.before.ci_lo_secs),
        ms(b.before.ci_hi_secs),
        b.before.n,
        ms(b.after.median_secs),
        ms(b.after.ci_lo_secs),
        ms(b.after.ci_hi_secs),
        b.after.n,
    );
    if let Some(s) = b.time_saving {
        t.push_str(&format!(
            "time saving: {:.1}% (95% CI {:.1}% .. {:.1}%)\n",
            s.point * 100.0,
            s.lo * 100.0,
            s.hi * 100.0
        ));
    }
    t.push_str(&format!(
        "ceilings: triad {:.2} GB/s, FMA {:.1} GFLOP/s\n",
        b.ceilings.triad_bytes_per_sec / 1e9,
        b.ceilings.fma_flops_per_sec / 1e9
    ));
    t
}

/// Unified diff of the summaries of the old and new baseline.
pub fn baseline_diff(
    path: &std::path::Path,
    old: Option<&BaselineFile>,
    new: &BaselineFile,
) -> String {
    let old_text = old.map(baseline_summary).unwrap_or_default();
    let new_text = baseline_summary(new);
    let name = path.display().to_string();
    similar::TextDiff::from_lines(&old_text, &new_text)
        .unified_diff()
        .header(&format!("{name} (old)"), &format!("{name} (new)"))
        .to_string()
}
