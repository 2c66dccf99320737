//! The counters as a scrape shows them: each test renders and reads the
//! samples back by their exact series text.

use super::render::render;
use super::*;
use crate::status::TurnTimings;

/// The value of the sample written exactly as `series` (name and labels).
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.parse().unwrap_or_else(|_| panic!("{series}: {v:?} is no number")))
}

fn scrape(m: &Metrics) -> String {
    render(m, &Gauges::default(), &[])
}

fn ended(route: Route, outcome: &'static str, timings: Option<TurnTimings>) -> WardenEvent {
    WardenEvent::TurnEnded {
        seq: 0,
        route,
        outcome: *TurnOutcome::ALL
            .iter()
            .find(|o| o.as_str() == outcome)
            .expect("an outcome"),
        timings,
    }
}

fn ready(model: &str, load_ms: u64) -> WardenEvent {
    WardenEvent::Ready {
        model: model.into(),
        pid: 1,
        context_tokens: None,
        load_ms,
    }
}

fn unloaded(model: &str, reason: &'static str) -> WardenEvent {
    WardenEvent::Unloaded {
        model: model.into(),
        reason: *UnloadReason::ALL
            .iter()
            .find(|r| r.as_str() == reason)
            .expect("a reason"),
        freed_bytes: None,
    }
}

/// Turns, tokens, loads, unloads, crashes, restarts and refusals each move
/// their own series, and only a return of the same model is a restart.
#[test]
fn events_move_the_counters() {
    let m = Metrics::default();
    let t = TurnTimings {
        ttft_s: Some(0.02),
        decode_tokens_per_s: Some(80.0),
        events: 9,
        paused_s: None,
    };
    m.observe(&ended(Route::Chat, "completed", Some(t)));
    m.observe(&ended(Route::Chat, "completed", None));
    m.observe(&ended(Route::Completions, "failed", None));
    m.observe(&ready("a", 1500));
    // why: the same model ready again after a brake stop is a restart
    m.observe(&unloaded("a", "brake"));
    m.observe(&ready("a", 700));
    // why: a manual unload then another model is no restart
    m.observe(&unloaded("a", "request"));
    m.observe(&ready("b", 700));
    m.observe(&WardenEvent::ChildExited {
        model: "b".into(),
        pid: 3,
        code: "out_of_memory".into(),
    });
    m.observe(&ready("b", 700));
    m.refused(Route::Chat, "queue_full");
    let resumed = |how, code: &str| WardenEvent::TurnResumed {
        seq: 1,
        route: Route::Chat,
        model: "b".into(),
        pid: 3,
        code: code.into(),
        how,
        sent_tokens: 4,
        paused_ms: 900,
    };
    m.observe(&resumed("continued", "child_killed"));
    m.observe(&resumed("continued", "child_killed"));
    m.observe(&resumed("rerun", "child_hung"));
    let s = scrape(&m);
    let rows: &[(&str, Option<f64>)] = &[
        ("warden_turns_total{route=\"chat\",outcome=\"completed\"}", Some(2.0)),
        (
            "warden_turns_total{route=\"completions\",outcome=\"failed\"}",
            Some(1.0),
        ),
        ("warden_completion_tokens_total{route=\"chat\"}", Some(9.0)),
        ("warden_time_to_first_token_seconds_count", Some(1.0)),
        ("warden_decode_tokens_per_second_count", Some(1.0)),
        ("warden_load_duration_seconds_count", Some(4.0)),
        ("warden_unloads_total{reason=\"brake\"}", Some(1.0)),
        // why: the route's `request` is what operators call manual
        ("warden_unloads_total{reason=\"manual\"}", Some(1.0)),
        ("warden_unloads_total{reason=\"crash\"}", Some(1.0)),
        ("warden_child_crashes_total{code=\"out_of_memory\"}", Some(1.0)),
        ("warden_child_restarts_total{reason=\"brake\"}", Some(1.0)),
        ("warden_child_restarts_total{reason=\"crash\"}", Some(1.0)),
        ("warden_child_restarts_total{reason=\"manual\"}", None),
        (
            "warden_requests_refused_total{route=\"chat\",code=\"queue_full\"}",
            Some(1.0),
        ),
        (
            "warden_turns_resumed_total{how=\"continued\",code=\"child_killed\"}",
            Some(2.0),
        ),
        ("warden_turns_resumed_total{how=\"rerun\",code=\"child_hung\"}", Some(1.0)),
    ];
    for (i, (series, want)) in rows.iter().enumerate() {
        assert_eq!(value(&s, series), *want, "row {i}: {series}");
    }
}

