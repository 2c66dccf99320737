//! The CPU engine's brake sample: RAM pressure and paging from the
//! sensor, combined with the pressure of the RPC workers in use.

use crate::actors::engine::EngineCore;
use crate::actors::engine::brake::Given;
use crate::law::brake::{Point, Readings, WindowFacts};

impl EngineCore {
    /// The CPU engine's sample: RAM pressure and paging (the footprint is
    /// read once the law acts). `None` when nothing is sampled (no sized
    /// child, not due, brake off).
    pub(crate) fn ram_sample(&mut self, point: Point, given: Option<Given>) -> Option<(Readings, WindowFacts)> {
        let facts = self.child.as_ref().and_then(|c| self.window_facts(c))?;
        if !self.take_sample(point) {
            return None;
        }
        let r = self.read_sensor(point, given)?;
        // A worker under pressure counts like this machine.
        let (level, facts) = crate::law::workers::combine(r.level, facts, &self.worker_pressure());
        Some((Readings { level, ..r }, facts))
    }
}
