//! The window law against what llama-server b10883 itself allocates: the KV
//! and compute buffer sizes it prints at `-lv 5`, for both real models at two
//! `-c` values, compared with `law::kv` and the law's 1 KiB/token compute
//! slope. Also the warden's own window choice on SmolLM2 made memory-bound by
//! `WARDEN_RAM_OVERRIDE_GB`, read back from `/props`.

use crate::support;

use std::path::Path;
use std::time::Duration;

use llm_warden::WardenConfig;
use llm_warden::child::process::{self, SpawnSpec};
use llm_warden::gguf;
use llm_warden::law::{kv, window};
use support::*;

const MIB: f64 = 1024.0 * 1024.0;

/// The buffers one llama-server prints at `-c n_ctx`: (sum of the KV
/// buffers, the compute buffer), in bytes. fit's probe prints a first set of
/// `0.00 MiB` lines, which are skipped.
async fn printed_buffers(server: &Path, model: &Path, n_ctx: u32, port: u16, extra: &[&str]) -> (u64, u64) {
    let (port_s, ctx_s) = (port.to_string(), n_ctx.to_string());
    let mut args = vec![
        "-m",
        model.to_str().unwrap(),
        "-c",
        &ctx_s,
        "-lv",
        "5",
        "-np",
        "1",
        "--cache-ram",
        "0",
        "-ngl",
        "0",
        "--host",
        "127.0.0.1",
        "--port",
        &port_s,
    ];
    args.extend_from_slice(extra);
    let spec = SpawnSpec {
        program: server.to_path_buf(),
        args: args.iter().map(Into::into).collect(),
        env: llm_warden::engines::env::inherited(),
        label: "llama-server",
        secret: None,
    };
    let mut p = process::spawn(&spec).unwrap();
    let loaded = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            if p.output().tail(400).iter().any(|l| l.contains("model loaded")) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let kept = p.output().kept();
    process::terminate(&mut p, Duration::from_secs(5)).await;
    assert!(loaded.is_ok(), "llama-server did not load: {}", p.output().raw_tail());
    let mib_of = |l: &str| -> f64 {
        l.rsplit('=')
            .next()
            .unwrap()
            .trim()
            .trim_end_matches("MiB")
            .trim()
            .parse()
            .unwrap()
    };
    let kv: f64 = kept
        .iter()
        .filter(|l| l.contains("KV buffer size"))
        .map(|l| mib_of(l))
        .sum();
    let compute = kept
        .iter()
        .rfind(|l| l.contains("compute buffer size"))
        .map(|l| mib_of(l))
        .unwrap();
    ((kv * MIB).round() as u64, (compute * MIB).round() as u64)
}

/// SmolLM2: KV = n_ctx x 23,040 B exactly (180.00 MiB at 8192); Gemma-3-270M
/// with `--swa-full`, as the warden runs it: n_ctx x 18,432 B exactly
/// (without the flag, the sliding-window mix of 15 SWA layers of 1024 cells
/// and 3 global layers of n_ctx); compute grows by 1 KiB per token.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 and Gemma 3 (./build-llama.sh); ./test.sh runs it"]
async fn law_matches_the_buffers_llama_server_prints() {
    let (server, smol, gemma) = (real_llama_server(), real_model(SMOLLM2), real_model(GEMMA3));
    // SmolLM2: the full-attention formula is exact.
    let facts = gguf::read_model_facts(&smol).unwrap();
    let per_token = kv::kv_bytes_per_token(&facts);
    assert_eq!(per_token, 23_040);
    let (kv_a, compute_a) = printed_buffers(&server, &smol, 4096, 27291, &[]).await;
    let (kv_b, compute_b) = printed_buffers(&server, &smol, 8192, 27292, &[]).await;
    assert_eq!(kv_a, 4096 * per_token, "SmolLM2 KV at 4096");
    assert_eq!(kv_b, 8192 * per_token, "SmolLM2 KV at 8192 (180.00 MiB)");
    let slope = (compute_b - compute_a) as f64 / 4096.0;
    assert!(
        (slope - window::FA_COMPUTE_BYTES_PER_TOKEN as f64).abs() < 8.0,
        "compute slope {slope} B/token"
    );

    // Gemma-3-270M runs with --swa-full (law::kv_keep): the formula is
    // exact, every layer holding the whole window.
    let g = gguf::read_model_facts(&gemma).unwrap();
    assert_eq!(g.sliding_layers, None, "the GGUF carries no layer pattern");
    assert!(llm_warden::law::kv_keep::swa_full(&g));
    assert_eq!(kv::kv_bytes_per_token(&g), 18_432);
    for (n_ctx, port) in [(8192u32, 27293u16), (16384, 27294)] {
        let (printed, _) = printed_buffers(&server, &gemma, n_ctx, port, &["--swa-full"]).await;
        assert_eq!(
            Some(printed),
            kv::kv_bytes_allocated(&g, n_ctx as u64),
            "Gemma KV at {n_ctx} with --swa-full"
        );
        assert_eq!(printed, 18_432 * n_ctx as u64, "the full formula");
    }
    // Without the flag (llama-server's default) the sliding layers hold
    // 1024 cells: what the flag costs is the rest of the window. The small
    // cache's own formula (`kv::SlidingKv`, the plan's choice where the
    // full one would bind the window) is exact at one slot and at four in
    // one pool (512 x 4 + 512 = 2560 sliding cells).
    let small_kv = kv::sliding_kv(&g).expect("gemma3's pattern is known");
    let (small, _) = printed_buffers(&server, &gemma, 8192, 27295, &[]).await;
    assert_eq!(small, (15 + 24) << 20, "15.00 + 24.00 MiB at 8192");
    assert_eq!(small, small_kv.bytes(8192, 1));
    let (four, _) = printed_buffers(&server, &gemma, 8192, 27296, &["-np", "4", "--kv-unified"]).await;
    assert_eq!(four, small_kv.bytes(8192, 4), "four slots over one pool at 8192");
}

/// With WARDEN_RAM_OVERRIDE_GB=0.65, SmolLM2's budget holds 6,509 tokens: the
/// warden passes -c 6400, llama-server allocates it (read back from /props),
/// and status reports it as the memory bound, apart from the declared ceiling.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn a_memory_bound_window_is_passed_and_read_back() {
    let cfg = WardenConfig {
        ram_override_bytes: Some((0.65 * (1u64 << 30) as f64) as u64),
        ..test_config()
    };
    let (w, _dir) = real_smollm_warden(cfg);
    let s = load_default(&w).await;
    assert_eq!(s.requested_context, Some(6400));
    assert_eq!(s.context_tokens, Some(6400));
    assert_eq!(s.memory_bound_tokens, Some(6400));
    assert_eq!(s.declared_ceiling, None);
    assert_eq!(s.memory_bound_footprint_bytes, Some(6400 * 24_064 + 98_362_432));
    w.shutdown().await;
}

/// A pinned window off the 256 grid (WARDEN_CTX=5000) is passed as is,
/// allocated padded (5120) and draws no mismatch; it is the declared ceiling.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn a_pinned_window_is_the_declared_ceiling() {
    let cfg = WardenConfig {
        ctx_pin: Some(5000),
        ..test_config()
    };
    let (w, _dir) = real_smollm_warden(cfg);
    let s = load_default(&w).await;
    assert_eq!(s.declared_ceiling, Some(5000));
    assert_eq!(s.requested_context, Some(5000));
    assert_eq!(s.context_tokens.map(llm_warden::law::caps::pad), Some(5120));
    assert_eq!(s.memory_bound_tokens, None);
    w.shutdown().await;
}
