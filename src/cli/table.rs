//! Pure text for the client subcommands (`ps`, `models`, `status`): aligned
//! columns, sizes a person reads at a glance, deadlines relative to now.
//! No I/O and no clock (`now_ms` is an argument), so every rule is a table
//! test.

use serde_json::Value;

/// Shown where the server sent no value (or a field it does not have yet).
pub const NONE: &str = "-";

/// `rows` under `headers`, each column as wide as its widest cell, two
/// spaces apart, no trailing spaces.
pub fn render(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i > 0 {
                s.push_str("  ");
            }
            s.push_str(cell);
            s.extend(std::iter::repeat_n(' ', w - cell.chars().count()));
        }
        s.trim_end().to_string()
    };
    let mut out = line(headers.to_vec());
    for row in rows {
        out.push('\n');
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out.push('\n');
    out
}

/// Bytes in binary units: `512 B`, `1.2 GiB`, `98.3 MiB`, `512 MiB` (one
/// decimal below 100, where it still says something).
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if v < 100.0 {
        format!("{v:.1} {}", UNITS[unit])
    } else {
        format!("{v:.0} {}", UNITS[unit])
    }
}

/// A deadline (Unix ms) as seen from `now_ms`: `in 4m 12s`, `in 2h 5m`,
/// `due now` once passed (the reaper's next tick takes it).
pub fn human_until(deadline_ms: u64, now_ms: u64) -> String {
    let s = deadline_ms.saturating_sub(now_ms).div_ceil(1000);
    match s {
        0 => "due now".into(),
        1..60 => format!("in {s}s"),
        60..3600 => format!("in {}m {}s", s / 60, s % 60),
        3600..86400 => format!("in {}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("in {}d {}h", s / 86400, s % 86400 / 3600),
    }
}

/// A keep-alive or timeout in seconds, as Ollama users write it: `10m`,
/// `1h 30m`, `250ms`; negative is `never` (the warden's `-1`).
pub fn human_secs(secs: f64) -> String {
    if secs < 0.0 {
        return "never".into();
    }
    if secs > 0.0 && secs < 1.0 {
        return format!("{}ms", (secs * 1000.0).round());
    }
    let mut s = secs.round() as u64;
    let mut parts = Vec::new();
    for (unit, size) in [("d", 86400), ("h", 3600), ("m", 60), ("s", 1)] {
        if s >= size {
            parts.push(format!("{}{unit}", s / size));
            s %= size;
        }
    }
    if parts.is_empty() { "0s".into() } else { parts.join(" ") }
}

/// A JSON scalar as a cell: strings bare, numbers and booleans as written,
/// null or absent as `-`; objects and arrays compact.
pub fn cell(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => NONE.into(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// A byte count as a cell (`-` when absent or not a count).
pub fn bytes_cell(v: Option<&Value>) -> String {
    v.and_then(Value::as_u64).map_or_else(|| NONE.into(), human_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sizes read like `ls -h` with binary units.
    #[test]
    fn human_bytes_table() {
        let rows: &[(u64, &str)] = &[
            // why: below a KiB the exact count is short enough
            (0, "0 B"),
            (1023, "1023 B"),
            // why: one decimal below 100 of a unit
            (1024, "1.0 KiB"),
            (1_288_490_189, "1.2 GiB"),
            (103_079_215, "98.3 MiB"),
            // why: past 100 a decimal is noise
            (512 * 1024 * 1024, "512 MiB"),
            // why: the largest unit absorbs anything bigger
            (u64::MAX, "16384 PiB"),
        ];
        for (i, (n, want)) in rows.iter().enumerate() {
            assert_eq!(human_bytes(*n), *want, "row {i}: {n}");
        }
    }

    /// Deadlines count down in the two largest units that matter.
    #[test]
    fn human_until_table() {
        let now = 1_700_000_000_000;
        let rows: &[(u64, &str)] = &[
            // why: passed or now: the reaper takes it at its next tick
            (now - 5000, "due now"),
            (now, "due now"),
            // why: a part of a second still to go rounds up, never to "due"
            (now + 1, "in 1s"),
            (now + 59_000, "in 59s"),
            (now + 252_000, "in 4m 12s"),
            (now + 7_500_000, "in 2h 5m"),
            (now + 97_200_000, "in 1d 3h"),
        ];
        for (i, (deadline, want)) in rows.iter().enumerate() {
            assert_eq!(human_until(*deadline, now), *want, "row {i}");
        }
    }

    /// Durations drop the units that are zero.
    #[test]
    fn human_secs_table() {
        let rows: &[(f64, &str)] = &[
            // why: the warden's "never reap"
            (-1.0, "never"),
            // why: zero unloads right after the turn: say so exactly
            (0.0, "0s"),
            (0.25, "250ms"),
            (90.0, "1m 30s"),
            (600.0, "10m"),
            (5400.0, "1h 30m"),
            (86400.0, "1d"),
        ];
        for (i, (secs, want)) in rows.iter().enumerate() {
            assert_eq!(human_secs(*secs), *want, "row {i}");
        }
    }

    /// Columns align on the widest cell and lines carry no trailing blanks.
    #[test]
    fn render_aligns_columns() {
        let got = render(
            &["MODEL", "STATE", "Q"],
            &[
                vec!["a-long-model".into(), "ready".into(), "0/256".into()],
                vec!["m".into(), "-".into(), "".into()],
            ],
        );
        assert_eq!(
            got,
            "MODEL         STATE  Q\na-long-model  ready  0/256\nm             -\n"
        );
    }

    /// Cells: strings bare, null and absent as `-`.
    #[test]
    fn cells_table() {
        let v = serde_json::json!({"s": "5m", "n": 300, "null": null, "b": 2048});
        assert_eq!(cell(v.get("s")), "5m");
        assert_eq!(cell(v.get("n")), "300");
        assert_eq!(cell(v.get("null")), "-");
        assert_eq!(cell(v.get("absent")), "-");
        assert_eq!(bytes_cell(v.get("b")), "2.0 KiB");
        assert_eq!(bytes_cell(v.get("s")), "-");
    }
}
