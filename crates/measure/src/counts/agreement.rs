//! How a side's counted DRAM traffic stands against its ledger.

use super::{CacheModel, Counts, CountsEngine};
use crate::ledger::VariantLedger;
use serde::{Deserialize, Serialize};

/// How a side's simulated DRAM traffic stands against its ledger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LedgerAgreement {
    /// Every tensor moves once and is at least four times the last level: reads and writes
    /// each within ±5% of the ledger (`agrees`), with the measured/ledger ratios.
    Streaming {
        read_ratio: f64,
        write_ratio: f64,
        agrees: bool,
    },
    /// The kernel re-reads a tensor by design (tiles): the ledger must be a lower bound
    /// (measured/ledger ≥ 0.95 for reads and writes); the ratio is the kernel's reuse.
    Reuse {
        read_ratio: f64,
        write_ratio: f64,
        agrees: bool,
    },
    /// A user's implementation (a worker) of the variant whose ledger it is set against: the
    /// ledger is what that variant must move at least (measured/ledger ≥ 0.95 for reads and
    /// writes, `agrees`); above it, the ratio is the traffic the implementation adds
    /// (temporaries, extra passes), which is reported, not failed.
    Implementation {
        read_ratio: f64,
        write_ratio: f64,
        agrees: bool,
    },
    /// A tiled kernel whose tiles fit the last level: its ledger, taken with that level as the
    /// reuse cache, predicts its re-reads, so reads and writes are each held within
    /// ±[`TILED_TOLERANCE`] of it (`agrees`) — a flash side moving as much as standard does not.
    Tiled {
        read_ratio: f64,
        write_ratio: f64,
        agrees: bool,
    },
    /// A tiled kernel whose tiles exceed the last level: every tile re-reads from memory, the
    /// ledger's prediction (and the IO saving it claims) does not hold. Never agrees.
    TilesExceedCache {
        tile_bytes: u64,
        ll_bytes: u64,
        read_ratio: f64,
        write_ratio: f64,
    },
    /// A tiled kernel whose working set (tiles and the operands they re-read) comes within a
    /// quarter of the last level without exceeding it: whether its re-reads hit the cache is up
    /// to the cache's replacement, which the ledger does not model. Not compared.
    NearCache {
        working_set_bytes: u64,
        ll_bytes: u64,
        read_ratio: f64,
        write_ratio: f64,
    },
    /// Tensors smaller than four times the last level carry more than 1% of the side's
    /// traffic: they may stay in the cache, and the ledger (which assumes they do not) is not
    /// what memory sees.
    CacheResident {
        /// The smallest such tensor, by its ledger name (empty in results written before the
        /// name was recorded).
        #[serde(default)]
        smallest_tensor: String,
        smallest_tensor_bytes: u64,
        ll_bytes: u64,
    },
}

/// Fraction within which a streaming side's DRAM bytes must match its ledger.
pub const STREAMING_TOLERANCE: f64 = 0.05;
/// Largest share of a side's ledger traffic that tensors small enough to stay cached may have
/// while the side is still judged as streaming.
pub const SMALL_TENSOR_SHARE: f64 = 0.01;
/// Least measured/ledger ratio of a side that re-reads by design.
pub const REUSE_FLOOR: f64 = 0.95;
/// Fraction within which a tiled side's DRAM reads and writes must each match its ledger where
/// its tiles fit the last level: the flash kernel read ×0.86–×1.01 and wrote ×0.99–×1.01 of its
/// ledger at N = 512–2048 (d = 64, a 1 MiB last level; docs/counts.md), the smallest size the
/// furthest (its packed K and V are served by the cache in part).
pub const TILED_TOLERANCE: f64 = 0.15;

