//! `llm-warden run [MODEL]`: a conversation in the terminal, as `ollama
//! run` holds one. The model is loaded first (a model that cannot load is
//! refused before the first prompt), then each message streams its answer
//! and joins the history, which goes with every request while the session
//! runs.
//!
//! At the prompt (`>>> `; none when standard input is not a terminal, so
//! `echo hi | llm-warden run` prints the answer alone):
//! - `"""` opens a message of several lines, closed by a line ending in
//!   `"""`;
//! - `/set system TEXT` sets the system prompt, `/show system` shows it,
//!   `/clear` forgets the history, `/bye` (or Ctrl-D) leaves, `/?` lists
//!   them;
//! - Ctrl-C stops an answer, keeping what was shown of it in the history
//!   (the model sees what the person saw); at the prompt it says how to
//!   leave (with no terminal, where no keys are read, it leaves).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use rustyline::error::ReadlineError;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::turns::Target;

/// `run`'s options.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The model: an id or alias as `llm-warden models` lists it (default:
    /// the server's default model); a path too when no server is running.
    model: Option<String>,
    /// A running server (default: the first llm-warden found on 27182-27199,
    /// else one started for this session).
    #[arg(long, env = "WARDEN_URL")]
    url: Option<String>,
    /// A system prompt to start with (`/set system` changes it).
    #[arg(long)]
    system: Option<String>,
    /// The most tokens to generate per answer (default: the server's).
    #[arg(long)]
    max_tokens: Option<u32>,
    /// Sampling temperature (0: greedy; default: the model server's own).
    #[arg(long)]
    temperature: Option<f64>,
    /// The models directory, for a warden started for this session.
    #[arg(long)]
    models_dir: Option<PathBuf>,
}

/// What one typed line asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Input {
    /// A message to send.
    Say(String),
    /// Nothing yet: an empty line, or a line inside an open `"""` block.
    Nothing,
    /// Leave.
    Bye,
    /// Forget the history.
    Clear,
    /// Set the system prompt.
    SetSystem(String),
    /// Show the system prompt.
    ShowSystem,
    /// List the commands.
    Help,
    /// A command this prompt does not know.
    Unknown(String),
}

/// The prompt's reader: turns lines into inputs, holding an open `"""`
/// block until it closes.
#[derive(Debug, Default)]
pub(crate) struct Lines {
    open: Option<String>,
}

/// The block delimiter.
const BLOCK: &str = "\"\"\"";

impl Lines {
    /// What `line` asks, given the lines before it.
    pub fn feed(&mut self, line: &str) -> Input {
        if let Some(mut held) = self.open.take() {
            if let Some(last) = line.trim_end().strip_suffix(BLOCK) {
                held.push_str(last);
                let text = held.trim_end_matches('\n');
                return if text.trim().is_empty() {
                    Input::Nothing
                } else {
                    Input::Say(text.to_string())
                };
            }
            held.push_str(line);
            held.push('\n');
            self.open = Some(held);
            return Input::Nothing;
        }
        let t = line.trim();
        if let Some(rest) = t.strip_prefix(BLOCK) {
            if let Some(whole) = rest.strip_suffix(BLOCK) {
                return say(whole);
            }
            self.open = Some(if rest.is_empty() {
                String::new()
            } else {
                format!("{rest}\n")
            });
            return Input::Nothing;
        }
        if let Some(cmd) = t.strip_prefix('/') {
            return command(cmd);
        }
        say(t)
    }

    /// Whether a `"""` block is open (the prompt shows `... `).
    pub fn is_open(&self) -> bool {
        self.open.is_some()
    }
}

fn say(text: &str) -> Input {
    let text = text.trim();
    if text.is_empty() {
        Input::Nothing
    } else {
        Input::Say(text.to_string())
    }
}

