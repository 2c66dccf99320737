//! llm-warden: a Rust actor runtime that runs a local LLM inference server
//! (llama.cpp's `llama-server` on CPU or CUDA, `mlx_vlm.server` on Apple
//! Silicon) as a child process and keeps it safe: it picks the engine, sizes
//! the context window from the GGUF header and the machine's memory, streams
//! OpenAI-compatible chat through it, brakes memory under pressure, reaps an
//! idle model and turns every crash into a structured error.
//!
//! # Layout
//!
//! ```text
//!  HTTP (http::*, actix-web)
//!    | Warden::submit -> routed by model (warden::residency: the map from
//!    |   model to engine, and each engine's published status and queue)
//!    |   -> Generate ---------------------------------------------+
//!    | (MLX: -> ClaimPrefix -> PrefixCacheActor, who owns the    |
//!    |  child's KV: it queues Reset, then forwards Generate) ----+
//!    v                                                           v
//!  EngineActor (actors::engine), one per catalog model, each on its own
//!    |  arbiter -- owns that model's one child (child::*), its client and key;
//!    |  its mailbox is the spec's generation lock (AtomicResponse handlers);
//!    |  turns for different models run at once
//!    |-- Peers (warden::residency) --> law::residents: a load makes room
//!    |   (Evict --> an idle resident's EngineActor, awaited: the one await
//!    |   of another actor, which cannot close a circle), waits for a turn's
//!    |   end with its mailbox open (woken by Wake when what the law reads
//!    |   changes, its deadline, or its client leaving), or is refused; the
//!    |   brake evicts an idle resident first
//!    |<-- BrakeSample -- SensorActor (own clock: RAM pressure, paging; every
//!    |                   60 s to each engine with a model loaded), its latest
//!    |                   reading in a watch
//!    |-- reads <-- that watch at a turn's start and end (sensors::view)
//!    |<-- Reap -- IdleTimer (every 30 s, only when a model looks idle)
//!    |<-- SaveAhead -- IdleTimer (once the idle clock stood still 2 s)
//!    |-- ResetFailed --> PrefixCacheActor (the next claim resets)
//!    |-- publishes Door (watch): /tokenize, /detokenize and the child's
//!    |   /metrics reach the live child beside a turn, nothing else can
//!    |-- reads <-- the worker watch (rpc::remote, every 200 ms; WorkerCheck
//!    |   into the mailbox when a worker fails): RPC workers' readings
//!    |-- emit --> metrics::Metrics (counted) + WardenEvent (broadcast)
//!    |-- law::*      pure decisions (the plan, windows, caps, brakes, crash codes,
//!    |               CUDA, MLX, the prefix cache, a turn resumed after a death)
//!    |-- engines::*  asked, never in charge: one home per engine behind
//!    |               engines::hooks, each hook over a ChildView lent for the
//!    |               call, returning a decision the actor carries out: cpu/
//!    |               (llama-server, the RPC split), cuda/ (llama-server on a GPU,
//!    |               NVML, the spill gauge), mlx/ (mlx_vlm.server), llama
//!    |-- gguf::*     header-only model facts
//!    |-- sensors::*  RAM total and cgroup, footprints, pressure providers, the
//!    |               view of the latest reading, the dashboard's memory history
//!    |               (its own sampler thread)
//!    `-- status::*   EngineStatus (watch) and WardenEvent (broadcast)
//! ```
//!
//! ## Floors (what may import what)
//!
//! From the ground up, each importing only floors below it (no import runs
//! up, no two top-level modules import each other):
//!
//! 1. `gguf` (header facts), then `law` (pure decisions over its own plain
//!    types and the facts) beside the vocabulary every floor may use:
//!    `status` (the wire snapshot, events, notices, outcomes), `error`
//!    (`WardenError` and the load, generation and engine errors; `ApiError`,
//!    the wire shape, built only by `http`), `config`, `secret` (`ApiKey`),
//!    `sse` (the SSE wire format).
//! 2. I/O, each knowing nothing above it: `child` (`launch`: an OS process,
//!    or with the `testing` feature the in-process fake `child::fake`;
//!    `process`: group, parent-death signal, the one `terminate`; output,
//!    port, readiness, HTTP client), `sensors`, `kv_store`, `rpc` (the
//!    worker status wire type, builds, `remote`: readings and the watch),
//!    `catalog`, `capabilities` (what each entry's files let a request
//!    send), `metrics` (Prometheus counters fed by events), `queue`.
//! 3. `engines`: one home per engine (`cpu/`, `cuda/`, `mlx/`, the llama.cpp
//!    engines' shared part in `llama`) behind `engines::hooks`, the one
//!    trait and the one place that dispatches on the engine. A hook gets
//!    plain values (the plan, a `live::ChildView` lent for the call, the
//!    config) and returns a value or a decision (`AfterLoad`,
//!    `BrakeInput`, a retry plan); each engine keeps its per-child state in
//!    its own type (`live::ChildState`); `SpawnPlan`'s engine part is an
//!    enum (`EnginePlan`). `engines::plan` gathers what `law::plan` turns
//!    into every spawn's window (a load, `inspect` and `/v1/models` alike);
//!    `engines::preflight` selects the engine.
//! 4. `messages` (one file per actor message) and `actors`: `EngineActor`,
//!    the only code that spawns, respawns, retires and unloads. Its state
//!    is `EngineCore` (`core`), divided by who writes it: the child holder
//!    (`child_holder`), the brake controller (`brake_state`), the KV
//!    controller (`kv`), the use (`state`) and the intake (`intake`: what
//!    waits, what runs, a brake action held for the running turns), each
//!    the only writer of its fields; the live child's slots are `slots`.
//!    A turn is admitted in a handler (`turn`: its slot, its bound, its
//!    KV), relayed by a task of its own beside the mailbox (`relay`), and
//!    ended in a handler (`turn_end`), so several stream at once while
//!    every decision is still one message at a time. A turn whose child
//!    died under it goes back to the intake's head to go on on the next
//!    child (`resume`, by `law::resume`; `law::splice` joins the streams). The core is moved into each
//!    atomic handler and published at the end of every handler (`publish`:
//!    the status is `snapshot()`, a function of the core) and at named
//!    points (`enter`): `load`, `spawn`, `retire`, `turn`, `turn_end`, `relay`,
//!    `outbox`, `door`, `kv`, `kv_check` and `compact` (idle conversations
//!    moved out of the shared pool before a turn, by `law::compact`, over
//!    the rates the child showed), `brake` (the sample: which
//!    gauge, the pacing, the carries) and `brake_act` (the law's action
//!    carried out), `prefix` (the MLX cache's resets said), `workers` (a
//!    lost RPC worker), `reap`, `supervise` (a handler that panics answers
//!    its message, retires the child, and the engine carries on);
//!    `IdleTimer`, `SensorActor`, `PrefixCacheActor`.
//! 5. `warden`: the front door (`Warden`, `WardenBuilder`, `chat` as typed
//!    chunks, `submit` as raw events, load/unload, the tokenizer's side
//!    door, metrics, the memory history, `plan_for`, and `reload`: the
//!    settings file and the model stores applied live, `config::live`'s
//!    rule deciding what applies now, at the next load or at a restart);
//!    `warden::arbiter` is every decision between residents as one machine
//!    with no I/O, which `warden::arbiter_sim` drives through seeded
//!    schedules.
//! 6. Faces: `http` (`http::configure` mounts the routes; the dialects;
//!    every `WardenError` gets its wire shape in `http::wire_error`),
//!    `server` (the binary's HTTP server), `cli` (`cli::main` is the
//!    binary), `worker` (`llm-warden worker`: rpc-server supervised, its
//!    keyed `/worker/status`).
//!
//! ## The public face
//!
//! An embedding actix application needs `Warden` and `WardenBuilder`, the
//! config, the status and event types, the errors, the turn types, the SSE
//! parser and `http::configure`; those are public. Everything else is
//! `pub(crate)`, public (and hidden from the docs) only with the `testing`
//! feature, which this crate's integration tests and its bench enable.

