//! The settings file: TOML, read at start from `--config FILE` (or
//! `WARDEN_CONFIG`), else `$XDG_CONFIG_HOME/llm-warden/config.toml` (else
//! `~/.config/llm-warden/config.toml`) when it exists.
//!
//! ```toml
//! # Every WARDEN_* variable, named without the prefix, in lower case.
//! idle_timeout_s = 600
//! parallel = 4
//!
//! # Per model (its catalog id):
//! [models."SmolLM2-135M-Instruct.Q4_1"]
//! aliases = ["gpt-4o-mini"]   # ids a client may name it by
//! parallel = 1                # conversations at once (or "auto")
//! ctx = 4096                  # a pinned window
//! idle_timeout_s = 60         # its idle unload
//! weight = 2                  # its waits count double when models take turns
//! ```
//!
//! Precedence, written once: the command line, then the environment, then
//! this file, then the defaults. A key the warden does not know, a value of
//! the wrong kind, or a file that does not parse refuses the start with its
//! line and column; `llm-warden config check FILE` says the same before.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::law::slots::Parallel;

/// Every environment variable the file may set, by its key.
pub const VARIABLES: &[&str] = &[
    "WARDEN_API_KEY",
    "WARDEN_BODY_TIMEOUT_S",
    "WARDEN_BRAKE_TICK_S",
    "WARDEN_CACHE_DIR",
    "WARDEN_CHILD_VERBOSITY",
    "WARDEN_CLIENT_STALL_TIMEOUT_S",
    "WARDEN_CORS_ORIGINS",
    "WARDEN_CTX",
    "WARDEN_ENGINE",
    "WARDEN_FIRST_TOKEN_TIMEOUT_S",
    "WARDEN_FORCE_CPU",
    "WARDEN_FORCE_MEMORY_PRESSURE",
    "WARDEN_IDLE_TICK_S",
    "WARDEN_IDLE_TIMEOUT_S",
    "WARDEN_KV_SAVE",
    "WARDEN_KV_SAVE_DIR",
    "WARDEN_KV_SAVE_MAX_GB",
    "WARDEN_KV_SAVE_AHEAD_S",
    "WARDEN_LLAMA_SERVER",
    "WARDEN_LOAD_TIMEOUT_S",
    "WARDEN_MAX_BODY_BYTES",
    "WARDEN_MAX_CONNECTIONS",
    "WARDEN_MAX_QUEUE",
    "WARDEN_MAX_RESIDENT",
    "WARDEN_MLX_PYTHON",
    "WARDEN_PARALLEL",
    "WARDEN_RAM_OVERRIDE_GB",
    "WARDEN_REQUEST_TIMEOUT_S",
    "WARDEN_RESPAWN_TIMEOUT_S",
    "WARDEN_RESUME_TURNS",
    "WARDEN_SCHEDULE",
    "WARDEN_SSE_KEEPALIVE_S",
    "WARDEN_STALL_TIMEOUT_S",
    "WARDEN_STARVATION_LIMIT_S",
    "WARDEN_STORE_HF",
    "WARDEN_STORE_LLAMA_CACHE",
    "WARDEN_STORE_LMSTUDIO",
    "WARDEN_STORE_OLLAMA",
    "WARDEN_UI_SAMPLE_S",
    "WARDEN_VRAM_OVERRIDE_GB",
    "WARDEN_WATCH_S",
    "WARDEN_WORKERS",
    "WARDEN_WORKER_KEY",
];

/// One model's settings.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSettings {
    /// Other ids a request may name it by (a tool that hard-codes a model
    /// name finds this one).
    #[serde(default)]
    pub aliases: Vec<String>,
    /// Conversations its child serves at once.
    #[serde(default, deserialize_with = "parallel")]
    pub parallel: Option<Parallel>,
    /// A pinned window, tokens (its `WARDEN_CTX`).
    pub ctx: Option<u32>,
    /// Its idle unload, seconds (its `WARDEN_IDLE_TIMEOUT_S`).
    pub idle_timeout_s: Option<f64>,
    /// Never evicted for another model nor reaped when idle (still counted
    /// by the residents' law; the memory brake may still unload it under
    /// lasting critical pressure: the machine comes first).
    #[serde(default)]
    pub pinned: bool,
    /// Its weight when models take turns in memory (`law::schedule`): its
    /// waits count this many times against another model's (default 1).
    #[serde(default, deserialize_with = "weight")]
    pub weight: Option<f64>,
    /// Sampling defaults, applied where a request leaves the field out.
    #[serde(default)]
    pub sampling: Sampling,
    /// A system prompt, given to a chat that has none.
    pub system: Option<String>,
    /// A Jinja chat template file the child renders chats with instead of
    /// the GGUF's (`--chat-template-file`).
    pub chat_template_file: Option<PathBuf>,
    /// One of llama.cpp's built-in chat templates by name (`--chat-template
    /// NAME`, `LLAMA_CHAT_TEMPLATES`), for a model whose GGUF has none.
    pub chat_template: Option<String>,
    /// More llama-server arguments; a flag the warden owns is refused by
    /// name (`OWNED_FLAGS`).
    #[serde(default)]
    pub args: Vec<String>,
}