fn command(cmd: &str) -> Input {
    let mut words = cmd.split_whitespace();
    match (words.next().unwrap_or(""), words.next()) {
        ("bye" | "exit", None) => Input::Bye,
        ("clear", None) => Input::Clear,
        ("?" | "help", _) => Input::Help,
        ("show", Some("system")) => Input::ShowSystem,
        ("set", Some("system")) => {
            let text = cmd.trim_start()["set".len()..].trim_start()["system".len()..].trim();
            Input::SetSystem(text.to_string())
        }
        _ => Input::Unknown(format!("/{}", cmd.trim())),
    }
}

const HELP: &str = "Available commands:
  /set system TEXT   Set the system prompt
  /show system       Show the system prompt
  /clear             Forget this conversation's history
  /bye               Leave (Ctrl-D too)
  /?, /help          This list

Use \"\"\" to begin and end a message of several lines.
Ctrl-C stops an answer.";

pub async fn run(a: RunArgs) -> anyhow::Result<ExitCode> {
    let target = Target::reach(a.url.as_deref(), a.models_dir.clone(), a.model.as_deref()).await?;
    // A warden started here took the model as its default (a path works
    // too); a running one is asked for it by name.
    let model = a.model.clone().filter(|_| !target.is_local());
    let result = session(&target, &a, model).await;
    target.close().await;
    match result? {
        Left::Said(code) => Ok(code),
        // The prompt's reading thread still waits on standard input, and
        // nothing else would end it: leave now, as a shell's Ctrl-C does.
        Left::Interrupted => std::process::exit(130),
    }
}

/// How a session ended.
enum Left {
    /// By `/bye`, Ctrl-D or the end of the input: this exit status.
    Said(ExitCode),
    /// By Ctrl-C at a prompt that reads no keys (no terminal).
    Interrupted,
}

async fn session(target: &Target, a: &RunArgs, model: Option<String>) -> anyhow::Result<Left> {
    eprintln!(
        "loading {}…",
        model.as_deref().or(a.model.as_deref()).unwrap_or("the default model")
    );
    let loaded = target
        .server
        .post("/warden/load", &super::load::load_body(model.as_deref(), None))
        .await?;
    eprintln!("{}", super::load::format_loaded(&loaded));
    let interrupts = interrupts();
    let mut editor = rustyline::DefaultEditor::new()?;
    let mut lines = Lines::default();
    let mut system = a.system.clone();
    let mut history: Vec<Value> = Vec::new();
    let mut failed = false;
    loop {
        let prompt = if lines.is_open() { "... " } else { ">>> " };
        // On a terminal the editor reads Ctrl-C as a key; elsewhere it
        // comes as a signal while the line is read, and leaves.
        let mut at_prompt = interrupts.clone();
        at_prompt.borrow_and_update();
        let (back, line) = tokio::select! {
            read = read_line(editor, prompt) => read,
            _ = at_prompt.changed() => return Ok(Left::Interrupted),
        };
        editor = back;
        let line = match line {
            Ok(l) => l,
            Err(ReadlineError::Interrupted) => {
                eprintln!("Use Ctrl + d or /bye to exit.");
                continue;
            }
            Err(ReadlineError::Eof) => break,
            Err(e) => return Err(e.into()),
        };
        match lines.feed(&line) {
            Input::Nothing => {}
            Input::Bye => break,
            Input::Clear => {
                history.clear();
                eprintln!("Cleared the conversation's history.");
            }
            Input::SetSystem(s) => {
                system = Some(s).filter(|s| !s.is_empty());
                eprintln!("Set the system prompt.");
            }
            Input::ShowSystem => eprintln!("{}", system.as_deref().unwrap_or("(no system prompt)")),
            Input::Help => eprintln!("{HELP}"),
            Input::Unknown(c) => eprintln!("Unknown command '{c}'. Type /? for help."),
            Input::Say(text) => {
                let _ = editor.add_history_entry(text.as_str());
                history.push(json!({"role": "user", "content": text}));
                let mut messages: Vec<Value> = system.iter().map(|s| json!({"role": "system", "content": s})).collect();
                messages.extend(history.iter().cloned());
                let body = super::chat::request(messages, model.as_deref(), a.max_tokens, a.temperature);
                let mut stop = interrupts.clone();
                stop.borrow_and_update();
                let answer = target
                    .ask(&body, async move {
                        let _ = stop.changed().await;
                    })
                    .await?;
                println!();
                if answer.failed && answer.text.is_empty() {
                    // Nothing answered: the message leaves the history so
                    // that the next one is not sent after it.
                    history.pop();
                    failed = true;
                } else {
                    history.push(json!({"role": "assistant", "content": answer.text}));
                }
            }
        }
    }
    Ok(Left::Said(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS }))
}

