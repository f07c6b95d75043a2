//! A GPU's state while a spec's samples ran: its clocks, power, temperature and what was holding
//! its clocks down (the driver's clock-event, formerly "throttle", reasons). Read from
//! `nvidia-smi --query-gpu` by the CUDA backend; parsed here, where the numbers get their units.

use serde::{Deserialize, Serialize};

/// What the driver says limits the clocks (NVML's clock-event reasons, one bit each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ClockLimit {
    /// Nothing runs: the clocks are dropping to idle.
    GpuIdle,
    /// Application clocks set lower (`nvidia-smi -ac`).
    ApplicationsClocks,
    /// The power limit: software scaling the clocks down.
    SwPowerCap,
    /// Hardware slowdown (temperature, power brake, a power spike), by half or more.
    HwSlowdown,
    /// Held at the slowest GPU of a sync-boost group.
    SyncBoost,
    /// Software thermal slowdown.
    SwThermal,
    /// Hardware thermal slowdown.
    HwThermal,
    /// An external power brake.
    HwPowerBrake,
    /// The display's clock setting.
    DisplayClocks,
}

impl ClockLimit {
    const BITS: [(u64, ClockLimit); 9] = [
        (0x1, ClockLimit::GpuIdle),
        (0x2, ClockLimit::ApplicationsClocks),
        (0x4, ClockLimit::SwPowerCap),
        (0x8, ClockLimit::HwSlowdown),
        (0x10, ClockLimit::SyncBoost),
        (0x20, ClockLimit::SwThermal),
        (0x40, ClockLimit::HwThermal),
        (0x80, ClockLimit::HwPowerBrake),
        (0x100, ClockLimit::DisplayClocks),
    ];

    /// The reasons a mask holds (unknown bits left out).
    pub fn of_mask(mask: u64) -> Vec<ClockLimit> {
        Self::BITS
            .iter()
            .filter(|(bit, _)| mask & bit != 0)
            .map(|(_, r)| *r)
            .collect()
    }

    /// The reason's name as results.json writes it (`sw_power_cap`).
    pub fn name(self) -> &'static str {
        match self {
            ClockLimit::GpuIdle => "gpu_idle",
            ClockLimit::ApplicationsClocks => "applications_clocks",
            ClockLimit::SwPowerCap => "sw_power_cap",
            ClockLimit::HwSlowdown => "hw_slowdown",
            ClockLimit::SyncBoost => "sync_boost",
            ClockLimit::SwThermal => "sw_thermal",
            ClockLimit::HwThermal => "hw_thermal",
            ClockLimit::HwPowerBrake => "hw_power_brake",
            ClockLimit::DisplayClocks => "display_clocks",
        }
    }

    /// Whether the reason slows a running kernel down (not idle, not a setting someone chose).
    pub fn slows(self) -> bool {
        matches!(
            self,
            ClockLimit::SwPowerCap
                | ClockLimit::HwSlowdown
                | ClockLimit::SwThermal
                | ClockLimit::HwThermal
                | ClockLimit::HwPowerBrake
        )
    }
}

/// One reading of the GPU's state (each figure `None` where the driver says `[N/A]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeviceState {
    pub sm_clock_mhz: Option<f64>,
    pub max_sm_clock_mhz: Option<f64>,
    pub memory_clock_mhz: Option<f64>,
    pub power_watts: Option<f64>,
    pub temperature_c: Option<f64>,
    pub clock_limits: Vec<ClockLimit>,
}

/// The fields `nvidia-smi --query-gpu` is asked for, in [`DeviceState::parse`]'s order; the last
/// is named `clocks_event_reasons.active` by drivers from 2023 on and
/// `clocks_throttle_reasons.active` before.
pub const QUERY_FIELDS: [&str; 5] = [
    "clocks.sm",
    "clocks.max.sm",
    "clocks.mem",
    "power.draw",
    "temperature.gpu",
];

