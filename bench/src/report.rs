//! The run's outputs: the markdown report (printed and written), the raw
//! samples as CSV and the headline line; `chart` draws the SVG. Files go to
//! `bench/results/` as `latest.*` and a timestamped copy
//! (`YYYYMMDD-HHMMSS.*`), each written to a `.tmp` file and renamed into
//! place.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::Ordering;

use crate::{Args, Setup, quiet};

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

/// When and on what load the run started, for the report.
pub struct Start {
    /// `YYYYMMDD-HHMMSS`, the timestamped files' name.
    pub stamp: String,
    /// The same, readable.
    pub when: String,
    /// The load average at the start.
    pub load: String,
}

impl Start {
    pub fn now() -> Self {
        let load = loadavg();
        let (stamp, when) = stamps();
        Self { stamp, when, load }
    }
}

/// Headline figures (NaN when a phase did not run).
pub struct Headline {
    pub decode_ratio: f64,
    pub ttft_added_ms: f64,
    pub cold_ratio: f64,
    pub respawn_s: f64,
    pub rss_rest_mib: f64,
    pub rss_growth_mib: f64,
    pub status_p99_ms: f64,
}

impl Default for Headline {
    fn default() -> Self {
        Self {
            decode_ratio: f64::NAN,
            ttft_added_ms: f64::NAN,
            cold_ratio: f64::NAN,
            respawn_s: f64::NAN,
            rss_rest_mib: f64::NAN,
            rss_growth_mib: f64::NAN,
            status_p99_ms: f64::NAN,
        }
    }
}

impl Headline {
    /// The run's last line, machine-readable (`NA` for a phase not run).
    pub fn line(&self) -> String {
        let f = |v: f64, d: usize| if v.is_finite() { format!("{v:.d$}") } else { "NA".into() };
        format!(
            "decode_ratio={} ttft_added_ms={} cold_ratio={} respawn_s={} rss_rest_mib={} rss_growth_mib={} status_p99_ms={}",
            f(self.decode_ratio, 3),
            f(self.ttft_added_ms, 2),
            f(self.cold_ratio, 3),
            f(self.respawn_s, 3),
            f(self.rss_rest_mib, 1),
            f(self.rss_growth_mib, 2),
            f(self.status_p99_ms, 3)
        )
    }
}

/// The markdown report: what ran on what, the table, the targets met and
/// the failed phases.
pub fn markdown(args: &Args, setup: &Setup, start: &Start, lines: &[Line], errors: &[String]) -> String {
    let met = lines.iter().filter(|l| l.met == Some(true)).count();
    let targets = lines.iter().filter(|l| l.met.is_some()).count();
    let mut md = format!("# llm-warden benchmark, {}\n\n", start.when);
    md += &format!(
        "- model: `{}` ({} MB), window {} tokens; llama-server `{}`\n",
        setup.model.display(),
        std::fs::metadata(&setup.model).map_or(0, |m| m.len() / 1_000_000),
        setup.window,
        setup.server.display()
    );
    md += &format!(
        "- rounds {}, max_tokens {} (ignore_eos, temperature 0, seed 42), {} short turns, {} status requests per set, {} header reads per model\n",
        args.rounds, args.max_tokens, args.turns, args.status_n, args.gguf_n
    );
    md += &format!(
        "- machine: {} cores; load average {} at start, {} at end\n",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        start.load,
        loadavg()
    );
    md += &format!(
        "- noise control: each round waits for a quiet machine (under {:.0}% CPU); a round during which other processes took over {:.0}% of the machine is measured again (up to {} tries): {} retried, {} kept noisy, {} started after a 30 s wait for quiet (foreign_share per round in the CSV)\n",
        quiet::QUIET_BUSY * 100.0,
        quiet::FOREIGN_MAX * 100.0,
        quiet::TRIES,
        quiet::RETRIED.load(Ordering::Relaxed),
        quiet::NOISY.load(Ordering::Relaxed),
        quiet::UNDER_LOAD.load(Ordering::Relaxed),
    );
    md += "- result = median of the per-round values (ratio = warden / direct); spread = min..max over rounds\n\n";
    md += &table(lines);
    md += &format!("\n{met} of {targets} targets met.\n");
    for e in errors {
        md += &format!("\nPHASE FAILED: {e}\n");
    }
    md
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
    let t = llm_warden::law::civil::civil(secs);
    let (y, m, d) = (t.year, t.month, t.day);
    let (hh, mm, ss) = (t.hour, t.minute, t.second);
    (
        format!("{y:04}{m:02}{d:02}-{hh:02}{mm:02}{ss:02}"),
        format!("{y:04}-{m:02}-{d:02} {hh:02}:{mm:02}:{ss:02} UTC"),
    )
}

/// `/proc/loadavg`'s first three fields.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}
