//! The binary's `--help` and `docs/clients.md` say the same: every command
//! `llm-warden --help` lists has its row in the commands table, and every
//! flag a command's own `--help` lists is named in that row.

use std::process::Command;

/// `llm-warden args... --help`'s text.
fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_llm-warden"))
        .args(args)
        .arg("--help")
        .output()
        .expect("the binary runs");
    assert!(out.status.success(), "{args:?} --help failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The names under a help text's `heading:` (its first word a line).
fn listed(text: &str, heading: &str) -> Vec<String> {
    text.lines()
        .skip_while(|l| l.trim() != heading)
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|w| w != "help")
        .collect()
}

/// The long flags of a command's help (`--help` and `--version` aside):
/// the names that open an option's line, not those its description cites.
fn flags(text: &str) -> Vec<String> {
    text.lines()
        .skip_while(|l| l.trim() != "Options:")
        .filter(|l| l.trim_start().starts_with('-'))
        .flat_map(|l| {
            l.split_whitespace()
                .take_while(|w| w.starts_with('-') || w.starts_with('<') || w.starts_with('['))
                .filter(|w| w.starts_with("--"))
                .map(|w| {
                    w.trim_end_matches(',')
                        .split(['=', '<', '['])
                        .next()
                        .unwrap_or(w)
                        .to_string()
                })
                .collect::<Vec<_>>()
        })
        .filter(|w| w != "--help" && w != "--version")
        .collect()
}

#[test]
fn every_command_and_flag_is_in_the_commands_table() {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/clients.md")).unwrap();
    let row = |cmd: &str| -> Option<String> {
        docs.lines()
            .find(|l| l.starts_with(&format!("| `llm-warden {cmd}")))
            .map(str::to_string)
    };
    let mut missing = Vec::new();
    let commands = listed(&help(&[]), "Commands:");
    assert!(
        commands.len() > 10 && commands.iter().any(|c| c == "run"),
        "{commands:?}"
    );
    for cmd in &commands {
        // A command of subcommands (`config check`): each has its row.
        let subs = listed(&help(&[cmd]), "Commands:");
        let paths: Vec<Vec<&str>> = if subs.is_empty() {
            vec![vec![cmd.as_str()]]
        } else {
            subs.iter().map(|s| vec![cmd.as_str(), s.as_str()]).collect()
        };
        for path in paths {
            let name = path.join(" ");
            let Some(r) = row(&name) else {
                missing.push(format!("no row for `llm-warden {name}`"));
                continue;
            };
            for f in flags(&help(&path)) {
                if !r.contains(&f) {
                    missing.push(format!("`llm-warden {name}`'s row lacks {f}"));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/clients.md's commands table:\n{}",
        missing.join("\n")
    );
}
