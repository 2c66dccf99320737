//! The CUDA engine's hooks over its child: what is read right after a load
//! (Flash Attention as llama.cpp resolved it, the placement fit chose, the
//! post-load device check, the spill baseline), how the spill brake samples
//! it, and the one retry at the floor after an out-of-memory load.
//!
//! Linux has no spill: an allocation that does not fit fails, so the window
//! is sized to fit at spawn and the brake has no signal; `brake_input`
//! returns `None` before any sensor is read (no `Memory brake` line is ever
//! written). Windows' WDDM spills into RAM; there the Shared Usage above the
//! child's baseline drives `llama_step`. A test may pretend a spill platform
//! (`WARDEN_TEST_SPILL_PLATFORM=1`) to drive the whole path here.
//!
//! No GPU is lent to this project's machines: this code is written to the
//! law and exercised through the fake card (`GpuSource::Fixed`) and the
//! spill seam (`WARDEN_FORCE_MEMORY_PRESSURE=vram-*`).

use super::vram::SpillGauge;
use super::{CudaChild, CudaEngine};
use crate::config::WardenConfig;
use crate::engines::SpawnPlan;
use crate::engines::hooks::{BrakeInput, Gauge};
use crate::engines::live::ChildView;
use crate::law::brake::{Level, Readings, WindowFacts};
use crate::law::cuda::{self, CudaPlacement, Offload};
use crate::law::kv;

/// Whether this platform can spill VRAM (Windows), or a test says so.
fn spill_platform(cfg: &WardenConfig) -> bool {
    cfg!(windows) || cfg.pretend_spill_platform
}

impl CudaEngine {
    /// What the CUDA engine learns of its child at load: the placement fit
    /// made, whether the brake can sample it, and the spill baseline.
    pub(crate) fn state_at_load(&self, child: ChildView<'_>, cfg: &WardenConfig, respawn: bool) -> CudaChild {
        let mut state = CudaChild::default();
        let Some(spawn) = child.plan.cuda().cloned() else {
            return state;
        };
        let kept = child.output.kept();
        let fa = cuda::flash_attention(spawn.flash_attention, &kept);
        state.flash_attention = Some(fa.runs);
        if fa.wrong_slope {
            tracing::warn!(
                "[CUDA_Engine] llama.cpp disabled Flash Attention for {}: the window was sized on the Flash-Attention slope (1 KiB per token), not the larger non-FA scores",
                child.model_id()
            );
        }
        let CudaPlacement::Sized { device, .. } = &spawn.placement else {
            state.brake_off = Some("the window was not sized (several GPUs named, or no NVML)".into());
            return state;
        };
        let (Some(facts), Some(allocated)) = (child.plan.facts.clone(), child.allocated) else {
            state.brake_off = Some("the model's header could not be read".into());
            return state;
        };
        // NVML's per-process memory; where WDDM hides it (Windows), PDH's
        // Dedicated and Shared Usage on the child's adapter.
        let device_bytes = self.gpus.process_used_bytes(device.index, child.pid).or_else(|| {
            let healthy = cuda::healthy_shared_bytes(allocated, fa.runs);
            SpillGauge::new(None).device_bytes(child.pid, healthy)
        });
        let kv_alloc = kv::kv_bytes_allocated(&facts, allocated as u64);
        let floor = cuda::full_offload_floor(
            facts.weights_bytes,
            facts.token_embd_bytes,
            facts.expert_bytes,
            kv_alloc,
        );
        let layer_bytes = facts.weights_bytes.saturating_sub(facts.token_embd_bytes) / facts.block_count.max(1) as u64;
        let (offload, signal) = cuda::classify_placement(cuda::offloaded_line(&kept), device_bytes, floor, layer_bytes);
        state.offload = Some(offload);
        if offload == Offload::Partial {
            tracing::info!(
                "[CUDA_Engine] {} loaded partly on the GPU ({signal}): the memory brake is off for this child; the window memory keeps its cap",
                child.model_id()
            );
            state.brake_off = Some(format!("partial offload ({signal})"));
            return state;
        }
        // The post-load device check (skipped with a vision projector).
        if child.plan.entry.mmproj.is_none()
            && let Some(over) = cuda::device_excess(&facts, allocated, fa.runs, device_bytes)
        {
            tracing::warn!(
                "[CUDA_Engine] the child holds {} MiB on {} (more than the {} MiB its window, compute, CUDA context and weights allow): a mis-calibrated constant or a Flash-Attention mis-prediction",
                over.held_bytes >> 20,
                device.name,
                over.limit_bytes >> 20
            );
        }
        if spill_platform(cfg) {
            let mut gauge = SpillGauge::new(cfg.force_pressure);
            state.spill_baseline = Some(spill_after_load(&mut gauge, child.pid, allocated, fa.runs, respawn));
            state.gauge = Some(gauge);
        }
        state
    }
}