/// Sampling defaults, by the OpenAI and llama.cpp names a request uses.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Sampling {
    /// `temperature`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// `top_p`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// `top_k`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_k: Option<u32>,
    /// `min_p`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_p: Option<f64>,
    /// `repeat_penalty`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repeat_penalty: Option<f64>,
    /// `presence_penalty`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f64>,
    /// `frequency_penalty`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f64>,
    /// `seed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// `stop`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop: Option<Vec<String>>,
}

impl ModelSettings {
    /// Takes what these settings leave out from `under` (a store's own:
    /// Ollama's layers): the file's word wins, field by field.
    pub fn over(&mut self, under: &ModelSettings) {
        self.ctx = self.ctx.or(under.ctx);
        if self.system.is_none() {
            self.system.clone_from(&under.system);
        }
        let (s, u) = (&mut self.sampling, &under.sampling);
        s.temperature = s.temperature.or(u.temperature);
        s.top_p = s.top_p.or(u.top_p);
        s.top_k = s.top_k.or(u.top_k);
        s.min_p = s.min_p.or(u.min_p);
        s.repeat_penalty = s.repeat_penalty.or(u.repeat_penalty);
        s.presence_penalty = s.presence_penalty.or(u.presence_penalty);
        s.frequency_penalty = s.frequency_penalty.or(u.frequency_penalty);
        s.seed = s.seed.or(u.seed);
        if s.stop.is_none() {
            s.stop.clone_from(&u.stop);
        }
    }

    /// Fills what a generating request left out: each sampling default,
    /// and the system prompt when a chat has no system message.
    pub fn fill(&self, body: &mut serde_json::Map<String, serde_json::Value>) {
        if let Ok(serde_json::Value::Object(d)) = serde_json::to_value(&self.sampling) {
            for (k, v) in d {
                // Ollama's and the others' names for the same knob.
                let said = body.contains_key(&k) || (k == "repeat_penalty" && body.contains_key("repetition_penalty"));
                if !said {
                    body.insert(k, v);
                }
            }
        }
        if let (Some(system), Some(serde_json::Value::Array(msgs))) = (&self.system, body.get_mut("messages")) {
            let has = msgs
                .iter()
                .any(|m| matches!(m["role"].as_str(), Some("system" | "developer")));
            if !has {
                msgs.insert(0, serde_json::json!({"role": "system", "content": system}));
            }
        }
    }
}

/// llama-server flags the warden sets itself, refused in `args`, each with
/// why (the first spelling names it).
pub const OWNED_FLAGS: &[(&[&str], &str)] = &[
    (
        &["-m", "--model", "-mu", "--model-url", "-hf", "--hf-repo"],
        "the catalog names the model",
    ),
    (&["-a", "--alias"], "the catalog names the model"),
    (&["-c", "--ctx-size"], "the warden sizes the window (set `ctx` instead)"),
    (
        &["-np", "--parallel"],
        "the warden runs the slots (set `parallel` instead)",
    ),
    (
        &["-kvu", "--kv-unified", "-no-kvu", "--no-kv-unified"],
        "the slots share one pool the warden accounts",
    ),
    (
        &["--port", "--host"],
        "the warden binds the child to 127.0.0.1 on a port of its own",
    ),
    (&["--api-key", "--api-key-file"], "the warden keys the child itself"),
    (&["--slot-save-path"], "the warden keeps the conversations' caches"),
    (&["--mmproj", "-mm"], "the catalog names the projector"),
    (
        &["--slots", "--no-slots", "--metrics", "--no-webui", "--webui"],
        "the warden's own endpoints",
    ),
    (
        &["--cache-ram", "-cram", "--cache-idle-slots", "--no-cache-idle-slots"],
        "a prompt cache the memory law does not count",
    ),
    (&["--threads-http"], "the warden sizes it by the slots"),
    (&["--swa-full"], "the plan decides the sliding cache"),
    (
        &["--embedding", "--embeddings", "--pooling", "--rerank", "--reranking"],
        "the model's header decides",
    ),
    (
        &[
            "-ngl",
            "--gpu-layers",
            "--n-gpu-layers",
            "--device",
            "-dev",
            "--rpc",
            "-fa",
            "--flash-attn",
        ],
        "the engine places the layers",
    ),
    (
        &["-b", "--batch-size", "-ub", "--ubatch-size"],
        "the memory law assumes llama.cpp's batch",
    ),
    (&["--chat-template-file"], "set `chat_template_file` instead"),
    (&["--chat-template"], "set `chat_template` instead"),
];

