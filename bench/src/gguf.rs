//! GGUF header read time: `llm_warden::gguf::read_model_facts` on each real
//! model, warm (one unmeasured read first, so the header's pages are in the
//! page cache, as they are when the warden loads a model it has seen), then
//! `n` timed reads in this process; best and median.

use std::path::PathBuf;
use std::time::Instant;

use crate::client::ms;
use crate::report::{Line, Raw};
use crate::stats::{median, min};

/// One model's result.
pub struct Row {
    /// The file name.
    pub name: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// Timed reads, ms.
    pub samples: Vec<f64>,
}

/// Reads each of `paths` `n` times.
pub fn run(paths: &[PathBuf], n: usize, raw: &mut Raw) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for p in paths {
        llm_warden::gguf::read_model_facts(p)?;
        let mut samples = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            let facts = llm_warden::gguf::read_model_facts(p)?;
            samples.push(ms(t.elapsed()));
            std::hint::black_box(facts);
        }
        let name = p
            .file_name()
            .map_or_else(String::new, |f| f.to_string_lossy().into_owned());
        for (i, x) in samples.iter().enumerate() {
            raw.push("gguf", i, name.as_str(), "read_ms", Some(*x));
        }
        rows.push(Row {
            name,
            bytes: std::fs::metadata(p)?.len(),
            samples,
        });
    }
    Ok(rows)
}

/// The table's lines (the 10 ms target holds for every model up to 253 MB).
pub fn lines(rows: &[Row]) -> Vec<Line> {
    rows.iter()
        .map(|r| {
            let best = min(&r.samples);
            Line::new(
                &format!("GGUF header read, {} ({} MB), warm (ms)", r.name, r.bytes / 1_000_000),
                "-".into(),
                format!("best {best:.3} / median {:.3}", median(&r.samples)),
                format!("{best:.3} ms"),
                format!("max {:.3}", crate::stats::max(&r.samples)),
                "<= 10 ms",
                Some(median(&r.samples) <= 10.0),
            )
        })
        .collect()
}