/// The spill brake's baseline after a load: the Shared GPU memory read now
/// (said when above the healthy amount: INFO on a respawn, else a WARNING),
/// or the healthy amount when unreadable.
fn spill_after_load(gauge: &mut SpillGauge, pid: u32, allocated: u32, fa: bool, respawn: bool) -> u64 {
    let healthy = cuda::healthy_shared_bytes(allocated, fa);
    let reading = gauge.read(pid, healthy).ok();
    if let Some(r) = cuda::spill_at_load_excess(reading, healthy) {
        let msg = format!(
            "[CUDA_Engine] the child's Shared GPU memory after load, {} MiB, is above its healthy {} MiB (the budget was too large or the card crowded)",
            r >> 20,
            healthy >> 20
        );
        if respawn {
            tracing::info!("{msg}");
        } else {
            tracing::warn!("{msg}");
        }
    }
    cuda::spill_baseline(reading, healthy)
}

/// The CUDA engine's sample plan: the Shared Usage above the baseline as
/// the level. `None` (nothing read, nothing acts) off a spill platform and
/// for a child the warden did not size or that loaded partly on the GPU.
pub(crate) fn brake_input(c: ChildView<'_>, state: &CudaChild, cfg: &WardenConfig) -> Option<BrakeInput> {
    if !spill_platform(cfg) || state.brake_off.is_some() || state.offload == Some(Offload::Partial) {
        return None;
    }
    let spawn = c.plan.cuda()?;
    let CudaPlacement::Sized { device, .. } = &spawn.placement else {
        return None;
    };
    let (shape, allocated) = (c.plan.shape?, c.allocated?);
    state.spill_baseline?;
    // The state llama.cpp logged at load, as the baseline was stamped with.
    let flash_attention = state.flash_attention.unwrap_or(spawn.flash_attention);
    Some(BrakeInput::Llama {
        facts: WindowFacts {
            allocated,
            kv_per_token: shape.kv_per_token,
            // "Not ours" is judged against the card's memory on this engine.
            ram_bytes: device.total_bytes,
            uncapped: spawn.static_window.unwrap_or(allocated),
            pinned: cfg.ctx_pin_for(&c.plan.entry.id).is_some(),
        },
        gauge: Gauge::Spill {
            healthy: cuda::healthy_shared_bytes(allocated, flash_attention),
        },
    })
}

impl CudaChild {
    /// One reading of the spill gauge as the brake's level; `None` while the
    /// gauge is unreadable (one WARNING per episode of that).
    pub(crate) fn read_spill(&mut self, pid: u32, healthy: u64) -> Option<Readings> {
        let (gauge, baseline) = (self.gauge.as_mut()?, self.spill_baseline?);
        match gauge.read(pid, healthy) {
            Ok(shared) => {
                self.gauge_warned = false;
                let level = cuda::spill_level(shared, baseline);
                // A calm spill is never damage; a spill at a tier is the
                // paging evidence a warning shrink needs.
                Some(Readings {
                    level,
                    paging: Some(level != Level::Calm),
                    footprint_bytes: Some(shared.saturating_sub(baseline)),
                })
            }
            Err(why) => {
                if !self.gauge_warned {
                    self.gauge_warned = true;
                    tracing::warn!(
                        "GPU spill gauge unreadable ({why}); the memory brake is off while it stays unreadable"
                    );
                }
                None
            }
        }
    }
}