impl LedgerAgreement {
    /// Whether the side holds up against its ledger (`None`: not compared).
    pub fn agrees(&self) -> Option<bool> {
        match self {
            LedgerAgreement::Streaming { agrees, .. }
            | LedgerAgreement::Reuse { agrees, .. }
            | LedgerAgreement::Tiled { agrees, .. }
            | LedgerAgreement::Implementation { agrees, .. } => Some(*agrees),
            LedgerAgreement::TilesExceedCache { .. } => Some(false),
            LedgerAgreement::CacheResident { .. } | LedgerAgreement::NearCache { .. } => None,
        }
    }

    /// Compares a user's implementation's counts `c` with the ledger of the variant it
    /// implements: [`LedgerAgreement::of`], where every side that is compared at all has the
    /// ledger as a lower bound.
    pub fn of_implementation(
        ledger: &VariantLedger,
        c: &Counts,
        model: &CacheModel,
    ) -> LedgerAgreement {
        match LedgerAgreement::of(ledger, c, model) {
            LedgerAgreement::Streaming {
                read_ratio,
                write_ratio,
                ..
            }
            | LedgerAgreement::Reuse {
                read_ratio,
                write_ratio,
                ..
            }
            | LedgerAgreement::Tiled {
                read_ratio,
                write_ratio,
                ..
            } => {
                let write: u64 = ledger.movements.iter().map(|m| m.bytes * m.writes).sum();
                LedgerAgreement::Implementation {
                    read_ratio,
                    write_ratio,
                    agrees: read_ratio >= REUSE_FLOOR && (write == 0 || write_ratio >= REUSE_FLOOR),
                }
            }
            other => other,
        }
    }

    /// [`LedgerAgreement::of`] judged on the reads alone, for counts whose DRAM writes read
    /// low (a GPU's: dirty lines still in its L2 when a launch ends are written back outside
    /// it). Both ratios are kept.
    pub fn of_reads(ledger: &VariantLedger, c: &Counts, model: &CacheModel) -> LedgerAgreement {
        match LedgerAgreement::of(ledger, c, model) {
            LedgerAgreement::Streaming {
                read_ratio,
                write_ratio,
                ..
            } => LedgerAgreement::Streaming {
                read_ratio,
                write_ratio,
                agrees: (read_ratio - 1.0).abs() <= STREAMING_TOLERANCE,
            },
            LedgerAgreement::Reuse {
                read_ratio,
                write_ratio,
                ..
            } => LedgerAgreement::Reuse {
                read_ratio,
                write_ratio,
                agrees: read_ratio >= REUSE_FLOOR,
            },
            LedgerAgreement::Tiled {
                read_ratio,
                write_ratio,
                ..
            } => LedgerAgreement::Tiled {
                read_ratio,
                write_ratio,
                agrees: (read_ratio - 1.0).abs() <= TILED_TOLERANCE,
            },
            other => other,
        }
    }

