//! The lone decode, paired (`lone-paired`): the `lone` phase's decode ratio
//! settled beyond this machine's noise. In `lone` every side is a fresh
//! process per round and its rounds are minutes apart, so a ratio carries
//! whatever the machine did in between (the rounds there spread 0.71x to
//! 1.25x, and the side that runs first is often the slowest). Here the
//! three sides (`lone::Side`: one slot, llama-server's defaults, the
//! warden) run at once, each with the same history held (the issue's own
//! scenario: three conversations of about 2,000 tokens ended), and take
//! turns: one new question streamed on each side in a rotating order, a
//! reading pause (`lone::READ_PAUSE`) after each, `ALTERNATIONS` times per
//! round, fresh processes each round (two identical llama-servers decode a
//! few % apart, so the pairs must span process instances too). Each
//! alternation is a pair: its ratio compares two streams seconds apart.
//!
//! Per alternation, the warden's decode rate (the child's
//! `timings.predicted_per_second`) over one slot's and over the defaults';
//! the lines give their median, spread and the 95% interval of their mean.
//! Targets as `lone`'s: >= 0.99x one slot, >= 0.99x the defaults.

use crate::Setup;
use crate::client;
use crate::lone::{self, LONE_TOKENS, READ_PAUSE, Server, Side};
use crate::report::{Line, Raw};
use crate::stats;

/// The history each side holds before its lone streams: three
/// conversations of about 2,000 tokens (the measurement).
const HISTORY: (usize, usize) = (3, 2000);

/// Streams per side per round.
const ALTERNATIONS: usize = 8;

/// Per side (`Side as usize`), one decode rate per alternation, in order.
type Rates = [Vec<Option<f64>>; 3];

/// One round: three fresh servers, their history, the alternations.
async fn round(
    http: &reqwest::Client,
    setup: &Setup,
    window: u32,
    round: usize,
    raw: &mut Raw,
) -> anyhow::Result<Rates> {
    let mut servers = Vec::new();
    for side in Side::ALL {
        match Server::start(http, setup, side, window).await {
            Ok(s) => servers.push(s),
            Err(e) => {
                for s in servers {
                    s.stop().await;
                }
                return Err(e);
            }
        }
    }
    let r = alternate(http, &servers, round, raw).await;
    for s in servers {
        s.stop().await;
    }
    r
}

async fn alternate(http: &reqwest::Client, servers: &[Server], round: usize, raw: &mut Raw) -> anyhow::Result<Rates> {
    let key = |what: &str| format!("paired-{round}-{what}");
    for s in servers {
        lone::hold(http, s, &key, HISTORY).await?;
    }
    tokio::time::sleep(READ_PAUSE).await;
    let mut rates: Rates = Default::default();
    for a in 0..ALTERNATIONS {
        for j in 0..Side::ALL.len() {
            // Each side runs first, second and third alike.
            let side = Side::ALL[(j + a + round) % Side::ALL.len()];
            let question = lone::lone_question(a);
            let t = client::stream(
                http,
                &servers[side as usize].target(key(&format!("lone{a}"))),
                lone::body(&question, LONE_TOKENS, true),
            )
            .await?;
            raw.push("lone-paired", round, side.tag(), "lone_decode_tps", t.server_tps);
            rates[side as usize].push(t.server_tps);
            tokio::time::sleep(READ_PAUSE).await;
        }
    }
    Ok(rates)
}

/// Runs the phase.
pub async fn run(http: &reqwest::Client, setup: &Setup, rounds: usize, raw: &mut Raw) -> anyhow::Result<Vec<Line>> {
    let window = lone::window(http, setup).await?;
    let mut all: Rates = Default::default();
    for r in 0..rounds {
        let rates = round(http, setup, window, r, raw).await?;
        for (side, v) in rates.into_iter().enumerate() {
            all[side].extend(v);
        }
        eprintln!("  round {r}: {ALTERNATIONS} alternations done");
    }
    Ok(lines(&all))
}

fn lines(all: &Rates) -> Vec<Line> {
    let war = &all[Side::Warden as usize];
    let against = |other: Side, name: &str| {
        let base = &all[other as usize];
        let ratios: Vec<f64> = war.iter().zip(base).filter_map(|(w, b)| Some((*w)? / (*b)?)).collect();
        let med = stats::median(&ratios);
        let (mean, half) = stats::mean_interval(&ratios);
        let rates = |v: &[Option<f64>]| stats::median(&v.iter().flatten().copied().collect::<Vec<_>>());
        let (x, y) = HISTORY;
        vec![
            Line::new(
                &format!(
                    "lone-paired: lone decode vs {name}, {} pairs after {x} conversations of ~{y} tokens (tok/s, median ratio)",
                    ratios.len()
                ),
                format!("{:.1}", rates(base)),
                format!("{:.1}", rates(war)),
                format!("{med:.3}x"),
                stats::spread(&ratios, 3),
                ">= 0.99x",
                Some(med >= 0.99),
            ),
            Line::new(
                &format!("lone-paired: the mean ratio vs {name}, its 95% interval"),
                String::new(),
                String::new(),
                format!("{mean:.3}x"),
                format!("{:.3}..{:.3}", mean - half, mean + half),
                "",
                None,
            ),
        ]
    };
    let mut out = against(Side::OneSlot, "one slot");
    out.extend(against(Side::Defaults, "llama-server's defaults"));
    out
}
