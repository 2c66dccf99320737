//! The run's phases, in the order `main` calls them, over one context
//! ([`Run`]): each phase calls its module's measure and keeps the table
//! lines, chart series and headline figures it yields. A measure that fails
//! is recorded and the run goes on (the report names it, and the run fails
//! after the report); a process that cannot be started stops the run.
//! `paired` holds the phases paired against the direct server (pairs,
//! relay, aa).

mod paired;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};

use crate::chart::{self, Series};
use crate::client;
use crate::procs::{Direct, WardenProc};
use crate::report::{self, Headline, Line, Raw, Start};
use crate::{
    Args, Setup, brake, cold, concurrency, contention, gguf, kv, lone, lone_paired, memory, residents, rpc, stats,
    status,
};

/// What every phase shares, and what the phases found so far.
pub struct Run<'a> {
    args: &'a Args,
    http: reqwest::Client,
    setup: Setup,
    raw: Raw,
    lines: Vec<Line>,
    series: Vec<Series>,
    /// `phase: error` of each failed phase.
    errors: Vec<String>,
    headline: Headline,
    /// The direct server's stop + healthy time (medians of the cold phase),
    /// which the brake's respawn is set against.
    restart_ms: Option<f64>,
}

impl<'a> Run<'a> {
    pub fn new(args: &'a Args, http: reqwest::Client, setup: Setup) -> Self {
        Self {
            args,
            http,
            setup,
            raw: Raw::default(),
            lines: Vec::new(),
            series: Vec::new(),
            errors: Vec::new(),
            headline: Headline::default(),
            restart_ms: None,
        }
    }

    fn on(&self, phase: &str) -> bool {
        self.args.phases.iter().any(|x| x == phase)
    }

    /// `r`'s value, or `None` with its error recorded under `phase`.
    fn keep<T>(&mut self, phase: &str, r: anyhow::Result<T>) -> Option<T> {
        r.map_err(|e| self.errors.push(format!("{phase}: {e:#}"))).ok()
    }

    pub fn gguf(&mut self, models_dir: &Path) {
        if !self.on("gguf") {
            return;
        }
        eprintln!("== gguf header reads");
        let mut paths: Vec<PathBuf> = std::fs::read_dir(models_dir)
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        paths.retain(|p| p.extension().is_some_and(|e| e == "gguf") && p.is_file());
        paths.sort();
        if !paths.contains(&self.setup.model) {
            paths.push(self.setup.model.clone());
        }
        let r = gguf::run(&paths, self.args.gguf_n, &mut self.raw);
        if let Some(rows) = self.keep("gguf", r) {
            self.lines.extend(gguf::lines(&rows));
        }
    }

    /// The phases on the shared warden (and the direct server of the warm
    /// ones): pairs, relay, aa, status, cold, rss.
    pub async fn shared_warden(&mut self) -> anyhow::Result<()> {
        if !["pairs", "relay", "aa", "status", "cold", "rss"]
            .iter()
            .any(|p| self.on(p))
        {
            return Ok(());
        }
        let (w, rest_kib) = self.start_warden().await?;
        if ["pairs", "relay", "aa", "status"].iter().any(|p| self.on(p)) {
            let mut d = self.direct().await?;
            self.pairs(&w, &mut d).await;
            self.relay(&d).await?;
            self.aa(&mut d).await?;
            self.status(&w, &d).await;
            d.stop().await;
        }
        self.cold(&w).await;
        self.rss(&w, rest_kib).await;
        w.stop().await;
        Ok(())
    }