/// The chat templates llama.cpp b10883 has built in, by the names
/// `--chat-template` takes (`LLM_CHAT_TEMPLATES`, src/llama-chat.cpp).
pub const LLAMA_CHAT_TEMPLATES: &[&str] = &[
    "chatml",
    "llama2",
    "llama2-sys",
    "llama2-sys-bos",
    "llama2-sys-strip",
    "mistral-v1",
    "mistral-v3",
    "mistral-v3-tekken",
    "mistral-v7",
    "mistral-v7-tekken",
    "phi3",
    "phi4",
    "falcon3",
    "zephyr",
    "monarch",
    "gemma",
    "orion",
    "openchat",
    "vicuna",
    "vicuna-orca",
    "deepseek",
    "deepseek2",
    "deepseek3",
    "deepseek-ocr",
    "command-r",
    "llama3",
    "chatglm3",
    "chatglm4",
    "glmedge",
    "minicpm",
    "exaone3",
    "exaone4",
    "exaone-moe",
    "rwkv-world",
    "granite",
    "granite-4.0",
    "granite-4.1",
    "gigachat",
    "megrez",
    "yandex",
    "bailing",
    "bailing-think",
    "bailing2",
    "llama4",
    "smolvlm",
    "hunyuan-moe",
    "gpt-oss",
    "hunyuan-dense",
    "hunyuan-vl",
    "kimi-k2",
    "grok-2",
    "pangu-embedded",
    "solar-open",
];

/// Why `arg` (a flag, or `--flag=value`) is refused, if it is.
pub fn refused(arg: &str) -> Option<(&'static str, &'static str)> {
    let flag = arg.split_once('=').map_or(arg, |(f, _)| f);
    OWNED_FLAGS
        .iter()
        .find(|(names, _)| names.contains(&flag))
        .map(|(names, why)| (names[0], *why))
}

/// `parallel`: a count or `"auto"`.
fn parallel<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Parallel>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Count(u32),
        Word(String),
    }
    let raw = Raw::deserialize(d)?;
    let text = match raw {
        Raw::Count(n) => n.to_string(),
        Raw::Word(w) => w,
    };
    crate::law::slots::parse(&text).map(Some).ok_or_else(|| {
        serde::de::Error::custom(format!(
            "parallel must be \"auto\" or a count from 1 to 64, not {text:?}"
        ))
    })
}

/// A model's weight: a positive number (a zero or a negative weight would
/// make a model wait for ever, which is what `pinned` says of the holder).
fn weight<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let w = f64::deserialize(d)?;
    if w.is_finite() && w > 0.0 {
        Ok(Some(w))
    } else {
        Err(serde::de::Error::custom(format!(
            "weight must be a positive number, not {w}"
        )))
    }
}

/// A file read: the variables it sets and the models' settings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SettingsFile {
    /// Variable name (`WARDEN_...`) to its value, as the environment would
    /// give it.
    pub variables: BTreeMap<String, String>,
    /// Per model id.
    pub models: BTreeMap<String, ModelSettings>,
}