/// The crate's internals: `pub(crate)`, and public only with the
/// `testing` feature (this crate's integration tests and the bench enable
/// it; an embedder never needs it). Hidden from the docs either way.
macro_rules! internal {
    ($($name:ident;)*) => {
        $(
            #[cfg(feature = "testing")]
            #[doc(hidden)]
            pub mod $name;
            #[cfg(not(feature = "testing"))]
            pub(crate) mod $name;
        )*
    };
}

internal! {
    actors;
    capabilities;
    child;
    engines;
    gguf;
    kv_store;
    law;
    messages;
    metrics;
    queue;
    rpc;
    secret;
    sensors;
    server;
    worker;
}

pub mod catalog;
pub mod cli;
pub mod config;
pub mod error;
pub mod http;
pub mod sse;
pub mod status;
pub mod warden;

pub use catalog::Catalog;
pub use config::WardenConfig;
/// What a turn needs of its model beyond text (`TurnRequest::needs`), and
/// what a model can take: `Warden::submit` refuses the one the other lacks.
pub use law::request_chat::{Capabilities, Needs};
/// A turn's body: its bound read once, its fields relayed as sent
/// (`TurnRequest::body`).
pub use messages::body::TurnBody;
pub use messages::prefix::TurnKind;
pub use messages::{Notice, TurnEvent, TurnOptions};
pub use warden::{Chunk, TurnRequest, TurnStream, TurnWatch, Warden, WardenBuilder};

