//! The Prometheus text exposition format (version 0.0.4): the counters,
//! the scrape-time gauges and the child's own metrics, relayed with a
//! `model` label. Pure: everything comes in as values.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::{Counters, Histogram};
use crate::law::route::Route;

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
}

/// Writes `# HELP` and `# TYPE` for `name`.
fn head(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A label value, escaped as the format requires.
fn esc(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn counter_map<K: Ord>(
    out: &mut String,
    name: &str,
    help: &str,
    map: &BTreeMap<K, u64>,
    labels: impl Fn(&K) -> String,
) {
    head(out, name, "counter", help);
    for (k, v) in map {
        let _ = writeln!(out, "{name}{{{}}} {v}", labels(k));
    }
}

fn histogram(out: &mut String, name: &str, help: &str, h: &Histogram) {
    head(out, name, "histogram", help);
    for (le, n) in h.cumulative() {
        let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {n}");
    }
    let _ = writeln!(out, "{name}_sum {}", h.sum());
    let _ = writeln!(out, "{name}_count {}", h.count());
}

fn gauge(out: &mut String, name: &str, help: &str, v: Option<f64>) {
    if let Some(v) = v {
        head(out, name, "gauge", help);
        let _ = writeln!(out, "{name} {v}");
    }
}

/// The whole exposition: the warden's series, then the child's.
pub fn render(c: &Counters, g: &Gauges, child: Option<&str>) -> String {
    let mut out = String::with_capacity(8 * 1024);
    counters(&mut out, c);
    gauges(&mut out, g);
    if let (Some(text), Some(model)) = (child, g.model.as_deref()) {
        out.push_str(&relay_child(text, model));
    }
    out
}

fn counters(out: &mut String, c: &Counters) {
    turn_counters(out, c);
    speed_histograms(out, c);
    child_life_counters(out, c);
    brake_and_stall_counters(out, c);
}

fn turn_counters(out: &mut String, c: &Counters) {
    // Every route's completed count is listed, zero or not, so a rate()
    // over a fresh warden has a series to start from.
    let mut turns = c.turns.clone();
    for r in Route::ALL {
        turns.entry((r.tag(), "completed")).or_default();
    }
    counter_map(
        out,
        "warden_turns_total",
        "Turns the engine ran, by route and outcome.",
        &turns,
        |(r, o)| format!("route=\"{r}\",outcome=\"{o}\""),
    );
    counter_map(
        out,
        "warden_requests_refused_total",
        "Requests refused before the engine (bad body, unknown model, full queue, unsupported route), by route and error code.",
        &c.refused,
        |(r, code)| format!("route=\"{r}\",code=\"{}\"", esc(code)),
    );
    counter_map(
        out,
        "warden_completion_tokens_total",
        "Streamed events relayed from the child (one per token), by route.",
        &c.completion_tokens,
        |r| format!("route=\"{r}\""),
    );
}

fn speed_histograms(out: &mut String, c: &Counters) {
    histogram(
        out,
        "warden_time_to_first_token_seconds",
        "From the relay of a streamed request to the child to its first event.",
        &c.ttft,
    );
    histogram(
        out,
        "warden_decode_tokens_per_second",
        "Decode speed of a streamed turn: events after the first over the time they took.",
        &c.decode,
    );
    histogram(
        out,
        "warden_load_duration_seconds",
        "Child spawn to ready, per load that succeeded.",
        &c.load_seconds,
    );
}

fn child_life_counters(out: &mut String, c: &Counters) {
    counter_map(
        out,
        "warden_load_failures_total",
        "Loads that failed, by error code.",
        &c.load_failures,
        |k| format!("code=\"{}\"", esc(k)),
    );
    counter_map(
        out,
        "warden_unloads_total",
        "Children that ended, by reason (idle, brake, manual, switch, hung, shutdown, crash).",
        &c.unloads,
        |k| format!("reason=\"{k}\""),
    );
    counter_map(
        out,
        "warden_child_crashes_total",
        "Children that died on their own, by crash code.",
        &c.crashes,
        |k| format!("code=\"{}\"", esc(k)),
    );
    counter_map(
        out,
        "warden_child_restarts_total",
        "Children started again for the model whose child had just ended, by why it ended.",
        &c.restarts,
        |k| format!("reason=\"{k}\""),
    );
}

fn brake_and_stall_counters(out: &mut String, c: &Counters) {
    counter_map(
        out,
        "warden_brake_actions_total",
        "Memory brake actions, by pressure level and action.",
        &c.brake_actions,
        |(l, a)| format!("level=\"{l}\",action=\"{}\"", esc(a)),
    );
    head(
        out,
        "warden_client_stalls_total",
        "counter",
        "Clients whose connection was closed because they stopped reading their answer.",
    );
    let _ = writeln!(out, "warden_client_stalls_total {}", c.client_stalls);
}

fn gauges(out: &mut String, g: &Gauges) {
    head(
        out,
        "warden_model_loaded",
        "gauge",
        "1 while a child runs the labelled model.",
    );
    match &g.model {
        Some(m) => {
            let _ = writeln!(
                out,
                "warden_model_loaded{{engine=\"{}\",model=\"{}\"}} 1",
                g.engine,
                esc(m)
            );
        }
        None => {
            let _ = writeln!(out, "warden_model_loaded{{engine=\"{}\",model=\"\"}} 0", g.engine);
        }
    }
    gauge(
        out,
        "warden_queue_depth",
        "Turns waiting or running.",
        Some(g.queue_depth as f64),
    );
    gauge(
        out,
        "warden_queue_limit",
        "The queue bound (WARDEN_MAX_QUEUE).",
        Some(g.max_queue as f64),
    );
    gauge(
        out,
        "warden_context_tokens",
        "The loaded child's allocated window.",
        g.context_tokens.map(f64::from),
    );
    gauge(
        out,
        "warden_memory_bound_tokens",
        "The window's bound, when memory rather than the trained window set it.",
        g.memory_bound_tokens.map(f64::from),
    );
    gauge(
        out,
        "warden_memory_total_bytes",
        "The RAM the window was sized against (cgroup-bounded).",
        g.memory_total_bytes.map(|b| b as f64),
    );
    gauge(
        out,
        "warden_child_footprint_bytes",
        "The child's anonymous memory (its weights' page cache excluded).",
        g.child_footprint_bytes.map(|b| b as f64),
    );
    gauge(
        out,
        "warden_brake_level",
        "The memory brake's last pressure level (0 calm, 1 warning, 2 critical).",
        g.brake_level.map(f64::from),
    );
    gauge(
        out,
        "warden_idle_deadline_seconds",
        "Seconds until the idle reap may unload the model (negative: due at the next tick).",
        g.idle_deadline_seconds,
    );
    gauge(
        out,
        "warden_child_metrics_up",
        "Whether the child's own metrics were read for this scrape.",
        g.child_metrics_up.map(|u| if u { 1.0 } else { 0.0 }),
    );
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_samples_get_the_model_label() {
        let rows = [
            // why: a bare sample gets a label set
            (
                "llamacpp:tokens_predicted_total 7",
                "llamacpp:tokens_predicted_total{model=\"m\"} 7",
            ),
            // why: an existing label set gets the label first
            ("x{a=\"1\"} 2", "x{model=\"m\",a=\"1\"} 2"),
            ("x{} 2", "x{model=\"m\"} 2"),
            // why: comments pass unchanged
            ("# TYPE x counter", "# TYPE x counter"),
        ];
        for (i, (line, want)) in rows.iter().enumerate() {
            assert_eq!(relay_child(line, "m").trim_end(), *want, "row {i}");
        }
        // why: a quote in a model id cannot break the label
        assert_eq!(relay_child("x 1", "a\"b").trim_end(), "x{model=\"a\\\"b\"} 1");
    }

    #[test]
    fn every_route_has_a_completed_series_and_absent_gauges_are_omitted() {
        let text = render(&Counters::default(), &Gauges::default(), None);
        for r in Route::ALL {
            assert!(text.contains(&format!(
                "warden_turns_total{{route=\"{}\",outcome=\"completed\"}} 0",
                r.tag()
            )));
        }
        assert!(text.contains("warden_time_to_first_token_seconds_bucket{le=\"+Inf\"} 0"));
        assert!(!text.contains("warden_context_tokens"));
        assert!(text.contains("warden_model_loaded{engine=\"\",model=\"\"} 0"));
    }
}
