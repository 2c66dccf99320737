//! Keep-alive per request: how long a loaded model may stay idle before the
//! reap unloads it, as a client asks for it (a `keep_alive` body field or
//! the `X-Warden-Keep-Alive` header), in Ollama's vocabulary so its users'
//! settings carry over: a number is seconds, a string is a duration ("30s",
//! "5m", "1h30m", "250ms", or a bare number), `0` unloads right after the
//! turn, and any negative value means never reap.
//!
//! The rule, decided here: a request's value sets the idle deadline of the
//! model it ran on until a later request sets another (requests without one
//! leave it alone); a model loaded afresh after another ran starts from the
//! configured `WARDEN_IDLE_TIMEOUT_S` again. Pure.

use std::time::Duration;

/// A keep-alive a request asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KeepAlive {
    /// Never reap (a negative value).
    Forever,
    /// Reap once idle for longer than this (zero: right after the turn).
    For(Duration),
}

impl KeepAlive {
    /// The idle timeout it sets; `None` means never reap.
    pub fn timeout(self) -> Option<Duration> {
        match self {
            Self::Forever => None,
            Self::For(d) => Some(d),
        }
    }

    /// Seconds, as status and events show it (`-1`: never).
    pub fn as_secs_f64(self) -> f64 {
        match self {
            Self::Forever => -1.0,
            Self::For(d) => d.as_secs_f64(),
        }
    }
}

/// The idle timeout in force: the request's keep-alive for `model` when one
/// was set for it, else the configured one.
pub fn effective_timeout(
    set: Option<(&str, KeepAlive)>,
    model: Option<&str>,
    configured: Duration,
) -> Option<Duration> {
    match (set, model) {
        (Some((for_model, k)), Some(m)) if for_model == m => k.timeout(),
        _ => Some(configured),
    }
}

/// Whether a turn that set `asked` unloads its model as soon as it ends
/// (only an explicit zero does: a configured zero timeout still waits for
/// the idle tick, as the reap always has).
pub fn unload_after_turn(asked: Option<KeepAlive>) -> bool {
    asked == Some(KeepAlive::For(Duration::ZERO))
}

/// Parses a JSON value (`keep_alive`).
pub fn from_json(v: &serde_json::Value) -> Result<KeepAlive, String> {
    match v {
        serde_json::Value::Number(n) => n
            .as_f64()
            .map(from_secs)
            .ok_or_else(|| format!("'{n}' is not a number of seconds"))?,
        serde_json::Value::String(s) => parse(s),
        _ => Err("must be a number of seconds or a duration string such as \"5m\"".into()),
    }
}

/// Parses a header or string value: a bare number of seconds, or a
/// sequence of `<number><unit>` with units `ms`, `s`, `m`, `h` (Go's
/// `time.ParseDuration`, which Ollama uses), optionally negative.
pub fn parse(s: &str) -> Result<KeepAlive, String> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<f64>() {
        return from_secs(secs);
    }
    let (negative, mut rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if rest.is_empty() {
        return Err(bad(s));
    }
    let mut total = 0.0f64;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| bad(s))?;
        let n: f64 = rest[..digits].parse().map_err(|_| bad(s))?;
        let after = &rest[digits..];
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let scale = match &after[..unit_len] {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad(s)),
        };
        total += n * scale;
        rest = &after[unit_len..];
    }
    from_secs(if negative { -total } else { total })
}

fn from_secs(secs: f64) -> Result<KeepAlive, String> {
    if !secs.is_finite() {
        return Err(format!("'{secs}' is not a finite duration"));
    }
    if secs < 0.0 {
        return Ok(KeepAlive::Forever);
    }
    // Beyond any real uptime: a bound keeps the deadline arithmetic sane.
    const MAX_SECS: f64 = 100.0 * 365.0 * 86_400.0;
    Ok(KeepAlive::For(Duration::from_secs_f64(secs.min(MAX_SECS))))
}

fn bad(s: &str) -> String {
    format!("'{s}' is not a duration (seconds, or e.g. \"30s\", \"5m\", \"1h30m\"; negative: never unload)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn secs(n: u64) -> KeepAlive {
        KeepAlive::For(Duration::from_secs(n))
    }

    #[test]
    fn values_parse_as_ollama_accepts_them() {
        let rows: &[(serde_json::Value, Result<KeepAlive, ()>)] = &[
            // why: a JSON number is seconds
            (json!(300), Ok(secs(300))),
            // why: zero unloads after the turn
            (json!(0), Ok(secs(0))),
            // why: any negative number means never
            (json!(-1), Ok(KeepAlive::Forever)),
            (json!(-0.5), Ok(KeepAlive::Forever)),
            // why: fractional seconds are kept
            (json!(1.5), Ok(KeepAlive::For(Duration::from_millis(1500)))),
            // why: a bare number in a string is seconds too
            (json!("45"), Ok(secs(45))),
            (json!("5m"), Ok(secs(300))),
            (json!("1h"), Ok(secs(3600))),
            (json!("1h30m"), Ok(secs(5400))),
            (json!("250ms"), Ok(KeepAlive::For(Duration::from_millis(250)))),
            (json!("-1m"), Ok(KeepAlive::Forever)),
            (json!(" 10s "), Ok(secs(10))),
            // why: units Go rejects without a number, unknown units, garbage
            (json!("m"), Err(())),
            (json!("5 minutes"), Err(())),
            (json!("5d"), Err(())),
            (json!(""), Err(())),
            (json!("-"), Err(())),
            (json!(true), Err(())),
            (json!(null), Err(())),
            (json!({"s": 1}), Err(())),
        ];
        for (i, (v, want)) in rows.iter().enumerate() {
            assert_eq!(from_json(v).map_err(|_| ()), *want, "row {i}: {v}");
        }
    }

    #[test]
    fn a_keep_alive_holds_for_its_model_only() {
        let cfg = Duration::from_secs(300);
        let rows = [
            // why: nothing set: the configured timeout
            (None, Some("a"), Some(cfg)),
            // why: set for the loaded model: it wins, forever included
            (Some(("a", secs(5))), Some("a"), Some(Duration::from_secs(5))),
            (Some(("a", KeepAlive::Forever)), Some("a"), None),
            // why: set for another model: the new model starts from the default
            (Some(("a", secs(5))), Some("b"), Some(cfg)),
            (None, None, Some(cfg)),
        ];
        for (i, (set, model, want)) in rows.into_iter().enumerate() {
            assert_eq!(effective_timeout(set, model, cfg), want, "row {i}");
        }
        // why: only a request's explicit zero unloads at the turn's end
        assert!(unload_after_turn(Some(secs(0))));
        assert!(!unload_after_turn(Some(secs(1))) && !unload_after_turn(None));
        assert!(!unload_after_turn(Some(KeepAlive::Forever)));
    }
}
