//! The run's outputs: the markdown table (printed and written), the raw
//! samples as CSV, and an SVG chart of the per-round ratios, written by hand
//! (no plotting dependency). Files go to `bench/results/` as `latest.*` and a
//! timestamped copy (`YYYYMMDD-HHMMSS.*`), each written to a `.tmp` file and
//! renamed into place.

use std::fmt::Write as _;
use std::path::Path;

/// One raw sample: `phase,round,side,metric,value`.
pub struct Row {
    phase: &'static str,
    round: usize,
    side: String,
    metric: &'static str,
    value: f64,
}

/// Every raw sample of the run.
#[derive(Default)]
pub struct Raw(Vec<Row>);

impl Raw {
    /// Records a sample (a missing one is skipped). `side`: who was measured
    /// (`direct`, `warden`, `machine`, a model file for header reads).
    pub fn push(
        &mut self,
        phase: &'static str,
        round: usize,
        side: impl Into<String>,
        metric: &'static str,
        value: Option<f64>,
    ) {
        if let Some(value) = value {
            self.0.push(Row {
                phase,
                round,
                side: side.into(),
                metric,
                value,
            });
        }
    }

    /// The CSV text.
    pub fn csv(&self) -> String {
        let mut s = String::from("phase,round,side,metric,value\n");
        for r in &self.0 {
            let _ = writeln!(s, "{},{},{},{},{:.6}", r.phase, r.round, r.side, r.metric, r.value);
        }
        s
    }
}

/// One line of the table.
pub struct Line {
    measure: String,
    direct: String,
    warden: String,
    result: String,
    spread: String,
    target: String,
    /// Whether the target is met (`None`: informational line).
    pub met: Option<bool>,
}

impl Line {
    /// A line; `met` is `None` for information without a target.
    pub fn new(
        measure: &str,
        direct: String,
        warden: String,
        result: String,
        spread: String,
        target: &str,
        met: Option<bool>,
    ) -> Self {
        Self {
            measure: measure.into(),
            direct,
            warden,
            result,
            spread,
            target: target.into(),
            met,
        }
    }
}

/// The markdown table of `lines`.
pub fn table(lines: &[Line]) -> String {
    let mut s = String::from(
        "| measure | direct | warden | result (median) | spread (min..max) | target | met |\n|---|---|---|---|---|---|---|\n",
    );
    for l in lines {
        let met = match l.met {
            Some(true) => "yes",
            Some(false) => "**NO**",
            None => "",
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {met} |",
            l.measure, l.direct, l.warden, l.result, l.spread, l.target
        );
    }
    s
}

/// A chart series: a name, a colour and one value per round.
pub struct Series {
    /// Legend text.
    pub name: &'static str,
    /// SVG colour.
    pub colour: &'static str,
    /// Per-round values.
    pub values: Vec<f64>,
}

/// The SVG line chart of per-round ratios (warden / direct), with the 1.0
/// parity line and the decode (0.99) and cold (1.05) targets.
pub fn svg(title: &str, series: &[Series]) -> String {
    let (w, h) = (760.0, 380.0);
    let (left, right, top, bottom) = (60.0, 200.0, 40.0, 40.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let all: Vec<f64> = series
        .iter()
        .flat_map(|s| s.values.iter().copied())
        .filter(|v| v.is_finite())
        .collect();
    let lo = all.iter().copied().fold(0.95_f64, f64::min) - 0.02;
    let hi = all.iter().copied().fold(1.10_f64, f64::max) + 0.02;
    let rounds = series.iter().map(|s| s.values.len()).max().unwrap_or(1).max(2);
    let x = |i: usize| left + pw * i as f64 / (rounds - 1) as f64;
    let y = |v: f64| top + ph * (hi - v) / (hi - lo);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(s, r#"<text x="{left}" y="22" font-size="14">{}</text>"#, escape(title));
    // Horizontal grid, every 0.05.
    let mut g = (lo / 0.05).ceil() * 0.05;
    while g <= hi {
        let _ = writeln!(
            s,
            r##"<line x1="{left}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{g:.2}</text>"##,
            left + pw,
            left - 6.0,
            y(g) + 4.0,
            y = y(g)
        );
        g += 0.05;
    }
    for (v, label, dash, dy) in [
        (1.0, "parity", "6 3", -2.0),
        (0.99, "decode target", "2 3", 10.0),
        (1.05, "cold target", "2 3", 4.0),
    ] {
        let _ = writeln!(
            s,
            r##"<line x1="{left}" x2="{}" y1="{yy:.1}" y2="{yy:.1}" stroke="#555" stroke-dasharray="{dash}"/><text x="{}" y="{:.1}" fill="#555">{label}</text>"##,
            left + pw,
            left + pw + 4.0,
            y(v) + dy,
            yy = y(v)
        );
    }
    for i in 0..rounds {
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
            x(i),
            top + ph + 18.0,
            i + 1
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{}" text-anchor="middle">round</text>"#,
        left + pw / 2.0,
        h - 6.0
    );
    for (k, se) in series.iter().enumerate() {
        let pts: Vec<String> = se
            .values
            .iter()
            .enumerate()
            .filter(|(_, v)| v.is_finite())
            .map(|(i, v)| format!("{:.1},{:.1}", x(i), y(*v)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>"#,
            se.colour,
            pts.join(" ")
        );
        for p in &pts {
            let (px, py) = p.split_once(',').unwrap_or(("0", "0"));
            let _ = writeln!(s, r#"<circle cx="{px}" cy="{py}" r="3" fill="{}"/>"#, se.colour);
        }
        let ly = top + 16.0 * k as f64;
        let _ = writeln!(
            s,
            r#"<rect x="{}" y="{:.1}" width="12" height="4" fill="{}"/><text x="{}" y="{:.1}">{}</text>"#,
            left + pw + 90.0,
            ly - 4.0,
            se.colour,
            left + pw + 106.0,
            ly + 1.0,
            escape(se.name)
        );
    }
    s.push_str("</svg>\n");
    s
}

fn escape(t: &str) -> String {
    t.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Writes `latest.{md,csv,svg}` and `STAMP.{md,csv,svg}` under `dir`.
pub fn write(dir: &Path, stamp: &str, md: &str, csv: &str, svg: &str) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (ext, text) in [("md", md), ("csv", csv), ("svg", svg)] {
        for name in ["latest".to_string(), stamp.to_string()] {
            let tmp = dir.join(format!("{name}.{ext}.tmp"));
            std::fs::write(&tmp, text)?;
            std::fs::rename(&tmp, dir.join(format!("{name}.{ext}")))?;
        }
    }
    Ok(())
}

/// `YYYYMMDD-HHMMSS` (UTC) of now, and the same as `YYYY-MM-DD HH:MM:SS UTC`.
pub fn stamps() -> (String, String) {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let (hh, mm, ss) = (rem / 3600, rem % 3600 / 60, rem % 60);
    (
        format!("{y:04}{m:02}{d:02}-{hh:02}{mm:02}{ss:02}"),
        format!("{y:04}-{m:02}-{d:02} {hh:02}:{mm:02}:{ss:02} UTC"),
    )
}