    /// Starts the shared warden and learns its window; after one warm turn
    /// and a second of quiet, its `VmRSS` at rest (KiB).
    async fn start_warden(&mut self) -> anyhow::Result<(WardenProc, u64)> {
        eprintln!("== starting the warden and llama-server direct");
        let s = &mut self.setup;
        let w = WardenProc::spawn(&s.warden_bin, &s.server, &s.model, true, &[]).await?;
        let status = w.wait_ready(&self.http).await?;
        s.window = status["context_tokens"]
            .as_u64()
            .context("no context_tokens in the status")? as u32;
        s.model_id = status["model"].as_str().unwrap_or("model").to_string();
        eprintln!(
            "  warden at {} loaded {} with a {}-token window",
            w.base, s.model_id, s.window
        );
        client::stream(&self.http, &w.target(), client::body("Warm-up: say hello.", 8, true)).await?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let rest_kib = w.rss_kib().context("the warden's VmRSS is unreadable")?;
        self.headline.rss_rest_mib = memory::mib(rest_kib);
        Ok((w, rest_kib))
    }

    /// A direct server with the warden's model and window, healthy.
    async fn direct(&self) -> anyhow::Result<Direct> {
        let s = &self.setup;
        let mut d = Direct::spawn(&s.server, &s.model, &s.model_id, s.window)?;
        d.wait_healthy(&self.http, Duration::from_millis(5)).await?;
        Ok(d)
    }

    /// Replaces `d` by a fresh direct server like it.
    async fn restart(&self, d: &mut Direct) -> anyhow::Result<()> {
        let s = &self.setup;
        d.restart(&self.http, &s.server, &s.model, &s.model_id, s.window).await
    }

    async fn status(&mut self, w: &WardenProc, d: &Direct) {
        if !self.on("status") {
            return;
        }
        eprintln!("== /warden/status latency ({} requests per set)", self.args.status_n);
        let r = status::run(&self.http, w, d, self.args.status_n, &mut self.raw).await;
        if let Some(o) = self.keep("status", r) {
            self.headline.status_p99_ms = o.p99();
            self.lines.extend(o.lines());
        }
    }

    async fn cold(&mut self, w: &WardenProc) {
        if !self.on("cold") {
            return;
        }
        eprintln!("== cold load ({} rounds)", self.args.rounds);
        let r = cold::run(&self.http, &self.setup, w, self.args.rounds, &mut self.raw).await;
        let Some(o) = self.keep("cold", r) else { return };
        self.headline.cold_ratio = o.ratio();
        self.restart_ms = Some(stats::median(&o.direct_stop) + stats::median(&o.direct_healthy));
        self.lines.extend(o.lines());
        self.series.push(Series {
            name: "cold load",
            colour: "#2ca02c",
            values: o.ratios,
        });
    }

    /// The rss phase; without it, the at-rest line alone.
    async fn rss(&mut self, w: &WardenProc, rest_kib: u64) {
        if !self.on("rss") {
            let rest = memory::Outcome {
                rest_kib,
                ..Default::default()
            };
            self.lines.extend(rest.lines().into_iter().take(1));
            return;
        }
        eprintln!("== warden VmRSS over {} short turns", self.args.turns);
        let r = memory::run(&self.http, w, self.args.turns, rest_kib, &mut self.raw).await;
        if let Some(o) = self.keep("rss", r) {
            self.headline.rss_growth_mib = o.growth_mib();
            self.lines.extend(o.lines());
        }
    }

    pub async fn brake(&mut self) {
        if !self.on("brake") {
            return;
        }
        let a = self.args;
        eprintln!("== brake shrink+respawn ({} rounds, fresh warden each)", a.rounds);
        let r = brake::run(&self.http, &self.setup, a.rounds, &a.brake_ram_gb, &mut self.raw).await;
        if let Some(rounds) = self.keep("brake", r) {
            self.headline.respawn_s = brake::respawn_s(&rounds);
            self.lines.extend(brake::lines(&rounds, self.restart_ms));
        }
    }

    pub async fn kv(&mut self) {
        if !self.on("kv") {
            return;
        }
        let rounds = self.args.rounds.min(3);
        eprintln!(
            "== kv: the next turn after a reap and a switch, restored or re-read, SmolLM2 and Gemma ({rounds} rounds)"
        );
        let r = kv::run(&self.http, &self.setup, rounds, &mut self.raw).await;
        if let Some(l) = self.keep("kv", r) {
            self.lines.extend(l);
        }
    }

