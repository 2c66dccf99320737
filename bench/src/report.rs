//! The run's outputs: the markdown table (printed and written) and the raw
//! samples as CSV; `chart` draws the SVG. Files go to `bench/results/` as
//! `latest.*` and a timestamped copy (`YYYYMMDD-HHMMSS.*`), each written to
//! a `.tmp` file and renamed into place.

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
