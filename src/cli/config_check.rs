//! `config check`'s reading of a settings file: every problem a start would
//! refuse, each at its line and column (a start stops at the first), and,
//! as warnings, what a start takes but is most likely a slip: a model id
//! the catalog does not hold. An unknown key, an unknown model setting and
//! an unknown id each come with the nearest known name ("did you mean").
//!
//! Pure over the file's text and the catalog's ids; `config` prints it.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::config::WardenConfig;
use crate::config::file::{self, FileError, ModelSettings, VARIABLES};

/// The settings a `[models."ID"]` table takes.
pub const MODEL_KEYS: &[&str] = &[
    "aliases",
    "parallel",
    "ctx",
    "idle_timeout_s",
    "pinned",
    "sampling",
    "system",
    "chat_template_file",
    "chat_template",
    "args",
];

/// One thing `config check` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// A start refuses it (else a warning).
    pub error: bool,
    /// Where, and what.
    pub at: FileError,
}

/// Everything wrong with `text`, in the file's order; `ids`: the catalog's
/// ids and aliases a model table may name.
pub fn check(text: &str, ids: &[String]) -> Vec<Finding> {
    let top: BTreeMap<String, toml::Spanned<toml::Value>> = match toml::from_str(text) {
        Ok(t) => t,
        // Nothing past a syntax error can be read.
        Err(e) => return vec![error(file::toml_error(text, &e))],
    };
    let mut out = Vec::new();
    for (key, value) in &top {
        if key != "models" {
            out.extend(variable(text, key, value));
        }
    }
    #[derive(Deserialize)]
    struct Models {
        #[serde(default)]
        models: BTreeMap<String, BTreeMap<String, toml::Spanned<toml::Value>>>,
    }
    match toml::from_str::<Models>(text) {
        Ok(m) => {
            for (id, fields) in &m.models {
                out.extend(model(text, id, fields, ids));
            }
        }
        Err(e) => out.push(error(file::toml_error(text, &e))),
    }
    out.sort_by_key(|f| (f.at.line, f.at.column));
    out
}

/// A top-level key: known, of a kind a variable takes, a value the warden
/// accepts.
fn variable(text: &str, key: &str, value: &toml::Spanned<toml::Value>) -> Option<Finding> {
    let at = |message: String| at(text, value.span().start, message);
    let name = format!("WARDEN_{}", key.to_ascii_uppercase());
    let Some(&known) = VARIABLES.iter().find(|v| **v == name) else {
        let keys = VARIABLES
            .iter()
            .map(|v| v.trim_start_matches("WARDEN_").to_ascii_lowercase());
        let keys: Vec<String> = keys.chain(["models".to_string()]).collect();
        return Some(error(at(format!(
            "unknown key `{key}`{} (the keys are the WARDEN_* variables without the prefix, in lower case, and [models.\"ID\"] tables)",
            did_you_mean(key, keys.iter().map(String::as_str))
        ))));
    };
    let Some(v) = file::as_variable(value.get_ref()) else {
        return Some(error(at(format!(
            "`{key}` takes a number, a word, true/false or a list of words"
        ))));
    };
    match WardenConfig::from_lookup(|n| (n == known).then(|| v.clone())) {
        Err(e) if e.name == known => Some(error(at(format!("{key} = {v:?} is not valid: {}", e.expected)))),
        _ => None,
    }
}

/// A `[models."ID"]` table: each setting known and of its kind, then what a
/// start refuses of the whole, and the id against the catalog.
fn model(text: &str, id: &str, fields: &BTreeMap<String, toml::Spanned<toml::Value>>, ids: &[String]) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut table = toml::Table::new();
    for (key, value) in fields {
        let at = |message: String| at(text, value.span().start, message);
        if !MODEL_KEYS.contains(&key.as_str()) {
            out.push(error(at(format!(
                "models.\"{id}\": unknown setting `{key}`{} (the settings: {})",
                did_you_mean(key, MODEL_KEYS.iter().copied()),
                MODEL_KEYS.join(", ")
            ))));
            continue;
        }
        let one = toml::Table::from_iter([(key.clone(), value.get_ref().clone())]);
        match ModelSettings::deserialize(toml::Value::Table(one)) {
            Ok(_) => {
                table.insert(key.clone(), value.get_ref().clone());
            }
            Err(e) => out.push(error(at(format!("models.\"{id}\".{key}: {}", e.message().trim())))),
        }
    }
    if let Ok(m) = ModelSettings::deserialize(toml::Value::Table(table)) {
        out.extend(file::model_refusals(id, &m, text).into_iter().map(error));
    }
    if !ids.iter().any(|i| i == id) {
        let header = [
            format!("[models.\"{id}\"]"),
            format!("[models.{id}]"),
            format!("[models.'{id}']"),
        ]
        .iter()
        .find_map(|h| text.find(h.as_str()))
        .or_else(|| text.find(&format!("\"{id}\"")))
        .unwrap_or(0);
        out.push(Finding {
            error: false,
            at: at(
                text,
                header,
                format!(
                    "models.\"{id}\": no model '{id}' in the catalog{}: these settings wait for it",
                    did_you_mean(id, ids.iter().map(String::as_str))
                ),
            ),
        });
    }
    out
}

