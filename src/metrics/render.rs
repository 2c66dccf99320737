//! The scrape: the Prometheus text exposition format (version 0.0.4) of the
//! counters, the gauges read now, and the child's own metrics relayed with a
//! `model` label. `prometheus-client` encodes ours; the child's text is
//! another program's exposition, which no registry can hold, so it is
//! relabelled line by line here.
//!
//! A counter family with no sample yet (no crash so far) is left out whole,
//! `# HELP` and `# TYPE` too, as Prometheus' Go clients do; the completed
//! turns of every route are created at start so that they always show.

use std::fmt::Write;

use prometheus_client::encoding::{EncodeGaugeValue, EncodeLabelSet, prometheus_text};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

use super::Metrics;

/// The `Content-Type` of what `render` writes.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// What is read at scrape time, not counted.
#[derive(Debug, Clone, Default)]
pub struct Gauges {
    /// The engine (`cpu`, `cuda`, `mlx`).
    pub engine: &'static str,
    /// The loaded model.
    pub model: Option<String>,
    /// Turns waiting or running.
    pub queue_depth: usize,
    /// The queue bound.
    pub max_queue: usize,
    /// The allocated window.
    pub context_tokens: Option<u32>,
    /// The window's bound when memory set it.
    pub memory_bound_tokens: Option<u32>,
    /// The RAM the window was sized against.
    pub memory_total_bytes: Option<u64>,
    /// The child's anonymous memory, read now.
    pub child_footprint_bytes: Option<u64>,
    /// The brake's last level (0 calm, 1 warning, 2 critical).
    pub brake_level: Option<u8>,
    /// Seconds until the idle reap (negative: overdue), when one is due.
    pub idle_deadline_seconds: Option<f64>,
    /// Whether the child's own metrics were read.
    pub child_metrics_up: Option<bool>,
    /// Every resident model (the fields above are the most recently used
    /// one's, as `/warden/status`'s top level).
    pub residents: Vec<ResidentGauges>,
}

