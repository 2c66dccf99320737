use super::*;
use std::collections::HashMap;

fn cfg(pairs: &[(&str, &str)]) -> Result<WardenConfig, ConfigError> {
    let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    WardenConfig::from_lookup(|k| map.get(k).cloned())
}

#[test]
fn variables_override_defaults_and_bad_values_are_refused() {
    let c = cfg(&[
        ("WARDEN_CTX", "8000"),
        ("WARDEN_IDLE_TIMEOUT_S", "0.5"),
        ("WARDEN_RAM_OVERRIDE_GB", "2"),
        ("WARDEN_FORCE_MEMORY_PRESSURE", "critical"),
        ("WARDEN_ENGINE", "mlx"),
    ])
    .unwrap();
    assert_eq!(c.ctx_pin, Some(8000));
    assert_eq!(c.idle_timeout, Duration::from_millis(500));
    assert_eq!(c.ram_override_bytes, Some(2 << 30));
    assert_eq!(c.force_pressure, Some(ForcedPressure::Critical));
    assert_eq!(c.engine, EnginePreference::Mlx);
    // why: an empty value counts as unset (the spec's rule for overrides)
    assert_eq!(
        cfg(&[("WARDEN_VRAM_OVERRIDE_GB", "")]).unwrap().vram_override_bytes,
        None
    );
    for (k, v) in [
        ("WARDEN_CTX", "lots"),
        ("WARDEN_IDLE_TIMEOUT_S", "-1"),
        ("WARDEN_ENGINE", "tpu"),
        ("WARDEN_FORCE_MEMORY_PRESSURE", "high"),
    ] {
        assert!(cfg(&[(k, v)]).is_err(), "{k}={v} should be refused");
    }
}

/// A list of origins: blanks and repeats go, a bad item refuses the start.
#[test]
fn cors_origin_lists() {
    let c = cfg(&[(
        "WARDEN_CORS_ORIGINS",
        "http://a.example, ,HTTP://A.example/,https://b.example:8443,",
    )])
    .unwrap();
    assert_eq!(c.cors_origins, ["http://a.example", "https://b.example:8443"]);
    assert!(cfg(&[]).unwrap().cors_origins.is_empty(), "unset: no CORS");
    assert!(cfg(&[("WARDEN_CORS_ORIGINS", "http://a.example,localhost:3000")]).is_err());
}

#[test]
fn worker_lists() {
    let c = cfg(&[("WARDEN_WORKERS", "10.0.0.2:50053, ,gpu-box,10.0.0.2:50053,")]).unwrap();
    let got: Vec<String> = c.workers.iter().map(ToString::to_string).collect();
    // why: blanks skipped, the default port filled in, repeats dropped
    assert_eq!(got, ["10.0.0.2:50053", "gpu-box:50053"]);
    // why: a bad address refuses the start, naming the variable
    let e = cfg(&[("WARDEN_WORKERS", "10.0.0.2:x")]).unwrap_err();
    assert_eq!(e.name, "WARDEN_WORKERS");
    assert!(cfg(&[]).unwrap().workers.is_empty(), "unset: no workers");
    // why: the key comes from the variable when set
    let c = cfg(&[("WARDEN_WORKER_KEY", "k1")]).unwrap();
    assert_eq!(c.worker_key.as_ref().map(|k| k.expose()), Some("k1"));
    // why: the key never prints with the configuration
    assert!(!format!("{c:?}").contains("k1"));
    // why: nor does the warden's own key
    let c = cfg(&[("WARDEN_API_KEY", "sesame-k2")]).unwrap();
    assert!(c.api_key.as_ref().is_some_and(|k| k.matches("sesame-k2")));
    assert!(!format!("{c:?}").contains("sesame-k2"));
}

#[test]
fn seconds_past_durations_range_are_refused_not_a_panic() {
    for v in ["1e20", "-1", "inf", "NaN"] {
        let e = cfg(&[("WARDEN_IDLE_TIMEOUT_S", v)]).unwrap_err();
        assert_eq!(e.name, "WARDEN_IDLE_TIMEOUT_S", "{v}");
    }
}

/// `WARDEN_MAX_RESIDENT`: unset is no cap (memory decides), a count caps,
/// anything else refuses the start naming the variable.
#[test]
fn max_resident_counts() {
    assert_eq!(cfg(&[]).unwrap().max_resident, None);
    assert_eq!(cfg(&[("WARDEN_MAX_RESIDENT", "")]).unwrap().max_resident, None);
    assert_eq!(cfg(&[("WARDEN_MAX_RESIDENT", "3")]).unwrap().max_resident, Some(3));
    for v in ["0", "-1", "two"] {
        let e = cfg(&[("WARDEN_MAX_RESIDENT", v)]).unwrap_err();
        assert_eq!(e.name, "WARDEN_MAX_RESIDENT", "{v}");
    }
}

/// A brake respawn is given the spec's 30 s to be ready
/// (LLAMA_RESPAWN_PROBE_TIMEOUT_S), unless a test shortens it.
#[test]
fn a_brake_respawn_waits_thirty_seconds_for_readiness() {
    assert_eq!(cfg(&[]).unwrap().respawn_timeout, Duration::from_secs(30));
    assert_eq!(
        cfg(&[("WARDEN_RESPAWN_TIMEOUT_S", "2")]).unwrap().respawn_timeout,
        Duration::from_secs(2)
    );
}
