//! The GPU spill gauge behind one trait: on Windows, PDH's
//! `\GPU Process Memory(pid_<pid>_luid_..._phys_<n>)\Dedicated Usage` and
//! `Shared Usage` (English counter names, gauges), read on the adapter that
//! holds most of the child's *dedicated* memory, as the spec says
//! (`main_adapter`: another adapter's instance, an integrated GPU the
//! process touched, is not this child's spill, however much Shared it
//! shows). NVML has no per-process memory under WDDM, and Linux has no
//! spill at all (an allocation that does not fit fails), so elsewhere there
//! is no provider.

/// The child's GPU memory on one adapter, bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdapterUsage {
    /// Dedicated Usage: on the card.
    pub dedicated: u64,
    /// Shared Usage: in system memory the card reaches (the spill).
    pub shared: u64,
}

/// A source of the child's GPU memory.
pub trait VramProvider: Send {
    /// The child's usage on the adapter holding most of its memory, or why
    /// it cannot be read.
    fn usage(&mut self, pid: u32) -> Result<AdapterUsage, String>;
}

// `adapter_of` and `main_adapter` are Windows' reading; compiled and tested
// everywhere.
/// The adapter of a `GPU Process Memory` instance name
/// (`pid_1234_luid_0x00000000_0x0000D1C3_phys_0` is `luid_0x00000000_0x0000D1C3_phys_0`).
#[cfg_attr(not(windows), allow(dead_code))]
pub fn adapter_of(instance: &str) -> Option<&str> {
    let at = instance.find("luid_")?;
    Some(&instance[at..])
}

/// The usage on the adapter holding most of the child's dedicated memory
/// (the discrete card on an Optimus laptop, whose integrated adapter may
/// show more Shared), ties broken by Shared (an integrated adapter alone
/// has no dedicated memory), from each counter's instances; `None` without
/// any.
#[cfg_attr(not(windows), allow(dead_code))]
pub fn main_adapter(dedicated: &[(String, u64)], shared: &[(String, u64)]) -> Option<AdapterUsage> {
    let mut by: Vec<(&str, AdapterUsage)> = Vec::new();
    let readings = dedicated
        .iter()
        .map(|(n, b)| (n.as_str(), *b, 0))
        .chain(shared.iter().map(|(n, b)| (n.as_str(), 0, *b)));
    for (name, d, s) in readings {
        let Some(a) = adapter_of(name) else { continue };
        match by.iter_mut().find(|(k, _)| *k == a) {
            Some((_, u)) => {
                u.dedicated += d;
                u.shared += s;
            }
            None => by.push((a, AdapterUsage { dedicated: d, shared: s })),
        }
    }
    by.into_iter()
        .max_by_key(|(_, u)| (u.dedicated, u.shared))
        .map(|(_, u)| u)
}

/// The counter path PDH expands to the child's instances, one per adapter:
/// the `_` after the pid keeps `pid_123_...` out of `pid_12_*`.
#[cfg_attr(not(windows), allow(dead_code))]
pub fn process_counter_path(pid: u32, counter: &str) -> String {
    format!("\\GPU Process Memory(pid_{pid}_*)\\{counter}")
}

/// Whether a `GPU Process Memory` instance is `pid`'s: its name starts
/// with `pid_<pid>_`.
#[cfg_attr(not(windows), allow(dead_code))]
pub fn is_instance_of(instance: &str, pid: u32) -> bool {
    instance
        .strip_prefix("pid_")
        .and_then(|rest| rest.strip_prefix(pid.to_string().as_str()))
        .is_some_and(|rest| rest.starts_with('_'))
}

/// The child's usage from each counter's instances as PDH formats them
/// (`PDH_FMT_LARGE`: name and signed bytes): the instances of `pid` alone,
/// a negative value read as zero, on `main_adapter`. The path's wildcard
/// already selects `pid`'s instances; they are checked again here because
/// that glob is PDH's, run only on Windows, and another process's memory
/// read as this child's spill would brake the wrong child.
#[cfg_attr(not(windows), allow(dead_code))]
pub fn process_usage(pid: u32, dedicated: &[(String, i64)], shared: &[(String, i64)]) -> Option<AdapterUsage> {
    let of_pid = |items: &[(String, i64)]| -> Vec<(String, u64)> {
        items
            .iter()
            .filter(|(name, _)| is_instance_of(name, pid))
            .map(|(name, v)| (name.clone(), u64::try_from(*v).unwrap_or(0)))
            .collect()
    };
    main_adapter(&of_pid(dedicated), &of_pid(shared))
}

