//! The cache model the simulator counts on: its levels' sizes, associativity and lines (a
//! run's, or a spec's own `measure.counts_cache_model`).

use serde::{Deserialize, Serialize};

/// One simulated cache: size, associativity, line size (Valgrind's `--D1=size,assoc,line`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CacheLevel {
    pub bytes: u64,
    pub ways: u64,
    pub line_bytes: u64,
}

impl CacheLevel {
    /// `32k8w64` (size, ways, line bytes): a folder-name-safe form for a baseline key.
    pub fn slug(&self) -> String {
        let size = if self.bytes.is_multiple_of(1 << 20) {
            format!("{}m", self.bytes >> 20)
        } else if self.bytes.is_multiple_of(1 << 10) {
            format!("{}k", self.bytes >> 10)
        } else {
            self.bytes.to_string()
        };
        format!("{size}{}w{}", self.ways, self.line_bytes)
    }

    /// `size,assoc,line`, as Valgrind takes it.
    pub fn arg(&self) -> String {
        format!("{},{},{}", self.bytes, self.ways, self.line_bytes)
    }
}

/// The caches the simulator models: the same on every machine, so that counts compare across
/// runners (left to itself Valgrind copies the host's last level, which differs from VM to VM).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CacheModel {
    pub i1: CacheLevel,
    pub d1: CacheLevel,
    pub ll: CacheLevel,
}

impl Default for CacheModel {
    /// A common desktop-class geometry: 32 KiB 8-way L1s and an 8 MiB 16-way last level, 64-byte
    /// lines.
    fn default() -> Self {
        let l1 = CacheLevel {
            bytes: 32 << 10,
            ways: 8,
            line_bytes: 64,
        };
        CacheModel {
            i1: l1,
            d1: l1,
            ll: CacheLevel {
                bytes: 8 << 20,
                ways: 16,
                line_bytes: 64,
            },
        }
    }
}

impl CacheModel {
    /// A GPU's model: its L2 of `l2_bytes` as the last level (32-byte sectors, its ways not
    /// modelled), where the ledger's "fits in the cache" is decided; the first levels are not
    /// modelled.
    pub fn of_gpu(l2_bytes: u64) -> CacheModel {
        let l1 = CacheModel::default().d1;
        CacheModel {
            i1: l1,
            d1: l1,
            ll: CacheLevel {
                bytes: l2_bytes,
                ways: 0,
                line_bytes: 32,
            },
        }
    }

    /// `I1=32768,8,64 D1=32768,8,64 LL=8388608,16,64`.
    pub fn describe(&self) -> String {
        format!(
            "I1={} D1={} LL={}",
            self.i1.arg(),
            self.d1.arg(),
            self.ll.arg()
        )
    }

    /// Parses [`CacheModel::describe`]'s form (`LL=…` alone changes the last level only).
    pub fn parse(text: &str) -> Result<CacheModel, String> {
        let mut m = CacheModel::default();
        for part in text.split_whitespace() {
            let (name, value) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?}: expected I1=, D1= or LL=SIZE,WAYS,LINE"))?;
            let nums: Vec<u64> = value
                .split(',')
                .map(|v| v.trim().parse::<u64>())
                .collect::<Result<_, _>>()
                .map_err(|_| format!("{part:?}: expected three whole numbers SIZE,WAYS,LINE"))?;
            let [bytes, ways, line_bytes] = nums[..] else {
                return Err(format!("{part:?}: expected three numbers SIZE,WAYS,LINE"));
            };
            let level = CacheLevel {
                bytes,
                ways,
                line_bytes,
            };
            // Valgrind's own rules (3.19's `parse_cache_opt` and `check_cache`): each number a
            // signed 32-bit int, powers of two for the line and the set count, more than one line.
            // A model it would refuse is bad input here, not a counted side that fails later.
            if [bytes, ways, line_bytes]
                .iter()
                .any(|&v| v > i32::MAX as u64)
            {
                return Err(format!(
                    "{part:?}: Valgrind takes each number up to {} (a last level of at most 1 GiB)",
                    i32::MAX
                ));
            }
            let sets = ways
                .checked_mul(line_bytes)
                .and_then(|set_bytes| bytes.checked_div(set_bytes))
                .unwrap_or(0);
            if ways == 0
                || !line_bytes.is_power_of_two()
                || line_bytes < 16
                || sets == 0
                || !sets.is_power_of_two()
                || sets * ways * line_bytes != bytes
            {
                return Err(format!(
                    "{part:?}: the size must be ways x line x a power-of-two number of sets, the line a power of two of at least 16 bytes"
                ));
            }
            if bytes <= line_bytes {
                return Err(format!(
                    "{part:?}: a cache of one line is refused by Valgrind: give a size above the line"
                ));
            }
            match name {
                "I1" => m.i1 = level,
                "D1" => m.d1 = level,
                "LL" => m.ll = level,
                _ => return Err(format!("{part:?}: expected I1=, D1= or LL=")),
            }
        }
        Ok(m)
    }
}
