//! The paired phases against the shared direct server: `pairs` (the
//! warden), `relay` and `aa` (the diagnostics: a bare hop, a second direct
//! server).

use crate::client::Target;
use crate::procs::{Direct, WardenProc};
use crate::{chart::Series, pairs, relay};

use super::Run;

impl Run<'_> {
    pub(super) async fn pairs(&mut self, w: &WardenProc, d: &mut Direct) {
        if !self.on("pairs") {
            return;
        }
        eprintln!(
            "== warm pairs: decode and time to first token ({} rounds)",
            self.args.rounds
        );
        let r = self.pair_rounds(w, d).await;
        let Some(o) = self.keep("pairs", r) else { return };
        self.headline.decode_ratio = o.decode_ratio();
        self.headline.ttft_added_ms = o.ttft_added_ms();
        self.lines.extend(o.lines());
        self.series.push(Series {
            name: "decode (client)",
            colour: "#1f77b4",
            values: o.decode_ratios,
        });
        self.series.push(Series {
            name: "decode (server timings)",
            colour: "#17becf",
            values: o.server_ratios,
        });
        self.series.push(Series {
            name: "TTFT warm, cached prompt",
            colour: "#ff7f0e",
            values: o.ttft_ratios,
        });
    }

    async fn pair_rounds(&mut self, w: &WardenProc, d: &mut Direct) -> anyhow::Result<pairs::Outcome> {
        let wt = w.target();
        let mut o = pairs::Outcome::default();
        for r in 0..self.args.rounds {
            // Fresh processes on both sides every round, started
            // in alternating order: two identical llama-servers
            // decode several % apart (see the aa diagnostic), so
            // the medians must be over process instances too.
            if r.is_multiple_of(2) {
                self.restart(d).await?;
                w.reload(&self.http).await?;
            } else {
                w.reload(&self.http).await?;
                self.restart(d).await?;
            }
            let dt = d.target();
            pairs::warm(&self.http, &dt, &wt).await?;
            let side = pairs::Side {
                target: &wt,
                name: "warden",
                pid: Some(w.proc.pid),
                shares_server: false,
            };
            o.round(&self.http, &dt, &side, "pairs", r, self.args.max_tokens, &mut self.raw)
                .await?;
        }
        Ok(o)
    }

    pub(super) async fn relay(&mut self, d: &Direct) -> anyhow::Result<()> {
        if !self.on("relay") {
            return Ok(());
        }
        eprintln!(
            "== diagnostic: bare TCP relay against direct ({} rounds)",
            self.args.rounds
        );
        let dt = d.target();
        let addr: std::net::SocketAddr = d.base.trim_start_matches("http://").parse()?;
        let rt = Target {
            base: format!("http://127.0.0.1:{}", relay::spawn(addr)?),
            bearer: dt.bearer.clone(),
            conversation: None,
        };
        let side = pairs::Side {
            target: &rt,
            name: "relay",
            pid: None,
            shares_server: true,
        };
        // No pooled connections: llama-server closes each
        // connection after its answer, and through the relay that
        // close can arrive after the next request reused it.
        let fresh = reqwest::Client::builder()
            .no_proxy()
            .tcp_nodelay(true)
            .pool_max_idle_per_host(0)
            .build()?;
        let (rounds, max_tokens) = (self.args.rounds, self.args.max_tokens);
        let r = pairs::run(&fresh, &dt, side, "relay", rounds, max_tokens, &mut self.raw).await;
        if let Some(o) = self.keep("relay", r) {
            self.lines
                .push(o.diagnostic_line("bare TCP relay in front of llama-server (one extra hop)"));
        }
        Ok(())
    }

    pub(super) async fn aa(&mut self, d: &mut Direct) -> anyhow::Result<()> {
        if !self.on("aa") {
            return Ok(());
        }
        eprintln!(
            "== diagnostic: a second llama-server direct against the first ({} rounds)",
            self.args.rounds
        );
        let mut d2 = self.direct().await?;
        let r = self.aa_rounds(d, &mut d2).await;
        if let Some(o) = self.keep("aa", r) {
            self.lines
                .push(o.diagnostic_line("a second llama-server direct (A/A: the noise floor of a pair)"));
        }
        d2.stop().await;
        Ok(())
    }

    async fn aa_rounds(&mut self, d: &mut Direct, d2: &mut Direct) -> anyhow::Result<pairs::Outcome> {
        let mut o = pairs::Outcome::default();
        for r in 0..self.args.rounds {
            // As the pairs: fresh processes, alternating order.
            let (first, second) = if r.is_multiple_of(2) {
                (&mut *d, &mut *d2)
            } else {
                (&mut *d2, &mut *d)
            };
            self.restart(first).await?;
            self.restart(second).await?;
            let (a, b) = (d.target(), d2.target());
            pairs::warm(&self.http, &a, &b).await?;
            let side = pairs::Side {
                target: &b,
                name: "direct2",
                pid: None,
                shares_server: false,
            };
            o.round(&self.http, &a, &side, "aa", r, self.args.max_tokens, &mut self.raw)
                .await?;
        }
        Ok(o)
    }
}