/// The crate map is checked, not trusted: every module `lib.rs` declares is
/// listed in `docs/layout.md` and named in the `# Layout` docs above, and
/// every file or folder at the top of `src/` is a declared module or loaded
/// by a `#[path]` from one.
#[cfg(test)]
mod crate_map_tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    fn read(rel: &str) -> String {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    /// The modules `lib.rs` declares: `pub mod X;` and the `internal!` list.
    fn declared(lib: &str) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        let mut in_internal = false;
        for line in lib.lines().map(str::trim) {
            if line.starts_with("internal! {") {
                in_internal = true;
            } else if in_internal && line == "}" {
                in_internal = false;
            } else if in_internal {
                if let Some(name) = line.strip_suffix(';') {
                    out.insert(name.to_string());
                }
            } else if let Some(name) = line.strip_prefix("pub mod ").and_then(|r| r.strip_suffix(';')) {
                out.insert(name.to_string());
            }
        }
        // The `internal!` macro's own `pub mod $name;` is no module.
        out.retain(|m| m.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        out
    }

    #[test]
    fn the_crate_map_names_every_module() {
        let lib = read("src/lib.rs");
        let modules = declared(&lib);
        assert!(modules.len() > 20 && modules.contains("law"), "parsed {modules:?}");
        let map = read("docs/layout.md");
        let listed: BTreeSet<String> = map
            .lines()
            .filter_map(|l| l.strip_prefix("- `"))
            .filter_map(|l| l.split('`').next())
            .map(str::to_string)
            .collect();
        assert_eq!(listed, modules, "docs/layout.md lists these; src/lib.rs declares those");
        let docs: String = lib.lines().filter(|l| l.starts_with("//!")).collect();
        for m in &modules {
            assert!(
                docs.contains(&format!("`{m}")),
                "src/lib.rs's Layout docs never name `{m}`"
            );
        }
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        for e in std::fs::read_dir(&src).unwrap() {
            let name = e.unwrap().file_name().into_string().unwrap();
            let stem = name.strip_suffix(".rs").unwrap_or(&name);
            // `bin/`: Cargo's place for the other binaries (the test fake).
            if ["lib", "main", "bin"].contains(&stem) || modules.contains(stem) {
                continue;
            }
            let loaded = modules.iter().any(|m| {
                let file = src.join(format!("{m}.rs"));
                std::fs::read_to_string(file).is_ok_and(|s| s.contains(&format!("#[path = \"{name}\"]")))
            });
            assert!(
                loaded,
                "src/{name} is neither a module lib.rs declares nor loaded by #[path]"
            );
        }
    }
}