/// Each idle conversation the law moved out of a model's pool counts once
/// for that model, with the cells it held.
#[test]
fn compactions_count_per_model_with_their_cells() {
    let m = Metrics::default();
    let moved = |model: &str, cells: u32| WardenEvent::PoolCompacted {
        model: model.into(),
        slot: 0,
        conversation: "c".into(),
        cells,
        keep_ms: 200,
        move_ms: 80,
    };
    m.observe(&moved("a", 2000));
    m.observe(&moved("a", 1500));
    m.observe(&moved("b", 700));
    let s = scrape(&m);
    for (series, want) in [
        ("warden_pool_compactions_total{model=\"a\"}", Some(2.0)),
        ("warden_pool_compacted_cells_total{model=\"a\"}", Some(3500.0)),
        ("warden_pool_compactions_total{model=\"b\"}", Some(1.0)),
        ("warden_pool_compacted_cells_total{model=\"c\"}", None),
    ] {
        assert_eq!(value(&s, series), want, "{series}");
    }
}

/// Each time a model yields its memory counts once for it.
#[test]
fn yields_count_per_model() {
    let m = Metrics::default();
    let y = |model: &str| WardenEvent::Yielded {
        model: model.into(),
        to: "other".into(),
        why: "other goes next".into(),
    };
    m.observe(&y("a"));
    m.observe(&y("a"));
    let s = scrape(&m);
    assert_eq!(value(&s, "warden_model_yields_total{model=\"a\"}"), Some(2.0));
    assert_eq!(value(&s, "warden_model_yields_total{model=\"other\"}"), None);
}

/// A fresh warden lists every route's completed turns at 0, histograms with
/// their `+Inf` bucket, the unloaded model at 0, and no absent gauge.
#[test]
fn every_route_has_a_completed_series_and_absent_gauges_are_omitted() {
    let text = scrape(&Metrics::default());
    for r in Route::ALL {
        let series = format!("warden_turns_total{{route=\"{}\",outcome=\"completed\"}}", r.tag());
        assert_eq!(value(&text, &series), Some(0.0), "{series}");
    }
    assert_eq!(
        value(&text, "warden_time_to_first_token_seconds_bucket{le=\"+Inf\"}"),
        Some(0.0)
    );
    assert!(!text.contains("warden_context_tokens"));
    assert_eq!(value(&text, "warden_model_loaded{engine=\"\",model=\"\"}"), Some(0.0));
    assert!(text.contains("# TYPE warden_turns_total counter\n"));
    assert!(text.contains("# HELP warden_turns_total Turns the engine ran, by route and outcome.\n"));
}

/// Buckets are cumulative, bounds print as Prometheus' Go clients print them
/// (`le="1"`, not `le="1.0"`), and a NaN is dropped rather than poisoning
/// the sum.
#[test]
fn histogram_buckets_are_cumulative_and_nan_is_dropped() {
    let m = Metrics::default();
    for r in [0.5, 1.0, 3.0, 2000.0, f64::NAN] {
        let t = TurnTimings {
            ttft_s: None,
            decode_tokens_per_s: Some(r),
            events: 2,
            paused_s: None,
        };
        m.observe(&ended(Route::Chat, "completed", Some(t)));
    }
    let s = scrape(&m);
    let rows = [
        ("warden_decode_tokens_per_second_bucket{le=\"1\"}", 2.0),
        ("warden_decode_tokens_per_second_bucket{le=\"5\"}", 3.0),
        ("warden_decode_tokens_per_second_bucket{le=\"1000\"}", 3.0),
        ("warden_decode_tokens_per_second_bucket{le=\"+Inf\"}", 4.0),
        ("warden_decode_tokens_per_second_count", 4.0),
        ("warden_decode_tokens_per_second_sum", 2004.5),
    ];
    for (i, (series, want)) in rows.into_iter().enumerate() {
        assert_eq!(value(&s, series), Some(want), "row {i}: {series}");
    }
}

