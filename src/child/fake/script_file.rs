//! The fake's script as a file, for the fake run as a process: the warden
//! builds a child's environment from an allow-list, so the script comes
//! from `<model>.fake.json` beside the model (a test writes it next to a
//! small valid GGUF). Every key is optional; a key the fake does not know
//! is refused (a misspelt fault would otherwise pass as no fault):
//!
//! | key | what the fake does |
//! |---|---|
//! | `load_ms` | `/health` answers 503 this long before 200 (50) |
//! | `never_ready` | `/health` answers 503 forever |
//! | `exit_on_load` | prints llama.cpp's line for `corrupt`, `not_gguf`, `port_taken`, `oom` or `cuda_oom`, exits 1 |
//! | `exit_on_ctx` | `{"N": failure}`: the same, only when started with `-c N` |
//! | `offloaded` | `"N/M"`: prints `offloaded N/M layers to GPU` |
//! | `flash_attention_off` | `true`: prints that Flash Attention was turned off at load |
//! | `signal_on_load` | dies of this signal (`SIGILL`, `SIGSEGV`, `SIGBUS`, `SIGABRT`) while loading |
//! | `signal_after` | `{"signal": NAME, "tokens": N}`: dies of it before token N |
//! | `tokens` | tokens per answer (8), capped by the request's bound |
//! | `token_ms` | between two tokens, and before the first (5) |
//! | `hang_after` | sends nothing more after N tokens, the socket open |
//! | `die_after` | exits 3 after N tokens |
//! | `die_on` | exits 3 reading a prompt that holds this text |
//! | `die_times` | a scripted death happens on N answers in all (a process fake: per process) |
//! | `props_ctx` | the `n_ctx` `/props` says (the `-c` given, else 4096) |
//! | `props_fail` | `/props` answers 500 |
//! | `argv_log` | a file each start appends its argv and `CUDA_VISIBLE_DEVICES` to (a JSON line) |
//! | `log` | a file each chat request body is appended to (a JSON line) |

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::{Failure, Script};

/// `<model>.fake.json` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptFile {
    load_ms: Option<u64>,
    #[serde(default)]
    never_ready: bool,
    exit_on_load: Option<Failure>,
    #[serde(default)]
    exit_on_ctx: BTreeMap<String, Failure>,
    offloaded: Option<String>,
    #[serde(default)]
    flash_attention_off: bool,
    signal_on_load: Option<String>,
    signal_after: Option<SignalAfter>,
    tokens: Option<u32>,
    token_ms: Option<u64>,
    hang_after: Option<u32>,
    die_after: Option<u32>,
    die_times: Option<u32>,
    die_on: Option<String>,
    props_ctx: Option<u32>,
    #[serde(default)]
    props_fail: bool,
    /// Where each start appends its argv.
    pub argv_log: Option<PathBuf>,
    /// Where each chat request body is appended.
    pub log: Option<PathBuf>,
}

/// `signal_after`'s value.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SignalAfter {
    signal: String,
    tokens: u32,
}

impl ScriptFile {
    /// The script beside `model` (none there: the defaults).
    pub fn beside(model: &Path) -> Result<Self, String> {
        let mut name = model.as_os_str().to_os_string();
        name.push(".fake.json");
        match std::fs::read_to_string(&name) {
            Err(_) => Ok(Self::default()),
            Ok(text) => serde_json::from_str(&text).map_err(|e| format!("{}: {e}", Path::new(&name).display())),
        }
    }

    /// The script it says.
    pub fn script(&self) -> Result<Script, String> {
        let d = Script::default();
        let token = self.token_ms.map_or(d.token_delay, Duration::from_millis);
        let exit_on_ctx = self
            .exit_on_ctx
            .iter()
            .map(|(c, f)| c.parse().map(|c| (c, *f)).map_err(|_| format!("exit_on_ctx: {c:?} is not a -c value")))
            .collect::<Result<_, _>>()?;
        Ok(Script {
            load: self.load_ms.map_or(d.load, Duration::from_millis),
            never_ready: self.never_ready,
            tokens: self.tokens.unwrap_or(d.tokens),
            first_token_delay: token,
            token_delay: token,
            hang_after: self.hang_after,
            die_after: self.die_after,
            die_times: self.die_times,
            die_on: self.die_on.clone(),
            props_ctx: self.props_ctx,
            props_fail: self.props_fail,
            exit_on_load: self.exit_on_load,
            exit_on_ctx,
            offloaded: self.offloaded.clone(),
            flash_attention_off: self.flash_attention_off,
            signal_on_load: self.signal_on_load.as_deref().map(signal).transpose()?,
            signal_after: match &self.signal_after {
                Some(a) => Some((signal(&a.signal)?, a.tokens)),
                None => None,
            },
            ..d
        })
    }
}

/// A crash signal's number by its name.
fn signal(name: &str) -> Result<i32, String> {
    #[cfg(unix)]
    let n = match name {
        "SIGILL" => Some(libc::SIGILL),
        "SIGSEGV" => Some(libc::SIGSEGV),
        "SIGBUS" => Some(libc::SIGBUS),
        "SIGABRT" => Some(libc::SIGABRT),
        _ => None,
    };
    #[cfg(not(unix))]
    let n: Option<i32> = None;
    n.ok_or_else(|| format!("{name:?} is not one of SIGILL, SIGSEGV, SIGBUS, SIGABRT"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each key reaches the script; an unknown key is refused by name.
    #[test]
    fn keys_become_the_script() {
        let f: ScriptFile = serde_json::from_str(
            r#"{"load_ms": 7, "tokens": 3, "token_ms": 9, "exit_on_ctx": {"8192": "oom"},
                "offloaded": "3/5", "signal_after": {"signal": "SIGSEGV", "tokens": 2}}"#,
        )
        .unwrap();
        let s = f.script().unwrap();
        assert_eq!(s.load, Duration::from_millis(7));
        assert_eq!((s.tokens, s.token_delay, s.first_token_delay), (3, Duration::from_millis(9), Duration::from_millis(9)));
        assert_eq!(s.exit_on_ctx, vec![(8192, Failure::Oom)]);
        assert_eq!(s.offloaded.as_deref(), Some("3/5"));
        assert_eq!(s.signal_after.map(|(_, t)| t), Some(2));
        let bad = serde_json::from_str::<ScriptFile>(r#"{"tokenz": 3}"#).unwrap_err();
        assert!(bad.to_string().contains("tokenz"), "{bad}");
        let sig: ScriptFile = serde_json::from_str(r#"{"signal_on_load": "SIGTERM"}"#).unwrap();
        assert!(sig.script().is_err(), "only crash signals");
    }
}
