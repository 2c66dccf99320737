//! The CUDA engine's part of `EngineCore`: what is read right after a load
//! (Flash Attention as llama.cpp resolved it, the placement fit chose, the
//! post-load device check, the spill baseline), and the spill brake's sample.
//!
//! Linux has no spill: an allocation that does not fit fails, so the window
//! is sized to fit at spawn and the brake has no signal; `spill_sample`
//! returns before any sensor is read (no `Memory brake` line is ever
//! written). Windows' WDDM spills into RAM; there the Shared Usage above the
//! child's baseline drives `llama_step`. A test may pretend a spill platform
//! (`WARDEN_TEST_SPILL_PLATFORM=1`) to drive the whole path here.

use crate::actors::engine::{EngineCore, LiveChild};
use crate::engines::Backend;
use crate::engines::cuda::CudaChild;
use crate::law::brake::{Point, Readings, WindowFacts};
use crate::law::cuda::{self, CudaPlacement, Offload};
use crate::law::kv;

impl EngineCore {
    /// Whether this platform can spill VRAM (Windows), or a test says so.
    pub(crate) fn spill_platform(&self) -> bool {
        cfg!(windows) || self.cfg.pretend_spill_platform
    }

    /// Right after a CUDA child is ready, before the brake is seeded.
    pub(crate) async fn cuda_after_load(&mut self, child: &mut LiveChild, respawn: bool) {
        let state = self.cuda_state_at_load(child, respawn);
        if let Some(s) = child.engine.cuda_mut() {
            *s = state;
        }
    }

    /// What the CUDA engine learns of its child at load: the placement fit
    /// made, whether the brake can sample it, and the spill baseline.
    fn cuda_state_at_load(&mut self, child: &LiveChild, respawn: bool) -> CudaChild {
        let mut state = CudaChild::default();
        let Backend::Cuda(engine) = &self.backend else {
            return state;
        };
        let Some(spawn) = child.plan.cuda.clone() else {
            return state;
        };
        let kept = child.process.output().kept();
        let fa = cuda::flash_attention(spawn.flash_attention, &kept);
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
        let pid = child.process.pid();
        let device_bytes = engine.gpus.process_used_bytes(device.index, pid);
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
        if self.spill_platform() {
            state.spill_baseline = Some(self.spill_after_load(pid, allocated, fa.runs, respawn));
        }
        state
    }

    /// The spill brake's baseline after a load: the Shared GPU memory read
    /// now (said when above the healthy amount: INFO on a respawn, else a
    /// WARNING), or the healthy amount when unreadable.
    fn spill_after_load(&mut self, pid: u32, allocated: u32, fa: bool, respawn: bool) -> u64 {
        let healthy = cuda::healthy_shared_bytes(allocated, fa);
        let reading = self.spill.read(pid, healthy).ok();
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

    /// The CUDA engine's sample: the Shared Usage above the baseline as the
    /// level. `None` (nothing read, nothing acts) off a spill platform, for
    /// a child the warden did not size or that loaded partly on the GPU, or
    /// while the gauge is unreadable (one WARNING per episode of that).
    pub(crate) fn spill_sample(&mut self, point: Point) -> Option<(Readings, WindowFacts)> {
        if !self.spill_platform() {
            return None;
        }
        let c = self.child.as_ref()?;
        let state = c.engine.cuda()?;
        if state.brake_off.is_some() || state.offload == Some(Offload::Partial) {
            return None;
        }
        let spawn = c.plan.cuda.as_ref()?;
        let CudaPlacement::Sized { device, .. } = &spawn.placement else {
            return None;
        };
        let (shape, allocated, baseline) = (c.plan.shape?, c.allocated?, state.spill_baseline?);
        let facts = WindowFacts {
            allocated,
            kv_per_token: shape.kv_per_token,
            // "Not ours" is judged against the card's memory on this engine.
            ram_bytes: device.total_bytes,
            uncapped: spawn.static_window.unwrap_or(allocated),
            pinned: self.cfg.ctx_pin.is_some(),
        };
        let healthy = cuda::healthy_shared_bytes(allocated, spawn.flash_attention);
        let pid = c.process.pid();
        if !self.take_sample(point) {
            return None;
        }
        match self.spill.read(pid, healthy) {
            Ok(shared) => {
                self.brake.spill_gauge_warned = false;
                let level = cuda::spill_level(shared, baseline);
                // A calm spill is never damage; a spill at a tier is the
                // paging evidence a warning shrink needs.
                let readings = Readings {
                    level,
                    paging: Some(level != crate::law::brake::Level::Calm),
                    footprint_bytes: Some(shared.saturating_sub(baseline)),
                };
                Some((readings, facts))
            }
            Err(why) => {
                if !self.brake.spill_gauge_warned {
                    self.brake.spill_gauge_warned = true;
                    tracing::warn!(
                        "GPU spill gauge unreadable ({why}); the memory brake is off while it stays unreadable"
                    );
                }
                None
            }
        }
    }
}