/// This platform's gauge, if it has one.
pub fn default_provider() -> Option<Box<dyn VramProvider>> {
    #[cfg(windows)]
    {
        Some(Box::new(super::windows_vram::PdhVram))
    }
    #[cfg(not(windows))]
    {
        None
    }
}

/// The engine's spill gauge: this platform's provider with the QA seam
/// (`WARDEN_FORCE_MEMORY_PRESSURE=vram-warning|vram-critical`), read by the
/// CUDA engine itself for its own child (no other actor holds its pid).
pub struct SpillGauge {
    provider: Option<Box<dyn VramProvider>>,
    forced: Option<crate::config::ForcedPressure>,
}

impl std::fmt::Debug for SpillGauge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpillGauge")
            .field("provider", &self.provider.is_some())
            .field("forced", &self.forced)
            .finish()
    }
}

impl SpillGauge {
    /// This platform's gauge with the configured seam.
    pub fn new(forced: Option<crate::config::ForcedPressure>) -> Self {
        Self {
            provider: default_provider(),
            forced,
        }
    }

    /// A gauge over `provider` instead of this platform's, so a test on
    /// Linux can script what Windows' PDH would answer.
    #[cfg(test)]
    pub(crate) fn with_provider(provider: Box<dyn VramProvider>) -> Self {
        Self {
            provider: Some(provider),
            forced: None,
        }
    }

    /// The child's Shared GPU memory. The seam's tiers sit at `healthy`
    /// (`law::cuda::healthy_shared_bytes`) plus the tier, so the spill is
    /// exactly at the tier at any window.
    pub fn read(&mut self, pid: u32, healthy: u64) -> Result<u64, String> {
        use crate::config::ForcedPressure;
        match self.forced {
            Some(ForcedPressure::VramWarning) => return Ok(healthy + crate::law::cuda::SPILL_WARNING_BYTES),
            Some(ForcedPressure::VramCritical) => return Ok(healthy + crate::law::cuda::SPILL_CRITICAL_BYTES),
            _ => {}
        }
        match self.provider.as_mut() {
            Some(p) => p.usage(pid).map(|u| u.shared),
            None => Err("no GPU spill gauge on this platform".into()),
        }
    }

