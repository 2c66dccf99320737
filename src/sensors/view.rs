//! The memory brake's readings as the engine sees them: the `SensorActor`
//! samples the OS on its own clock and publishes its latest reading into a
//! watch; the engine reads that at a turn's start and end and at its idle
//! sample, without a round trip to another actor. The paging window (the
//! swap-outs between a turn's start and its end) is the view's, because it
//! is the turn's.
//!
//! A reading is at most one sensor period old (`WardenConfig::sensor_period`,
//! 250 ms): the pressure level itself is a 10 s average (PSI) or a slowly
//! moving amount (available memory), so an older reading decides the same.

use tokio::sync::watch;
use tokio::time::Instant;

use crate::law::brake::{Level, Point, Readings};
use crate::law::pressure;

/// The pressure level cannot be read: the brake turns off, with this reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BrakeOff(pub String);

/// A reading a message brought with it (an idle `BrakeSample`'s), or why
/// the brake cannot read.
pub type Given = Result<Readings, BrakeOff>;

/// The sensor's latest sample.
#[derive(Debug, Clone)]
pub struct Latest {
    /// The pressure level, or why it cannot be read.
    pub level: Result<Level, BrakeOff>,
    /// The machine's swap-outs so far, when readable.
    pub swapout_bytes: Option<u64>,
    /// Memory available (the cgroup's when it bounds the warden), when
    /// readable: the dashboard's chart.
    pub available_bytes: Option<u64>,
    /// The QA seam forced the level; its paging evidence is forced with it.
    pub forced: bool,
}

impl Latest {
    /// The readings of an idle sample: a paging window belongs to a turn,
    /// so there is none, unless the QA seam forces the evidence.
    pub fn idle_readings(&self) -> Result<Readings, BrakeOff> {
        Ok(Readings {
            level: self.level.clone()?,
            paging: Some(self.forced),
            footprint_bytes: None,
        })
    }
}

/// Where the engine reads the brake's readings at a sample point. The
/// footprint is left to the engine (it reads its own child's).
pub trait PressureView: Send + std::fmt::Debug {
    /// The readings at `point`, or why the brake must turn off.
    fn read(&mut self, point: Point) -> Result<Readings, BrakeOff>;
}

/// The view over the `SensorActor`'s latest sample.
#[derive(Debug)]
pub struct SensorView {
    latest: watch::Receiver<Latest>,
    /// Swap-outs at the current turn's start.
    turn_start_swapout: Option<u64>,
}

impl SensorView {
    /// A view over `latest`.
    pub fn new(latest: watch::Receiver<Latest>) -> Self {
        Self {
            latest,
            turn_start_swapout: None,
        }
    }
}

impl PressureView for SensorView {
    fn read(&mut self, point: Point) -> Result<Readings, BrakeOff> {
        let latest = self.latest.borrow().clone();
        let paging = match (latest.forced, point) {
            (true, _) => Some(true),
            (false, Point::TurnStart) => {
                self.turn_start_swapout = latest.swapout_bytes;
                Some(false)
            }
            (false, Point::TurnEnd) => pressure::turn_paging(self.turn_start_swapout.take(), latest.swapout_bytes),
            (false, Point::Idle) => Some(false),
        };
        Ok(Readings {
            level: latest.level?,
            paging,
            footprint_bytes: None,
        })
    }
}

/// The brake's I/O: the pressure view samples read (a test's script
/// instead) and the monotonic clock whose milliseconds the brake
/// controller is given.
#[derive(Debug)]
pub struct BrakeSensor {
    view: Box<dyn PressureView>,
    epoch: Instant,
}

impl BrakeSensor {
    /// Reading `view`, its clock starting now.
    pub fn new(view: Box<dyn PressureView>) -> Self {
        Self {
            view,
            epoch: Instant::now(),
        }
    }

    /// `t` as milliseconds on the brake's clock (a moment before the
    /// epoch, which this engine never records, reads as 0).
    pub fn ms(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.epoch).as_millis() as u64
    }

    /// Now on the brake's clock.
    pub fn now_ms(&self) -> u64 {
        self.ms(Instant::now())
    }

    /// The reading at `point`: `given`, else the view's latest.
    pub fn read(&mut self, point: Point, given: Option<Given>) -> Given {
        given.unwrap_or_else(|| self.view.read(point))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn latest(level: Result<Level, BrakeOff>, swapout: Option<u64>, forced: bool) -> Latest {
        Latest {
            level,
            swapout_bytes: swapout,
            available_bytes: None,
            forced,
        }
    }

    /// A turn's paging is the swap-outs between its start's and its end's
    /// readings; the QA seam forces the evidence; an unreadable level turns
    /// the brake off.
    #[test]
    fn the_paging_window_spans_a_turn() {
        let (tx, rx) = watch::channel(latest(Ok(Level::Warning), Some(0), false));
        let mut v = SensorView::new(rx);
        assert_eq!(v.read(Point::TurnStart).unwrap().paging, Some(false));
        tx.send_replace(latest(Ok(Level::Warning), Some(1 << 30), false));
        assert_eq!(v.read(Point::TurnEnd).unwrap().paging, Some(true), "1 GiB swapped out");
        // A turn end without a start (the model loaded in it) has no window.
        assert_eq!(v.read(Point::TurnEnd).unwrap().paging, Some(false));
        tx.send_replace(latest(Ok(Level::Critical), None, true));
        assert_eq!(v.read(Point::Idle).unwrap().paging, Some(true), "forced");
        tx.send_replace(latest(Err(BrakeOff("no provider".into())), None, false));
        assert_eq!(v.read(Point::Idle).unwrap_err(), BrakeOff("no provider".into()));
    }
}