    pub async fn residents(&mut self) {
        if !self.on("residents") {
            return;
        }
        let rounds = self.args.rounds.min(3);
        eprintln!(
            "== residents: a switch between resident models vs today's switch, chat beside embeddings, RSS ({rounds} rounds)"
        );
        let r = residents::run(&self.http, &self.setup, rounds, &mut self.raw).await;
        if let Some(l) = self.keep("residents", r) {
            self.lines.extend(l);
        }
    }

    pub async fn rpc(&mut self) {
        if !self.on("rpc") {
            return;
        }
        let a = self.args;
        eprintln!(
            "== rpc: local alone vs local + 2 loopback workers ({} rounds)",
            a.rounds
        );
        let r = rpc::run(&self.http, &self.setup, a.rounds, a.max_tokens, &mut self.raw).await;
        if let Some(l) = self.keep("rpc", r) {
            self.lines.extend(l);
        }
    }

    pub async fn concurrency(&mut self) {
        if !self.on("concurrency") {
            return;
        }
        let a = self.args;
        let rounds = a.rounds.min(3);
        eprintln!("== concurrency: 1, 4 and 8 clients at once, warden vs llama-server's own slots ({rounds} rounds)");
        let r = concurrency::run(&self.http, &self.setup, rounds, a.max_tokens, &mut self.raw).await;
        if let Some(l) = self.keep("concurrency", r) {
            self.lines.extend(l);
        }
    }

    pub async fn lone(&mut self) {
        if !self.on("lone") {
            return;
        }
        let rounds = self.args.rounds.min(3);
        eprintln!(
            "== lone: a stream alone after held conversations, and a return, warden vs llama-server with one slot and with its defaults ({rounds} rounds)"
        );
        let r = lone::run(&self.http, &self.setup, rounds, &mut self.raw).await;
        if let Some(l) = self.keep("lone", r) {
            self.lines.extend(l);
        }
    }

    pub async fn lone_paired(&mut self) {
        if !self.on("lone-paired") {
            return;
        }
        let rounds = self.args.lone_paired_rounds;
        eprintln!("== lone-paired: the lone decode, the three sides alive at once and taking turns ({rounds} rounds)");
        let r = lone_paired::run(&self.http, &self.setup, rounds, &mut self.raw).await;
        if let Some(l) = self.keep("lone-paired", r) {
            self.lines.extend(l);
        }
    }

    pub async fn contention(&mut self) {
        if !self.on("contention") {
            return;
        }
        let rounds = self.args.rounds.min(3);
        eprintln!(
            "== contention: two models that cannot both be resident, the scheduler vs first come, first served ({rounds} rounds)"
        );
        let r = contention::run(&self.http, &self.setup, rounds, &mut self.raw).await;
        if let Some(l) = self.keep("contention", r) {
            self.lines.extend(l);
        }
    }

    /// Prints the report and writes its files under `out_dir`; fails after
    /// that when a phase failed.
    pub fn report(self, out_dir: &Path, start: &Start) -> anyhow::Result<()> {
        let md = report::markdown(self.args, &self.setup, start, &self.lines, &self.errors);
        let last = self.headline.line();
        let svg = chart::svg(
            &format!("llm-warden / llama-server direct, per round ({})", start.when),
            &self.series,
        );
        report::write(
            out_dir,
            &start.stamp,
            &format!("{md}\n`{last}`\n"),
            &self.raw.csv(),
            &svg,
        )?;
        println!("{md}");
        println!(
            "results: {}/latest.{{md,csv,svg}} and {}.*",
            out_dir.display(),
            start.stamp
        );
        println!("{last}");
        if !self.errors.is_empty() {
            bail!("{} phase(s) failed", self.errors.len());
        }
        Ok(())
    }
}