/// Why a file was refused: where, and what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}line {line}, column {column}: {message}", path.as_ref().map_or(String::new(), |p| format!("{}: ", p.display())))]
pub struct FileError {
    /// The file, when read from one.
    pub path: Option<PathBuf>,
    /// 1-based.
    pub line: usize,
    /// 1-based.
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

/// The 1-based line and column of byte `at` in `text`.
pub(crate) fn position(text: &str, at: usize) -> (usize, usize) {
    let before = &text[..at.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

pub(crate) fn toml_error(text: &str, e: &toml::de::Error) -> FileError {
    let (line, column) = e.span().map_or((1, 1), |s| position(text, s.start));
    FileError {
        path: None,
        line,
        column,
        message: e.message().trim().to_string(),
    }
}

/// A value as the environment would give it: numbers and words as
/// written, a boolean as `1` / `0`, a list of words joined by commas.
pub(crate) fn as_variable(v: &toml::Value) -> Option<String> {
    Some(match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => if *b { "1" } else { "0" }.to_string(),
        toml::Value::Array(items) => items
            .iter()
            .map(|i| i.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()?
            .join(","),
        _ => return None,
    })
}

/// What a start refuses in model `id`'s settings `m` (positions found in
/// `text`): a chat template both named and filed, or not one of
/// llama.cpp's; an argument the warden owns. Every one, in that order.
pub(crate) fn model_refusals(id: &str, m: &ModelSettings, text: &str) -> Vec<FileError> {
    let at = |needle: &str, message: String| {
        let (line, column) = position(text, text.find(needle).unwrap_or(0));
        FileError {
            path: None,
            line,
            column,
            message,
        }
    };
    let mut out = Vec::new();
    if let Some(name) = &m.chat_template {
        let quoted = format!("\"{name}\"");
        if m.chat_template_file.is_some() {
            out.push(at(
                &quoted,
                format!("models.\"{id}\": chat_template and chat_template_file both name a template; keep one"),
            ));
        }
        if !LLAMA_CHAT_TEMPLATES.contains(&name.as_str()) {
            out.push(at(
                &quoted,
                format!(
                    "models.\"{id}\".chat_template: `{name}` is not one of llama.cpp's built-in templates ({}); for another, write it to a file and set chat_template_file",
                    LLAMA_CHAT_TEMPLATES.join(", ")
                ),
            ));
        }
    }
    for a in &m.args {
        if let Some((flag, why)) = refused(a) {
            out.push(at(
                &format!("\"{a}\""),
                format!("models.\"{id}\".args: `{a}` is refused: the warden owns {flag} ({why})"),
            ));
        }
    }
    out
}

/// Parses a settings file's text.
pub fn parse(text: &str) -> Result<SettingsFile, FileError> {
    let top: BTreeMap<String, toml::Spanned<toml::Value>> = toml::from_str(text).map_err(|e| toml_error(text, &e))?;
    #[derive(Deserialize)]
    struct Models {
        #[serde(default)]
        models: BTreeMap<String, ModelSettings>,
    }
    let models = toml::from_str::<Models>(text).map_err(|e| toml_error(text, &e))?.models;
    for (id, m) in &models {
        if let Some(e) = model_refusals(id, m, text).into_iter().next() {
            return Err(e);
        }
    }
    let mut variables = BTreeMap::new();
    for (key, value) in top {
        if key == "models" {
            continue;
        }
        let (line, column) = position(text, value.span().start);
        let at = |message: String| FileError {
            path: None,
            line,
            column,
            message,
        };
        let name = format!("WARDEN_{}", key.to_ascii_uppercase());
        if !VARIABLES.contains(&name.as_str()) {
            return Err(at(format!(
                "unknown key `{key}` (the keys are the WARDEN_* variables without the prefix, in lower case, and [models.\"ID\"] tables)"
            )));
        }
        let v = as_variable(value.get_ref())
            .ok_or_else(|| at(format!("`{key}` takes a number, a word, true/false or a list of words")))?;
        variables.insert(name, v);
    }
    Ok(SettingsFile { variables, models })
}

/// Reads and parses `path`.
pub fn load(path: &Path) -> Result<SettingsFile, FileError> {
    let text = std::fs::read_to_string(path).map_err(|e| FileError {
        path: Some(path.to_path_buf()),
        line: 1,
        column: 1,
        message: format!("cannot read it ({e})"),
    })?;
    let mut f = parse(&text).map_err(|e| FileError {
        path: Some(path.to_path_buf()),
        ..e
    })?;
    // A template file is read by the child: it must be there, and a
    // relative path is the settings file's neighbour.
    let base = path.parent().unwrap_or(Path::new("."));
    for (id, m) in f.models.iter_mut() {
        if let Some(t) = m.chat_template_file.as_mut() {
            if t.is_relative() {
                *t = base.join(&*t);
            }
            if !t.is_file() {
                let at = text.find("chat_template_file").unwrap_or(0);
                let (line, column) = position(&text, at);
                return Err(FileError {
                    path: Some(path.to_path_buf()),
                    line,
                    column,
                    message: format!(
                        "models.\"{id}\".chat_template_file: {} is not a readable file",
                        t.display()
                    ),
                });
            }
        }
    }
    Ok(f)
}

/// The most aliases `with_alias` lets one model have.
pub const MAX_WRITTEN_ALIASES: usize = 64;

/// `text` with `alias` among `[models."ID"].aliases` (the table and the
/// list made when missing; an alias already there is left alone), every
/// comment and layout of the rest kept as written.
pub fn with_alias(text: &str, id: &str, alias: &str) -> Result<String, String> {
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| e.to_string())?;
    let models = doc
        .entry("models")
        .or_insert_with(|| {
            let mut t = toml_edit::Table::new();
            t.set_implicit(true);
            toml_edit::Item::Table(t)
        })
        .as_table_mut()
        .ok_or("`models` is not a table")?;
    let model = models
        .entry(id)
        .or_insert_with(|| toml_edit::Item::Table(toml_edit::Table::new()))
        .as_table_mut()
        .ok_or_else(|| format!("`models.\"{id}\"` is not a table"))?;
    let aliases = model
        .entry("aliases")
        .or_insert_with(|| toml_edit::value(toml_edit::Array::new()))
        .as_array_mut()
        .ok_or_else(|| format!("`models.\"{id}\".aliases` is not a list"))?;
    if !aliases.iter().any(|a| a.as_str() == Some(alias)) {
        // A bound on what a client can make the warden write: a name or
        // two per tool is the use; thousands would be an attack on the file.
        if aliases.len() >= MAX_WRITTEN_ALIASES {
            return Err(format!(
                "`models.\"{id}\"` has {MAX_WRITTEN_ALIASES} aliases already; remove some by hand first"
            ));
        }
        aliases.push(alias);
    }
    let out = doc.to_string();
    // What is written must be what the warden reads back.
    parse(&out).map_err(|e| e.to_string())?;
    Ok(out)
}

/// Adds `alias` to `id`'s aliases in the settings file at `path`, written
/// beside and renamed over it (a reader never sees half a file). A link is
/// followed: the file it names is the one rewritten, so a settings file
/// kept in a dotfiles repository stays linked.
pub fn add_alias(path: &Path, id: &str, alias: &str) -> Result<(), String> {
    let path = &std::fs::canonicalize(path).map_err(|e| format!("{}: cannot find it ({e})", path.display()))?;
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: cannot read it ({e})", path.display()))?;
    let out = with_alias(&text, id, alias).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut tmp = path.as_os_str().to_os_string();
    tmp.push(".llm-warden-tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, out)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| format!("{}: cannot write it ({e})", path.display()))
}

/// The file the warden reads: `WARDEN_CONFIG` when set (it must exist),
/// else the default path when a file is there.
pub fn find(var: impl Fn(&str) -> Option<String>) -> Option<(PathBuf, bool)> {
    if let Some(p) = var("WARDEN_CONFIG").filter(|p| !p.trim().is_empty()) {
        return Some((PathBuf::from(p), true));
    }
    let base = var("XDG_CONFIG_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    let p = base.join("llm-warden").join("config.toml");
    p.is_file().then_some((p, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file sets variables by their keys and models by their ids.
    #[test]
    fn a_file_sets_variables_and_models() {
        let f = parse(
            r#"
idle_timeout_s = 600
parallel = "auto"
kv_save = false
workers = ["a:1", "b:2"]
ram_override_gb = 0.5

[models."smol"]
aliases = ["gpt-4o-mini", "llama3"]
parallel = 1
ctx = 4096
idle_timeout_s = 30
"#,
        )
        .unwrap();
        let v = |k: &str| f.variables.get(k).map(String::as_str);
        assert_eq!(v("WARDEN_IDLE_TIMEOUT_S"), Some("600"));
        assert_eq!(v("WARDEN_PARALLEL"), Some("auto"));
        assert_eq!(v("WARDEN_KV_SAVE"), Some("0"));
        assert_eq!(v("WARDEN_WORKERS"), Some("a:1,b:2"));
        assert_eq!(v("WARDEN_RAM_OVERRIDE_GB"), Some("0.5"));
        let m = &f.models["smol"];
        assert_eq!(m.aliases, ["gpt-4o-mini", "llama3"]);
        assert_eq!(
            (m.parallel, m.ctx, m.idle_timeout_s),
            (Some(Parallel::Fixed(1)), Some(4096), Some(30.0))
        );
    }

    /// Every refusal names its line and column and what is wrong.
    #[test]
    fn a_bad_file_is_refused_with_its_line_and_column() {
        for (text, line, column, says) in [
            (
                "idle_timeout_s = 600\nidle_timeot_s = 5\n",
                2,
                17,
                "unknown key `idle_timeot_s`",
            ),
            ("parallel = 4\n[models.m]\nctx = \"big\"\n", 3, 7, "invalid type"),
            ("[models.m]\nwindow = 4096\n", 2, 1, "unknown field `window`"),
            ("[models.m]\nparallel = 100\n", 2, 12, "a count from 1 to 64"),
            ("[models.m]\nweight = 0\n", 2, 10, "weight must be a positive number"),
            ("parallel = \n", 1, 12, ""),
            ("engine = { kind = \"cpu\" }\n", 1, 10, "takes a number, a word"),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!((e.line, e.column), (line, column), "{text:?}: {e}");
            assert!(e.message.contains(says), "{text:?}: {e}");
        }
    }

    /// `WARDEN_CONFIG` names the file; else the default path when present.
    #[test]
    fn the_file_is_found_where_documented() {
        let named = |k: &str| (k == "WARDEN_CONFIG").then(|| "/etc/w.toml".to_string());
        assert_eq!(find(named), Some((PathBuf::from("/etc/w.toml"), true)));
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().to_str().unwrap().to_string();
        let at_home = |k: &str| (k == "HOME").then(|| home.clone());
        assert_eq!(find(at_home), None, "no file: nothing read");
        std::fs::create_dir_all(dir.path().join(".config/llm-warden")).unwrap();
        std::fs::write(dir.path().join(".config/llm-warden/config.toml"), "").unwrap();
        assert_eq!(
            find(at_home),
            Some((dir.path().join(".config/llm-warden/config.toml"), false))
        );
    }

    /// A flag the warden owns is refused by name, with where it is; others
    /// pass; a request's missing sampling fields and system prompt are
    /// filled, a given one never replaced.
    #[test]
    fn owned_flags_are_refused_and_defaults_fill_only_what_is_missing() {
        let e = parse("[models.m]\nargs = [\"--top-k\", \"40\", \"--ctx-size=99\"]\n").unwrap_err();
        assert_eq!((e.line, e.column), (2, 26), "{e}");
        assert!(
            e.message.contains("`--ctx-size=99` is refused: the warden owns -c"),
            "{e}"
        );
        let e = parse("[models.m]\nchat_template = \"gemmaa\"\n").unwrap_err();
        assert_eq!((e.line, e.column), (2, 17), "{e}");
        assert!(
            e.message
                .contains("`gemmaa` is not one of llama.cpp's built-in templates"),
            "{e}"
        );
        let e = parse("[models.m]\nchat_template = \"gemma\"\nchat_template_file = \"t.jinja\"\n").unwrap_err();
        assert!(e.message.contains("keep one"), "{e}");
        let f = parse("[models.m]\nchat_template = \"gemma\"\n").unwrap();
        assert_eq!(f.models["m"].chat_template.as_deref(), Some("gemma"));
        for (arg, owned) in [
            ("--chat-template", true),
            ("-c", true),
            ("--port", true),
            ("-np", true),
            ("--api-key=x", true),
            ("--top-k", false),
            ("--mlock", false),
        ] {
            assert_eq!(refused(arg).is_some(), owned, "{arg}");
        }
        let f = parse("[models.m]\nsystem = \"Be brief.\"\nargs = [\"--mlock\"]\n[models.m.sampling]\ntemperature = 0.2\nstop = [\"END\"]\n").unwrap();
        let m = &f.models["m"];
        let mut body = serde_json::json!({"messages": [{"role": "user", "content": "hi"}], "temperature": 0.9});
        m.fill(body.as_object_mut().unwrap());
        assert_eq!(body["temperature"], 0.9, "the request's own value stays");
        assert_eq!(body["stop"], serde_json::json!(["END"]));
        assert_eq!(
            body["messages"][0],
            serde_json::json!({"role": "system", "content": "Be brief."})
        );
        let mut has =
            serde_json::json!({"messages": [{"role": "system", "content": "mine"}, {"role": "user", "content": "hi"}]});
        m.fill(has.as_object_mut().unwrap());
        assert_eq!(
            has["messages"].as_array().unwrap().len(),
            2,
            "a chat's own system prompt stays alone"
        );
        assert_eq!(has["temperature"], 0.2);
    }

    /// Every key the file takes is a variable the warden reads.
    /// A store's settings fill only what the file left out, field by field.
    #[test]
    fn the_files_word_wins_over_a_stores() {
        let under = ModelSettings {
            ctx: Some(2048),
            system: Some("store".into()),
            sampling: Sampling {
                temperature: Some(0.7),
                stop: Some(vec!["s".into()]),
                ..Default::default()
            },
            ..Default::default()
        };
        let mut file = ModelSettings {
            ctx: Some(4096),
            sampling: Sampling {
                temperature: Some(0.1),
                ..Default::default()
            },
            ..Default::default()
        };
        file.over(&under);
        // why: the file's ctx and temperature win; its gaps take the store's
        assert_eq!(file.ctx, Some(4096));
        assert_eq!(file.sampling.temperature, Some(0.1));
        assert_eq!(file.system.as_deref(), Some("store"));
        assert_eq!(file.sampling.stop, Some(vec!["s".to_string()]));
        // why: nothing in the file: the store's settings whole
        let mut empty = ModelSettings::default();
        empty.over(&under);
        assert_eq!(empty, under);
    }

    /// An alias lands in its model's list, the rest of the file as written.
    #[test]
    fn an_alias_is_written_keeping_the_file() {
        let rows: &[(&str, &str, &str)] = &[
            // why: no models yet: the table and the list are made
            (
                "# mine\nidle_timeout_s = 60\n",
                "# mine\nidle_timeout_s = 60\n\n[models.m]\naliases = [\"a\"]\n",
                "new table",
            ),
            // why: a model with settings keeps them and its comment
            (
                "[models.m]\nctx = 4096 # pinned\n",
                "[models.m]\nctx = 4096 # pinned\naliases = [\"a\"]\n",
                "existing table",
            ),
            // why: an alias already there is not written twice
            (
                "[models.m]\naliases = [\"a\"]\n",
                "[models.m]\naliases = [\"a\"]\n",
                "idempotent",
            ),
            // why: a list gets one more
            (
                "[models.m]\naliases = [\"x\"]\n",
                "[models.m]\naliases = [\"x\", \"a\"]\n",
                "appended",
            ),
        ];
        for (text, want, why) in rows {
            assert_eq!(with_alias(text, "m", "a").unwrap(), *want, "{why}");
        }
        // why: an id with dots is quoted, as the file's own tables are
        let out = with_alias("", "SmolLM2.Q4_1", "gpt").unwrap();
        assert_eq!(
            parse(&out).unwrap().models["SmolLM2.Q4_1"].aliases,
            vec!["gpt".to_string()]
        );
        // why: a file that does not parse is not written over
        assert!(with_alias("ctx = [", "m", "a").is_err());
        // why: a client cannot grow the file without bound
        let full: Vec<String> = (0..MAX_WRITTEN_ALIASES).map(|i| format!("\"a{i}\"")).collect();
        let text = format!("[models.m]\naliases = [{}]\n", full.join(", "));
        assert!(with_alias(&text, "m", "one-more").is_err());
        assert_eq!(
            with_alias(&text, "m", "a0").unwrap(),
            text,
            "one already there is no growth"
        );
    }

    /// A settings file that is a link stays one: its target is rewritten.
    #[cfg(unix)]
    #[test]
    fn an_alias_written_through_a_link_keeps_the_link() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("dotfiles.toml");
        std::fs::write(&target, "[models.m]\n").unwrap();
        let link = dir.path().join("config.toml");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        add_alias(&link, "m", "a").unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(
            std::fs::read_to_string(&target).unwrap(),
            "[models.m]\naliases = [\"a\"]\n"
        );
    }

    #[test]
    fn every_key_is_a_variable_the_config_reads() {
        let read = include_str!("read.rs");
        for v in VARIABLES {
            assert!(read.contains(&format!("\"{v}\"")), "{v} is not read by config/read.rs");
        }
    }
}