/// One resident's scrape-time gauges, each series labelled by its model.
#[derive(Debug, Clone, Default)]
pub struct ResidentGauges {
    /// The model id.
    pub model: String,
    /// `chat` or `embedding`.
    pub kind: &'static str,
    /// What it holds by the law (weights, KV, compute at its window).
    pub footprint_bytes: Option<u64>,
    /// Its allocated window.
    pub context_tokens: Option<u32>,
    /// Turns routed to it, waiting or running.
    pub queue_depth: usize,
    /// Its child's slots, and those a turn runs on now.
    pub slots: usize,
    /// Its busy slots.
    pub busy_slots: usize,
    /// Seconds until its idle reap (negative: overdue), when one is due.
    pub idle_deadline_seconds: Option<f64>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabel {
    model: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelKindLabel {
    model: String,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EngineModel {
    engine: &'static str,
    model: String,
}

/// The whole exposition: the warden's series, then the children's (each
/// resident's exposition, `(model, text)`, merged family by family).
pub fn render(m: &Metrics, g: &Gauges, children: &[(String, String)]) -> String {
    let mut out = String::with_capacity(8 * 1024);
    // Writing into a String cannot fail; the encoder's Result is fmt's.
    prometheus_text::encode(&mut out, &m.registry).expect("writing to a String cannot fail");
    prometheus_text::encode(&mut out, &gauges(g)).expect("writing to a String cannot fail");
    out.push_str(&relay_children(children));
    out
}

/// The scrape-time gauges in a registry of their own, made for this scrape:
/// an absent reading is no series at all (not a 0 that would read as one).
fn gauges(g: &Gauges) -> Registry {
    let mut r = Registry::default();
    // Unloaded, the series stays (at 0, with an empty model) so that an
    // alert on it has something to compare.
    let loaded = Family::<EngineModel, Gauge>::default();
    if g.residents.is_empty() {
        let labels = EngineModel {
            engine: g.engine,
            model: g.model.clone().unwrap_or_default(),
        };
        loaded.get_or_create(&labels).set(i64::from(g.model.is_some()));
    }
    for res in &g.residents {
        let labels = EngineModel {
            engine: g.engine,
            model: res.model.clone(),
        };
        loaded.get_or_create(&labels).set(1);
    }
    r.register("warden_model_loaded", "1 while a child runs the labelled model", loaded);
    residents(&mut r, &g.residents);
    gauge(
        &mut r,
        "warden_queue_depth",
        "Turns waiting or running",
        Some(g.queue_depth),
    );
    gauge(
        &mut r,
        "warden_queue_limit",
        "The queue bound (WARDEN_MAX_QUEUE)",
        Some(g.max_queue),
    );
    gauge(
        &mut r,
        "warden_context_tokens",
        "The loaded child's allocated window",
        g.context_tokens,
    );
    gauge(
        &mut r,
        "warden_memory_bound_tokens",
        "The window's bound, when memory rather than the trained window set it",
        g.memory_bound_tokens,
    );
    gauge(
        &mut r,
        "warden_memory_total_bytes",
        "The RAM the window was sized against (cgroup-bounded)",
        g.memory_total_bytes,
    );
    gauge(
        &mut r,
        "warden_child_footprint_bytes",
        "The child's anonymous memory (its weights' page cache excluded)",
        g.child_footprint_bytes,
    );
    gauge(
        &mut r,
        "warden_brake_level",
        "The memory brake's last pressure level (0 calm, 1 warning, 2 critical)",
        g.brake_level.map(u32::from),
    );
    gauge(
        &mut r,
        "warden_idle_deadline_seconds",
        "Seconds until the idle reap may unload the model (negative: due at the next tick)",
        g.idle_deadline_seconds,
    );
    gauge(
        &mut r,
        "warden_child_metrics_up",
        "Whether the child's own metrics were read for this scrape",
        g.child_metrics_up.map(u32::from),
    );
    r
}

/// Each resident's gauges, labelled by model (families with no sample are
/// left out, as an absent reading is).
fn residents(r: &mut Registry, all: &[ResidentGauges]) {
    let footprint = Family::<ModelKindLabel, Gauge>::default();
    let window = Family::<ModelLabel, Gauge>::default();
    let queue = Family::<ModelLabel, Gauge>::default();
    let slots = Family::<ModelLabel, Gauge>::default();
    let busy = Family::<ModelLabel, Gauge>::default();
    let deadline = Family::<ModelLabel, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    let (mut has_window, mut has_deadline, mut has_footprint) = (false, false, false);
    for res in all {
        let model = ModelLabel {
            model: res.model.clone(),
        };
        if let Some(b) = res.footprint_bytes {
            has_footprint = true;
            let l = ModelKindLabel {
                model: res.model.clone(),
                kind: res.kind,
            };
            footprint.get_or_create(&l).set(b as i64);
        }
        if let Some(w) = res.context_tokens {
            has_window = true;
            window.get_or_create(&model).set(i64::from(w));
        }
        if let Some(d) = res.idle_deadline_seconds {
            has_deadline = true;
            deadline.get_or_create(&model).set(d);
        }
        queue.get_or_create(&model).set(res.queue_depth as i64);
        if res.slots > 0 {
            slots.get_or_create(&model).set(res.slots as i64);
            busy.get_or_create(&model).set(res.busy_slots as i64);
        }
    }
    if has_footprint {
        r.register(
            "warden_resident_footprint_bytes",
            "What each resident holds by the window law (weights, KV and compute at its window)",
            footprint,
        );
    }
    if has_window {
        r.register("warden_resident_context_tokens", "Each resident's allocated window", window);
    }
    if !all.is_empty() {
        r.register(
            "warden_resident_queue_depth",
            "Turns routed to each resident, waiting or running",
            queue,
        );
        r.register(
            "warden_resident_slots",
            "Each resident child's slots: the conversations it serves at once",
            slots,
        );
        r.register(
            "warden_resident_busy_slots",
            "Each resident child's slots a turn runs on now",
            busy,
        );
    }
    if has_deadline {
        r.register(
            "warden_resident_idle_deadline_seconds",
            "Seconds until the idle reap may unload each resident (negative: due at the next tick)",
            deadline,
        );
    }
}

/// Registers `value` under `name` when there is one. Help texts end without
/// a full stop: the registry appends it.
fn gauge<N>(r: &mut Registry, name: &str, help: &str, value: Option<N>)
where
    N: EncodeGaugeValue + std::fmt::Debug + Send + Sync + 'static,
{
    if let Some(v) = value {
        r.register(name, help, ConstGauge::new(v));
    }
}

/// A label value, escaped as the text format requires.
fn esc(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Every resident child's exposition, each sample labelled with its model,
/// merged family by family: the text format wants each family's `# HELP`
/// and `# TYPE` once and its samples together, and every llama-server
/// names the same families.
pub fn relay_children(children: &[(String, String)]) -> String {
    // Families in the order first seen; each with its comments and samples.
    let mut order: Vec<String> = Vec::new();
    let mut families: std::collections::HashMap<String, (Vec<String>, Vec<String>)> = Default::default();
    for (model, text) in children {
        for line in relay_child(text, model).lines() {
            let (family, comment) = match line.strip_prefix("# ") {
                Some(rest) => {
                    let mut words = rest.split_whitespace();
                    let _kind = words.next();
                    (words.next().unwrap_or_default().to_string(), true)
                }
                None => (line.split(['{', ' ', '\t']).next().unwrap_or_default().to_string(), false),
            };
            if family.is_empty() {
                continue;
            }
            let entry = families.entry(family.clone()).or_insert_with(|| {
                order.push(family.clone());
                Default::default()
            });
            if comment {
                if !entry.0.iter().any(|c| same_kind(c, line)) {
                    entry.0.push(line.to_string());
                }
            } else {
                entry.1.push(line.to_string());
            }
        }
    }
    let mut out = String::new();
    for f in order {
        let (comments, samples) = &families[&f];
        for l in comments.iter().chain(samples) {
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

/// Two comment lines of one kind (`# HELP x`, `# TYPE x`) for one family.
fn same_kind(a: &str, b: &str) -> bool {
    a.split_whitespace().take(3).eq(b.split_whitespace().take(3))
}

/// The child's exposition with `model="<id>"` added to every sample, its
/// `# HELP`/`# TYPE` lines kept; anything that is not a metric line
/// (blank, or `#` comments) passes unchanged.
pub fn relay_child(text: &str, model: &str) -> String {
    let label = format!("model=\"{}\"", esc(model));
    let mut out = String::with_capacity(text.len() + 64);
    for line in text.lines() {
        if line.is_empty() || line.starts_with('#') {
            out.push_str(line);
        } else if let Some(i) = line.find('{') {
            let closes_at_once = line[i + 1..].starts_with('}');
            out.push_str(&line[..=i]);
            out.push_str(&label);
            if !closes_at_once {
                out.push(',');
            }
            out.push_str(&line[i + 1..]);
        } else if let Some(i) = line.find([' ', '\t']) {
            let _ = write!(out, "{}{{{label}}}{}", &line[..i], &line[i..]);
        } else {
            continue; // a name without a value is no sample
        }
        out.push('\n');
    }
    out
}