/// After a failed load: the plan of the one retry at the 4096 floor, when
/// the window was sized by the warden, not pinned, and the output shows a
/// CUDA allocation failure (fit's own estimate can be short).
pub(crate) fn retry_at_floor(plan: &SpawnPlan, raw: &str, cfg: &WardenConfig) -> Option<SpawnPlan> {
    let tail: Vec<String> = raw.lines().map(str::to_string).collect();
    let sized = matches!(plan.window, crate::law::window::Window::Sized { .. });
    let retry = cuda::retry_at_floor(
        sized,
        cfg.ctx_pin_for(&plan.entry.id).is_some(),
        false,
        plan.window.ctx(),
        cuda::cuda_oom(&tail),
    );
    if !retry {
        return None;
    }
    tracing::warn!(
        "[CUDA_Engine] CUDA out of memory loading {} with a {}-token window; retrying once at the 4096 floor (the failed allocation may also be the host's pinned memory: cudaHostAlloc prints the same)",
        plan.entry.id,
        plan.window.ctx().unwrap_or(0)
    );
    Some(crate::engines::Backend::at_window(
        plan,
        crate::law::caps::WINDOW_FLOOR_TOKENS,
    ))
}

#[cfg(test)]
mod tests {
    use super::super::vram::{AdapterUsage, SpillGauge, VramProvider};
    use super::*;
    use std::collections::VecDeque;
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    /// What PDH answers, one scripted reading per sample: `true` a good
    /// reading, `false` an unreadable one (PDH refused, no instance).
    struct Scripted(VecDeque<bool>);

    impl VramProvider for Scripted {
        fn usage(&mut self, _pid: u32) -> Result<AdapterUsage, String> {
            match self.0.pop_front().expect("one scripted reading per sample") {
                true => Ok(AdapterUsage {
                    dedicated: 6 << 30,
                    shared: 200 << 20,
                }),
                false => Err("no GPU Process Memory instance for pid 42".into()),
            }
        }
    }

    /// The formatted log lines, written where the test can read them.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Samples a child whose gauge answers `script`, in order; returns
    /// which samples gave the brake a reading and the WARNING lines said.
    fn sample(script: &[bool]) -> (Vec<bool>, Vec<String>) {
        let log = Captured::default();
        let to = log.clone();
        // This thread only: the other tests' lines stay out of `log`.
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || to.clone())
            .finish();
        let mut child = CudaChild {
            spill_baseline: Some(150 << 20),
            gauge: Some(SpillGauge::with_provider(Box::new(Scripted(script.iter().copied().collect())))),
            ..CudaChild::default()
        };
        let read = tracing::subscriber::with_default(subscriber, || {
            script
                .iter()
                .map(|_| child.read_spill(42, 136 << 20).is_some())
                .collect()
        });
        let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
        let warnings = text.lines().filter(|l| l.contains("WARN")).map(str::to_string).collect();
        (read, warnings)
    }

    /// An unreadable spill gauge is one WARNING per episode (a run of
    /// unreadable samples), re-armed by the next good reading, and no
    /// unreadable sample gives the brake a reading.
    #[test]
    fn an_unreadable_spill_gauge_warns_once_per_episode() {
        let (good, bad) = (true, false);
        let rows: &[(&[bool], usize)] = &[
            // why: the brief's sequence: two episodes, the good reading
            // between them re-arms the WARNING
            (&[bad, bad, good, bad], 2),
            // why: one long episode is one WARNING, not one per sample
            (&[bad, bad, bad, bad], 1),
            // why: a gauge that reads says nothing
            (&[good, good, good], 0),
            // why: an episode that opens after good readings still warns
            (&[good, bad, bad], 1),
            // why: each good reading re-arms: three episodes, three lines
            (&[bad, good, bad, good, good, bad, bad], 3),
        ];
        for (i, (script, expected)) in rows.iter().enumerate() {
            let (read, warnings) = sample(script);
            assert_eq!(
                warnings.len(),
                *expected,
                "row {i} ({script:?}): {expected} WARNINGs expected, got {warnings:#?}"
            );
            assert_eq!(read, script.to_vec(), "row {i}: only a good reading reaches the brake");
            for w in &warnings {
                assert!(
                    w.contains(
                        "GPU spill gauge unreadable (no GPU Process Memory instance for pid 42); the memory brake is off while it stays unreadable"
                    ),
                    "row {i}: the spec's wording, with why: {w}"
                );
            }
        }
    }
}