impl DeviceState {
    /// One line of `--format=csv,noheader,nounits`: `1980, 1980, 3201, 612.45, 58, 0x0000000000000004`.
    pub fn parse(line: &str) -> Result<DeviceState, String> {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if fields.len() != QUERY_FIELDS.len() + 1 {
            return Err(format!(
                "expected {} comma-separated values, got {}: `{line}`",
                QUERY_FIELDS.len() + 1,
                fields.len()
            ));
        }
        let number = |i: usize| -> Result<Option<f64>, String> {
            let f = fields[i];
            if f.starts_with('[') || f.is_empty() {
                return Ok(None);
            }
            f.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .map(Some)
                .ok_or_else(|| format!("{}: `{f}` is not a number", QUERY_FIELDS[i]))
        };
        let mask = fields[5];
        let clock_limits = if mask.starts_with('[') {
            Vec::new()
        } else {
            let hex = mask.trim_start_matches("0x").trim_start_matches("0X");
            let bits = u64::from_str_radix(hex, 16)
                .map_err(|_| format!("clock event reasons: `{mask}` is not a hex mask"))?;
            ClockLimit::of_mask(bits)
        };
        Ok(DeviceState {
            sm_clock_mhz: number(0)?,
            max_sm_clock_mhz: number(1)?,
            memory_clock_mhz: number(2)?,
            power_watts: number(3)?,
            temperature_c: number(4)?,
            clock_limits,
        })
    }

    /// The reading's figures, each with its unit: `SM clock 1755 of 1980 MHz`, `698 W`, `71 °C`
    /// (the clock `n/a` where the driver did not say; power and temperature left out then).
    pub fn figures(&self) -> Vec<String> {
        let clock = match (self.sm_clock_mhz, self.max_sm_clock_mhz) {
            (Some(now), Some(max)) => format!("SM clock {now:.0} of {max:.0} MHz"),
            (Some(now), None) => format!("SM clock {now:.0} MHz"),
            (None, _) => "SM clock n/a".into(),
        };
        std::iter::once(clock)
            .chain(self.power_watts.map(|w| format!("{w:.0} W")))
            .chain(self.temperature_c.map(|c| format!("{c:.0} °C")))
            .collect()
    }

    /// The reasons that slowed the GPU down while it ran.
    pub fn slowed_by(&self) -> Vec<ClockLimit> {
        self.clock_limits
            .iter()
            .copied()
            .filter(|r| r.slows())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reading_parses_with_its_units_and_reasons() {
        let s = DeviceState::parse("1755, 1980, 3201, 698.12, 71, 0x0000000000000024").unwrap();
        assert_eq!(s.sm_clock_mhz, Some(1755.0));
        assert_eq!(s.max_sm_clock_mhz, Some(1980.0));
        assert_eq!(s.power_watts, Some(698.12));
        assert_eq!(
            s.clock_limits,
            [ClockLimit::SwPowerCap, ClockLimit::SwThermal]
        );
        assert_eq!(s.slowed_by(), s.clock_limits);
        assert_eq!(s.figures(), ["SM clock 1755 of 1980 MHz", "698 W", "71 °C"]);
        // Every reason's name is the one results.json writes.
        for r in ClockLimit::of_mask(0x1ff) {
            assert_eq!(serde_json::to_value(r).unwrap(), r.name());
        }
        // Not available on this GPU, and idle: nothing slowed a kernel.
        let s = DeviceState::parse("345, 1980, [N/A], [N/A], 30, 0x0000000000000001").unwrap();
        assert_eq!((s.memory_clock_mhz, s.power_watts), (None, None));
        assert_eq!(s.clock_limits, [ClockLimit::GpuIdle]);
        assert!(s.slowed_by().is_empty());
        for bad in ["1, 2, 3", "a, 1, 1, 1, 1, 0x0", "1, 1, 1, 1, 1, zz"] {
            assert!(DeviceState::parse(bad).is_err(), "{bad}");
        }
    }
}
