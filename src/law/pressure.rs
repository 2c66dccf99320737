//! The Linux pressure level, from the readings `sensors::linux` takes: PSI
//! (`/proc/pressure/memory`) and available memory against the RAM total
//! (bounded by the warden's cgroup). Either signal can raise the level; the
//! worse one wins. Paging evidence is the swap-outs of a turn.
//!
//! Every threshold is a starting value to calibrate on real machines (the
//! spec's own words for the Linux and Windows providers); each says why it
//! is where it is.

use super::brake::Level;

/// PSI `some avg10` (% of the last 10 s in which at least one task stalled on
/// memory) from which the machine is under pressure: reclaim is now costing
/// real time, but work still progresses.
pub const PSI_SOME_WARNING_PCT: f64 = 10.0;
/// PSI `full avg10` (% of the last 10 s in which every non-idle task stalled
/// on memory) from which the pressure is critical: the machine is thrashing.
pub const PSI_FULL_CRITICAL_PCT: f64 = 5.0;
/// Available memory, as a share of the RAM total, under which the machine is
/// short: about where desktop OSes start warning (macOS's memorystatus
/// "warning" sits around 15-20 % free).
pub const AVAILABLE_WARNING_FRACTION: f64 = 0.15;
/// Available memory under which the pressure is critical: the kernel is near
/// its min watermark (direct reclaim) or a cgroup near its OOM limit.
pub const AVAILABLE_CRITICAL_FRACTION: f64 = 0.05;
/// Swap-outs during one turn that count as paging evidence (the spec's 64 MiB).
pub const PAGING_WARNING_BYTES: u64 = 64 * 1024 * 1024;

/// PSI's memory averages.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Psi {
    /// `some avg10`, percent.
    pub some_avg10: f64,
    /// `full avg10`, percent.
    pub full_avg10: f64,
}

/// The level from whichever signals could be read; `None` when neither.
pub fn level(psi: Option<Psi>, available: Option<(u64, u64)>) -> Option<Level> {
    let from_psi = psi.map(|p| {
        if p.full_avg10 >= PSI_FULL_CRITICAL_PCT {
            Level::Critical
        } else if p.some_avg10 >= PSI_SOME_WARNING_PCT {
            Level::Warning
        } else {
            Level::Calm
        }
    });
    let from_available = available.filter(|&(_, total)| total > 0).map(|(avail, total)| {
        let f = avail as f64 / total as f64;
        if f < AVAILABLE_CRITICAL_FRACTION {
            Level::Critical
        } else if f < AVAILABLE_WARNING_FRACTION {
            Level::Warning
        } else {
            Level::Calm
        }
    });
    match (from_psi, from_available) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// Paging evidence from the swap-outs of a turn, `None` when unreadable.
pub fn paging(swapped_out_bytes: Option<u64>) -> Option<bool> {
    swapped_out_bytes.map(|b| b >= PAGING_WARNING_BYTES)
}

/// A cumulative count of `pages` written out (macOS' swap-outs, Windows'
/// `\Memory\Pages Output/sec` raw count) in bytes, at `page_size` bytes
/// a page (16 KiB on Apple Silicon, 4 KiB on Intel and x86-64 Windows);
/// `None` when either is unknown (a zero page size is an unknown one).
// Read by macOS' and Windows' providers (Linux's counter is in bytes).
#[cfg_attr(target_os = "linux", allow(dead_code))]
pub fn paged_bytes(pages: Option<u64>, page_size: Option<u64>) -> Option<u64> {
    pages?.checked_mul(page_size.filter(|&p| p > 0)?)
}

/// A turn's paging evidence from the swap-out counter at its start and at
/// its end.
pub fn turn_paging(start: Option<u64>, end: Option<u64>) -> Option<bool> {
    match (start, end) {
        (Some(a), Some(b)) => paging(Some(b.saturating_sub(a))),
        // A turn whose start was not sampled (its model was not loaded yet)
        // has no paging window: no evidence.
        (None, Some(_)) => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1 << 30;

    /// Pages times the page size, from `vm_stat` as recorded on an M-series
    /// Mac ("Mach Virtual Memory Statistics: (page size of 16384 bytes)",
    /// "Swapouts: 123456.") and on an Intel one (4096).
    #[test]
    fn paged_pages_in_bytes() {
        let rows = [
            (Some(123_456), Some(16_384), Some(2_022_703_104)),
            (Some(123_456), Some(4_096), Some(505_675_776)),
            (Some(0), Some(16_384), Some(0)),
            // why: 64 MiB of 16 KiB pages is the paging evidence's 4,096 pages
            (Some(4_096), Some(16_384), Some(64 << 20)),
            (None, Some(16_384), None),
            (Some(1), None, None),
            // why: a zero page size is an unreadable one, not zero bytes
            (Some(1), Some(0), None),
            (Some(u64::MAX), Some(16_384), None),
        ];
        for (pages, size, want) in rows {
            assert_eq!(paged_bytes(pages, size), want, "{pages:?} x {size:?}");
        }
        assert_eq!(paging(paged_bytes(Some(4_096), Some(16_384))), Some(true));
        assert_eq!(paging(paged_bytes(Some(4_095), Some(16_384))), Some(false));
    }

    #[test]
    fn turn_paging_rows() {
        let rows = [
            // why: a turn that swapped out 1 GiB pages
            (Some(0), Some(G), Some(true)),
            // why: a quiet turn
            (Some(G), Some(G), Some(false)),
            // why: a counter that went backwards (reset) is no evidence
            (Some(G), Some(0), Some(false)),
            // why: no start sample: the model loaded during the turn
            (None, Some(G), Some(false)),
            // why: the counter is unreadable: the level decides alone
            (Some(0), None, None),
            (None, None, None),
        ];
        for (i, (start, end, want)) in rows.into_iter().enumerate() {
            assert_eq!(turn_paging(start, end), want, "row {i}");
        }
    }

    #[test]
    #[allow(clippy::type_complexity)] // table rows are wide tuples on purpose
    fn level_rows() {
        let calm_psi = Some(Psi {
            some_avg10: 0.0,
            full_avg10: 0.0,
        });
        let rows: &[(Option<Psi>, Option<(u64, u64)>, Option<Level>)] = &[
            // why: nothing readable: the brake must turn off, not guess
            (None, None, None),
            // why: quiet machine
            (calm_psi, Some((12 * G, 24 * G)), Some(Level::Calm)),
            // why: stalls on memory 10 % of the time: warning
            (
                Some(Psi {
                    some_avg10: 12.0,
                    full_avg10: 1.0,
                }),
                Some((12 * G, 24 * G)),
                Some(Level::Warning),
            ),
            // why: everything stalled 5 % of the time: critical
            (
                Some(Psi {
                    some_avg10: 40.0,
                    full_avg10: 6.0,
                }),
                None,
                Some(Level::Critical),
            ),
            // why: a cgroup near its limit shows no PSI (FACTS.md): available decides
            (calm_psi, Some((G / 10, 2 * G)), Some(Level::Critical)),
            (calm_psi, Some((G / 5, 2 * G)), Some(Level::Warning)),
            // why: PSI alone when available is unreadable
            (calm_psi, None, Some(Level::Calm)),
        ];
        for (i, (psi, avail, want)) in rows.iter().enumerate() {
            assert_eq!(level(*psi, *avail), *want, "row {i}");
        }
    }

    #[test]
    fn paging_rows() {
        assert_eq!(paging(None), None);
        assert_eq!(paging(Some(0)), Some(false));
        assert_eq!(paging(Some(PAGING_WARNING_BYTES)), Some(true));
    }
}