fn error(at: FileError) -> Finding {
    Finding { error: true, at }
}

fn at(text: &str, offset: usize, message: String) -> FileError {
    let (line, column) = file::position(text, offset);
    FileError {
        path: None,
        line,
        column,
        message,
    }
}

/// ` (did you mean `x`?)` for the name among `known` nearest `word`, when
/// one is near enough to be the slip: at most a third of its letters (and
/// at least 2) apart, whole or, for a word of 6 letters or more, by the
/// head of the longer name.
pub fn did_you_mean<'a>(word: &str, known: impl Iterator<Item = &'a str>) -> String {
    let w = word.to_ascii_lowercase();
    let most = (w.chars().count() / 3).max(2);
    let n = w.chars().count();
    let score = |k: &str| {
        let k = k.to_ascii_lowercase();
        let whole = distance(&w, &k);
        // A longer name slipped at its start (`SmolLM-135M` for
        // `SmolLM2-135M-Instruct.Q4_1`): its head, against a word long
        // enough not to match any head.
        if n >= 6 {
            let head: String = k.chars().take(n + 1).collect();
            whole.min(distance(&w, &head))
        } else {
            whole
        }
    };
    known
        .map(|k| (score(k), k))
        .filter(|(d, _)| *d <= most)
        .min()
        .map_or_else(String::new, |(_, k)| format!(" (did you mean `{k}`?)"))
}

/// The edit distance between `a` and `b` (insertions, deletions,
/// substitutions), by characters.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(row[j + 1] + 1);
            prev = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(text: &str, ids: &[&str]) -> Vec<(bool, usize, usize, String)> {
        let ids: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
        check(text, &ids)
            .into_iter()
            .map(|f| (f.error, f.at.line, f.at.column, f.at.message))
            .collect()
    }

    #[test]
    fn every_problem_at_its_place() {
        let text = "\
idle_timeout_s = \"ten minutes\"
parralel = 2
parallel = 4
[models.\"SmolLM-135M\"]
ctx = \"big\"
pined = true
chat_template = \"gemmaa\"
";
        let got = said(text, &["SmolLM2-135M-Instruct.Q4_1", "gemma-3-270m-q4_k_m"]);
        let lines: Vec<(bool, usize)> = got.iter().map(|g| (g.0, g.1)).collect();
        // why: each problem once, in the file's order, a start's refusals as
        // errors and the unknown id as a warning
        assert_eq!(
            lines,
            vec![(true, 1), (true, 2), (false, 4), (true, 5), (true, 6), (true, 7)],
            "{got:#?}"
        );
        assert_eq!(got[2].2, 1, "the warning at the table's header");
        let m = |i: usize| got[i].3.as_str();
        assert!(
            m(0).starts_with("idle_timeout_s = \"ten minutes\" is not valid: "),
            "{}",
            m(0)
        );
        assert_eq!(got[0].2, 18, "the value's column");
        assert!(
            m(1).contains("unknown key `parralel` (did you mean `parallel`?)"),
            "{}",
            m(1)
        );
        assert!(
            m(2).contains("no model 'SmolLM-135M' in the catalog (did you mean `SmolLM2-135M-Instruct.Q4_1`?)"),
            "{}",
            m(2)
        );
        assert!(m(3).starts_with("models.\"SmolLM-135M\".ctx: "), "{}", m(3));
        assert!(
            m(4).contains("unknown setting `pined` (did you mean `pinned`?)"),
            "{}",
            m(4)
        );
        assert!(
            m(5).contains("`gemmaa` is not one of llama.cpp's built-in templates"),
            "{}",
            m(5)
        );
    }

    #[test]
    fn a_file_a_start_takes_says_nothing() {
        let text = "parallel = 2\n[models.m]\naliases = [\"x\"]\nchat_template = \"chatml\"\n";
        assert_eq!(said(text, &["m"]), vec![]);
        // why: a syntax error stops the reading: one error, where it is
        let got = said("parallel = \n", &[]);
        assert_eq!((got.len(), got[0].0, got[0].1), (1, true, 1), "{got:?}");
    }

    #[test]
    fn near_names_only() {
        let keys = ["parallel", "idle_timeout_s", "models"];
        let rows = [
            ("parralel", " (did you mean `parallel`?)"),
            ("idle_timeout", " (did you mean `idle_timeout_s`?)"),
            ("idle_timout_s", " (did you mean `idle_timeout_s`?)"),
            ("PARALLEL", " (did you mean `parallel`?)"),
            // why: nothing near: no guess
            ("colour", ""),
            ("xy", ""),
        ];
        for (word, want) in rows {
            assert_eq!(did_you_mean(word, keys.iter().copied()), want, "{word}");
        }
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("", "abc"), 3);
    }
}