    /// The child's device bytes as the placement weighs them where NVML
    /// has no per-process memory (Windows): Dedicated plus the Shared above
    /// the healthy amount, so a spill at load does not read as a partial
    /// offload; `None` without a provider or a reading.
    pub fn device_bytes(&mut self, pid: u32, healthy: u64) -> Option<u64> {
        let u = self.provider.as_mut()?.usage(pid).ok()?;
        Some(crate::law::cuda::device_bytes_on_spill(u.dedicated, u.shared, healthy))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Instance names as PDH lists them for a process on a laptop with an
    /// integrated and a discrete GPU: the discrete one (most dedicated
    /// memory) wins, its Dedicated and Shared read together.
    #[test]
    fn the_adapter_holding_most_is_the_child_s() {
        let igpu = "pid_4242_luid_0x00000000_0x0000B2C1_phys_0";
        let dgpu = "pid_4242_luid_0x00000000_0x0000D1C3_phys_0";
        assert_eq!(adapter_of(dgpu), Some("luid_0x00000000_0x0000D1C3_phys_0"));
        assert_eq!(adapter_of("pid_4242"), None);
        let dedicated = [(igpu.to_string(), 0), (dgpu.to_string(), 6 << 30)];
        let shared = [(igpu.to_string(), 200 << 20), (dgpu.to_string(), 300 << 20)];
        assert_eq!(
            main_adapter(&dedicated, &shared),
            Some(AdapterUsage {
                dedicated: 6 << 30,
                shared: 300 << 20
            }),
            "not the sum over adapters (500 MiB of Shared), the discrete card's 300"
        );
        // why: the discrete card holds the child's dedicated memory even
        // when the integrated adapter shows more Shared (by Dedicated +
        // Shared, 2 GiB of iGPU Shared would have won over 1.5 GiB)
        let dedicated = [(igpu.to_string(), 0), (dgpu.to_string(), 1 << 30)];
        let shared = [(igpu.to_string(), 2 << 30), (dgpu.to_string(), 512 << 20)];
        assert_eq!(main_adapter(&dedicated, &shared).map(|u| u.dedicated), Some(1 << 30));
        // why: an integrated GPU alone: its Shared is all there is
        let only = [(igpu.to_string(), 1 << 30)];
        assert_eq!(main_adapter(&[], &only).map(|u| u.shared), Some(1 << 30));
        assert_eq!(main_adapter(&[], &[]), None);
    }

    /// The counter path PDH is given: the child's instances and no
    /// other pid's whose digits start the same.
    #[test]
    fn the_counter_path() {
        assert_eq!(
            process_counter_path(1234, "Dedicated Usage"),
            r"\GPU Process Memory(pid_1234_*)\Dedicated Usage"
        );
        // why: without the `_`, pid_12* would also match pid_123's instances
        assert_eq!(process_counter_path(12, "Shared Usage"), r"\GPU Process Memory(pid_12_*)\Shared Usage");
    }

    /// Which instance names are the child's, from names as PDH lists them
    /// under `\GPU Process Memory(*)`.
    #[test]
    fn instances_of_the_child() {
        let rows = [
            ("pid_1234_luid_0x00000000_0x0000D1F2_phys_0", 1234, true),
            // why: another process whose pid starts with the child's digits
            ("pid_12345_luid_0x00000000_0x0000D1F2_phys_0", 1234, false),
            ("pid_123_luid_0x00000000_0x0000D1F2_phys_0", 12, false),
            // why: a pid that ends the child's digits is not the child either
            ("pid_234_luid_0x00000000_0x0000D1F2_phys_0", 1234, false),
            // why: `\GPU Adapter Memory(*)`'s instance: an adapter, no process
            ("luid_0x00000000_0x0000D1F2_phys_0", 1234, false),
            // why: garbage and truncated names are no one's
            ("pid_1234", 1234, false),
            ("pid_", 0, false),
            ("", 1234, false),
            ("PID_1234_luid_0x00000000_0x0000D1F2_phys_0", 1234, false),
            ("pid_0_luid_0x00000000_0x0000D1F2_phys_0", 0, true),
        ];
        for (i, (name, pid, want)) in rows.into_iter().enumerate() {
            assert_eq!(is_instance_of(name, pid), want, "row {i}: {name} of pid {pid}");
        }
    }

    /// The child's usage from both counters' instances as PDH returns
    /// them for the wildcard path, on an Optimus laptop (integrated adapter
    /// 0x0000B2C1, discrete 0x0000D1F2).
    #[test]
    fn usage_from_recorded_instances() {
        let item = |name: &str, v: i64| (name.to_string(), v);
        let (igpu, dgpu) = (
            "pid_1234_luid_0x00000000_0x0000B2C1_phys_0",
            "pid_1234_luid_0x00000000_0x0000D1F2_phys_0",
        );
        let other = "pid_12345_luid_0x00000000_0x0000D1F2_phys_0";
        let usage = |dedicated, shared| Some(AdapterUsage { dedicated, shared });
        #[allow(clippy::type_complexity)] // table rows are wide tuples on purpose
        let rows: [(Vec<(String, i64)>, Vec<(String, i64)>, Option<AdapterUsage>); 6] = [
            // why: the recorded reading: 6 GiB on the card, 300 MiB spilled,
            // the integrated adapter's 200 MiB of Shared not the child's spill
            (
                vec![item(igpu, 0), item(dgpu, 6_442_450_944)],
                vec![item(igpu, 209_715_200), item(dgpu, 314_572_800)],
                usage(6_442_450_944, 314_572_800),
            ),
            // why: pid 12345's 8 GiB on the same card is not the child's, had
            // PDH's wildcard let it through
            (
                vec![item(dgpu, 1 << 30), item(other, 8 << 30)],
                vec![item(dgpu, 0), item(other, 4 << 30)],
                usage(1 << 30, 0),
            ),
            // why: a negative formatted value is garbage: zero, not a wrapped huge spill
            (vec![item(dgpu, 1 << 30)], vec![item(dgpu, -1)], usage(1 << 30, 0)),
            // why: an instance name without its adapter is skipped
            (vec![item("pid_1234", 5 << 30), item(dgpu, 1 << 30)], vec![], usage(1 << 30, 0)),
            // why: only another process's instances: the child has none
            (vec![item(other, 1 << 30)], vec![item(other, 1 << 30)], None),
            // why: no instance at all (the child has not touched a GPU yet)
            (vec![], vec![], None),
        ];
        for (i, (dedicated, shared, want)) in rows.into_iter().enumerate() {
            assert_eq!(process_usage(1234, &dedicated, &shared), want, "row {i}");
        }
        // why: the adapter key is `\GPU Adapter Memory(*)`'s own instance name
        assert_eq!(adapter_of(dgpu), adapter_of("luid_0x00000000_0x0000D1F2_phys_0"));
    }
}