/// One line from the prompt, read on a blocking thread (the editor owns the
/// terminal while it reads) and handed back with the editor.
async fn read_line(
    mut editor: rustyline::DefaultEditor,
    prompt: &'static str,
) -> (rustyline::DefaultEditor, Result<String, ReadlineError>) {
    tokio::task::spawn_blocking(move || {
        let line = editor.readline(prompt);
        (editor, line)
    })
    .await
    .unwrap_or_else(|join| std::panic::resume_unwind(join.into_panic()))
}

/// Ctrl-C, counted: an answer stops at the next one. Installing the handler
/// here is what keeps Ctrl-C from ending the program while an answer
/// streams (at the prompt the editor reads it as a key).
fn interrupts() -> watch::Receiver<u64> {
    let (tx, rx) = watch::channel(0u64);
    actix_web::rt::spawn(async move {
        while tokio::signal::ctrl_c().await.is_ok() {
            tx.send_modify(|n| *n += 1);
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(s: &str) -> Input {
        Input::Say(s.into())
    }

    /// Lines typed one after another, and what each asks.
    #[test]
    fn lines_become_inputs() {
        let rows: &[(&[&str], &[Input])] = &[
            // why: a plain line is a message, trimmed
            (&["  hello  "], &[said("hello")]),
            // why: an empty line sends nothing
            (&["", "   "], &[Input::Nothing, Input::Nothing]),
            (&["/bye"], &[Input::Bye]),
            (&["/exit"], &[Input::Bye]),
            (&["/clear"], &[Input::Clear]),
            (&["/?"], &[Input::Help]),
            (&["/help"], &[Input::Help]),
            (&["/show system"], &[Input::ShowSystem]),
            // why: the system prompt keeps its inner spacing
            (&["/set system Be  brief."], &[Input::SetSystem("Be  brief.".into())]),
            (&["/set system"], &[Input::SetSystem(String::new())]),
            // why: a command with a typo is named back, not sent to the model
            (&["/by"], &[Input::Unknown("/by".into())]),
            (&["/bye now"], &[Input::Unknown("/bye now".into())]),
            // why: a block of several lines is one message
            (
                &["\"\"\"", "one", "  two", "three\"\"\""],
                &[
                    Input::Nothing,
                    Input::Nothing,
                    Input::Nothing,
                    said("one\n  two\nthree"),
                ],
            ),
            // why: text on the opening line belongs to the block
            (
                &["\"\"\"first", "second\"\"\""],
                &[Input::Nothing, said("first\nsecond")],
            ),
            // why: inside a block a slash is text
            (
                &["\"\"\"", "/bye", "\"\"\""],
                &[Input::Nothing, Input::Nothing, said("/bye")],
            ),
            // why: a block opened and closed on one line
            (&["\"\"\"just this\"\"\""], &[said("just this")]),
            // why: an empty block sends nothing
            (&["\"\"\"", "\"\"\""], &[Input::Nothing, Input::Nothing]),
        ];
        for (i, (typed, want)) in rows.iter().enumerate() {
            let mut lines = Lines::default();
            let got: Vec<Input> = typed.iter().map(|l| lines.feed(l)).collect();
            assert_eq!(got, *want, "row {i}: {typed:?}");
            assert!(!lines.is_open(), "row {i}: a block left open");
        }
    }
}