/// Gauges read at scrape time: the loaded model's labels, and values as given.
#[test]
fn gauges_show_the_loaded_model() {
    let g = Gauges {
        engine: "cpu",
        model: Some("a\"b".into()),
        queue_depth: 2,
        max_queue: 256,
        brake_level: Some(2),
        idle_deadline_seconds: Some(-1.5),
        child_metrics_up: Some(true),
        ..Gauges::default()
    };
    let s = render(
        &Metrics::default(),
        &g,
        &[("a\"b".to_string(), "llamacpp:n_busy_slots_per_decode 1\n".to_string())],
    );
    let rows = [
        // why: a quote in a model id is escaped, not a broken label
        ("warden_model_loaded{engine=\"cpu\",model=\"a\\\"b\"}", 1.0),
        ("warden_queue_depth", 2.0),
        ("warden_queue_limit", 256.0),
        ("warden_brake_level", 2.0),
        ("warden_idle_deadline_seconds", -1.5),
        ("warden_child_metrics_up", 1.0),
        ("llamacpp:n_busy_slots_per_decode{model=\"a\\\"b\"}", 1.0),
    ];
    for (i, (series, want)) in rows.into_iter().enumerate() {
        assert_eq!(value(&s, series), Some(want), "row {i}: {series}");
    }
}

/// The child's samples get the model label; comments pass unchanged.
#[test]
fn child_samples_get_the_model_label() {
    let rows = [
        // why: a bare sample gets a label set
        (
            "llamacpp:tokens_predicted_total 7",
            "llamacpp:tokens_predicted_total{model=\"m\"} 7",
        ),
        // why: an existing label set gets the label first
        ("x{a=\"1\"} 2", "x{model=\"m\",a=\"1\"} 2"),
        ("x{} 2", "x{model=\"m\"} 2"),
        // why: comments pass unchanged
        ("# TYPE x counter", "# TYPE x counter"),
    ];
    for (i, (line, want)) in rows.iter().enumerate() {
        assert_eq!(relay_child(line, "m").trim_end(), *want, "row {i}");
    }
    // why: a quote in a model id cannot break the label
    assert_eq!(relay_child("x 1", "a\"b").trim_end(), "x{model=\"a\\\"b\"} 1");
}

/// Two residents' children name the same families: each family's comments
/// once, its samples together, each labelled with its model.
#[test]
fn resident_children_merge_family_by_family() {
    let child = |n: u32| format!("# HELP x A counter.\n# TYPE x counter\nx {n}\n# TYPE y gauge\ny{{a=\"1\"}} {n}\n");
    let out = super::render::relay_children(&[("m1".into(), child(1)), ("m2".into(), child(2))]);
    let want = "# HELP x A counter.\n# TYPE x counter\nx{model=\"m1\"} 1\nx{model=\"m2\"} 2\n\
                # TYPE y gauge\ny{model=\"m1\",a=\"1\"} 1\ny{model=\"m2\",a=\"1\"} 2\n";
    assert_eq!(out, want);
    assert_eq!(super::render::relay_children(&[]), "");
}

/// Each resident's gauges carry its model (and its kind on the footprint).
#[test]
fn every_resident_is_labelled_by_its_model() {
    let res = |model: &str, kind, q| super::ResidentGauges {
        model: model.into(),
        kind,
        footprint_bytes: Some(1000),
        context_tokens: Some(4096),
        queue_depth: q,
        slots: 4,
        busy_slots: q,
        idle_deadline_seconds: Some(30.0),
    };
    let g = Gauges {
        engine: "cpu",
        model: Some("a".into()),
        residents: vec![res("a", "chat", 1), res("e", "embedding", 0)],
        ..Gauges::default()
    };
    let s = render(&Metrics::default(), &g, &[]);
    let rows = [
        ("warden_model_loaded{engine=\"cpu\",model=\"a\"}", 1.0),
        ("warden_model_loaded{engine=\"cpu\",model=\"e\"}", 1.0),
        ("warden_resident_footprint_bytes{model=\"e\",kind=\"embedding\"}", 1000.0),
        ("warden_resident_context_tokens{model=\"a\"}", 4096.0),
        ("warden_resident_queue_depth{model=\"a\"}", 1.0),
        ("warden_resident_queue_depth{model=\"e\"}", 0.0),
        ("warden_resident_slots{model=\"a\"}", 4.0),
        ("warden_resident_busy_slots{model=\"a\"}", 1.0),
        ("warden_resident_busy_slots{model=\"e\"}", 0.0),
        ("warden_resident_idle_deadline_seconds{model=\"e\"}", 30.0),
    ];
    for (series, want) in rows {
        assert_eq!(value(&s, series), Some(want), "{series}\n{s}");
    }
}