    /// Compares `c` with `ledger` on `model`.
    pub fn of(ledger: &VariantLedger, c: &Counts, model: &CacheModel) -> LedgerAgreement {
        let read: u64 = ledger.movements.iter().map(|m| m.bytes * m.reads).sum();
        let write: u64 = ledger.movements.iter().map(|m| m.bytes * m.writes).sum();
        let ratio = |measured: u64, predicted: u64| measured as f64 / predicted.max(1) as f64;
        let (read_ratio, write_ratio) = (
            ratio(c.dram_read_bytes, read),
            ratio(c.dram_write_bytes, write),
        );
        // Measured within `tolerance` of the ledger (nothing predicted: nothing to hold).
        let near =
            |r: f64, predicted: u64, tolerance: f64| predicted == 0 || (r - 1.0).abs() <= tolerance;
        // A tiled kernel's ledger is taken with the last level as its reuse cache: where the
        // tiles fit, it predicts the re-reads whatever the tensors' sizes (a cold call reads
        // each input once); where they do not, it predicts nothing.
        if let Some(tile_bytes) = ledger.tile_bytes {
            if tile_bytes > model.ll.bytes {
                return LedgerAgreement::TilesExceedCache {
                    tile_bytes,
                    ll_bytes: model.ll.bytes,
                    read_ratio,
                    write_ratio,
                };
            }
            if let Some(working_set_bytes) = ledger.near_cache_bytes {
                return LedgerAgreement::NearCache {
                    working_set_bytes,
                    ll_bytes: model.ll.bytes,
                    read_ratio,
                    write_ratio,
                };
            }
            return LedgerAgreement::Tiled {
                read_ratio,
                write_ratio,
                agrees: near(read_ratio, read, TILED_TOLERANCE)
                    && near(write_ratio, write, TILED_TOLERANCE),
            };
        }
        // Tensors under four times the last level may stay in it. Where their traffic is a
        // sliver of the side's (a bias or a norm's weight beside 256 MiB rows), they cannot
        // move the total beyond the tolerance, and the side is still judged as streaming.
        let small = |m: &&crate::ledger::Movement| m.bytes < 4 * model.ll.bytes;
        let small_traffic: u64 = ledger
            .movements
            .iter()
            .filter(small)
            .map(|m| m.traffic_bytes())
            .sum();
        let smallest = ledger
            .movements
            .iter()
            .filter(small)
            .min_by_key(|m| m.bytes);
        // Cache-resident first: re-reads of a tensor that fits are served by the cache.
        if let Some(smallest) = smallest {
            if small_traffic as f64 > SMALL_TENSOR_SHARE * ledger.bytes_moved().max(1) as f64 {
                return LedgerAgreement::CacheResident {
                    smallest_tensor: smallest.tensor.clone(),
                    smallest_tensor_bytes: smallest.bytes,
                    ll_bytes: model.ll.bytes,
                };
            }
        }
        if ledger.movements.iter().any(|m| m.reads > 1 || m.writes > 1) {
            return LedgerAgreement::Reuse {
                read_ratio,
                write_ratio,
                agrees: read_ratio >= REUSE_FLOOR && (write == 0 || write_ratio >= REUSE_FLOOR),
            };
        }
        LedgerAgreement::Streaming {
            read_ratio,
            write_ratio,
            agrees: near(read_ratio, read, STREAMING_TOLERANCE)
                && near(write_ratio, write, STREAMING_TOLERANCE),
        }
    }
}

/// The tile sizes a counted side's ledger is taken with under `engine`: a GPU's kernels', or
/// the CPU's with the model's last level as the cache that serves re-reads (the ledger's reuse
/// cache, as a GPU's L2 is).
pub fn ledger_tiling(engine: &CountsEngine) -> crate::ledger::Tiling {
    crate::device::DeviceKind::counted_on(engine.gpu.is_some())
        .counts_tiling(engine.cache_model.ll.bytes)
}

/// How a counted side stands against its ledger, the one derivation (a run's, and an
/// archive's audit from the counts it holds): a GPU's counts on their reads, a user's
/// implementation with the ledger as a lower bound, a built-in kernel as [`LedgerAgreement::of`].
pub fn agreement(
    engine: &CountsEngine,
    implemented: bool,
    ledger: &VariantLedger,
    c: &Counts,
) -> LedgerAgreement {
    let model = &engine.cache_model;
    if engine.gpu.is_some() {
        LedgerAgreement::of_reads(ledger, c, model)
    } else if implemented {
        LedgerAgreement::of_implementation(ledger, c, model)
    } else {
        LedgerAgreement::of(ledger, c, model)
    }
}

/// The compulsory traffic of a side whose ledger is `ledger` and whose output is `output`:
/// its inputs (tensors it reads and never writes) read once, its output written once; `None`
/// where a tensor of them fits in the model's last level (it might be judged on a warm cache).
pub fn compulsory_bytes(
    ledger: &VariantLedger,
    output: &str,
    model: &CacheModel,
) -> Option<(u64, u64)> {
    let fits = ledger
        .movements
        .iter()
        .filter(|m| (m.reads > 0 && m.writes == 0) || m.tensor == output)
        .any(|m| m.bytes <= model.ll.bytes);
    if fits {
        return None;
    }
    ledger.compulsory_bytes(output)
}
