use super::*;

fn write(p: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, bytes).unwrap();
}

/// An Ollama store as Ollama lays it out: manifests naming blobs.
fn ollama_store(root: &Path) {
    let manifest = |model: &str, projector: Option<&str>| {
        let mut layers = vec![
            serde_json::json!({"mediaType": "application/vnd.ollama.image.model", "digest": format!("sha256:{model}")}),
        ];
        if let Some(p) = projector {
            layers.push(serde_json::json!({"mediaType": "application/vnd.ollama.image.projector", "digest": format!("sha256:{p}")}));
        }
        layers.push(serde_json::json!({"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:ttt"}));
        serde_json::json!({"schemaVersion": 2, "layers": layers}).to_string()
    };
    let m = root.join("manifests");
    write(
        &m.join("registry.ollama.ai/library/smollm2/135m"),
        manifest("aaa", None).as_bytes(),
    );
    write(
        &m.join("registry.ollama.ai/library/llava/7b"),
        manifest("bbb", Some("ccc")).as_bytes(),
    );
    write(
        &m.join("registry.ollama.ai/someone/tiny/latest"),
        manifest("ddd", None).as_bytes(),
    );
    write(&m.join("hf.co/org/repo/Q4_K_M"), manifest("eee", None).as_bytes());
    write(&m.join("registry.ollama.ai/library/broken/x"), b"{not json");
    for b in ["aaa", "bbb", "ccc", "ddd", "eee"] {
        write(&root.join(format!("blobs/sha256-{b}")), b"GGUF");
    }
}

/// Ids as Ollama's users write them; the blob is the path, the projector
/// its mmproj; a manifest that does not parse is no entry.
#[test]
fn ollama_manifests_name_their_blobs() {
    let dir = tempfile::tempdir().unwrap();
    ollama_store(dir.path());
    let got: Vec<(String, String, Option<String>)> = ollama(dir.path())
        .into_iter()
        .map(|e| {
            let name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
            (e.id, name(&e.path), e.mmproj.as_deref().map(name))
        })
        .collect();
    assert_eq!(
        got,
        [
            ("hf.co/org/repo:Q4_K_M".to_string(), "sha256-eee".to_string(), None),
            ("llava:7b".into(), "sha256-bbb".into(), Some("sha256-ccc".into())),
            ("smollm2:135m".into(), "sha256-aaa".into(), None),
            ("someone/tiny:latest".into(), "sha256-ddd".into(), None),
        ]
    );
}

/// The hub cache: `ORG/NAME` from the snapshot `refs/main` names, its
/// GGUF (the quant picker's choice) and its projector.
#[test]
fn the_hub_cache_gives_org_slash_name_at_its_main_revision() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("models--ggml-org--gemma-3-270m-GGUF");
    write(&repo.join("refs/main"), b"rev2\n");
    write(&repo.join("snapshots/rev1/old-Q8_0.gguf"), b"GGUF");
    write(&repo.join("snapshots/rev2/gemma-3-270m-Q4_K_M.gguf"), b"GGUF");
    write(&repo.join("snapshots/rev2/mmproj-gemma.gguf"), b"GGUF");
    write(
        &dir.path().join("models--org--no-gguf/snapshots/r/model.safetensors"),
        b"x",
    );
    write(&dir.path().join("datasets--org--data/snapshots/r/a.gguf"), b"GGUF");
    let got = hugging_face(dir.path());
    assert_eq!(got.len(), 1, "{got:?}");
    let e = &got[0];
    assert_eq!(e.id, "ggml-org/gemma-3-270m-GGUF");
    assert!(e.path.ends_with("snapshots/rev2/gemma-3-270m-Q4_K_M.gguf"), "{e:?}");
    assert!(
        e.mmproj.as_ref().is_some_and(|m| m.ends_with("mmproj-gemma.gguf")),
        "{e:?}"
    );
}

/// LM Studio's `PUBLISHER/MODEL/` folders.
#[test]
fn lm_studio_folders_give_publisher_slash_model() {
    let dir = tempfile::tempdir().unwrap();
    write(
        &dir.path().join("lmstudio-community/SmolLM2-GGUF/SmolLM2-Q4_K_M.gguf"),
        b"GGUF",
    );
    write(&dir.path().join("lmstudio-community/empty/readme.md"), b"x");
    let got: Vec<String> = two_levels(dir.path()).into_iter().map(|e| e.id).collect();
    assert_eq!(got, ["lmstudio-community/SmolLM2-GGUF"]);
}

/// Each store where its tool's variable says, else its default under
/// home; each turned off by its switch.
#[test]
fn stores_are_found_by_their_tools_variables_and_turned_off_by_ours() {
    let vars = |k: &str| match k {
        "HOME" => Some("/home/u".to_string()),
        "OLLAMA_MODELS" => Some("/srv/ollama".to_string()),
        "HF_HOME" => Some("/data/hf".to_string()),
        _ => None,
    };
    let all = crate::config::StoreSwitches::default();
    let s = Stores::locate(&all, vars);
    assert_eq!(s.ollama, Some(PathBuf::from("/srv/ollama")));
    assert_eq!(s.hugging_face, Some(PathBuf::from("/data/hf/hub")));
    assert_eq!(s.lm_studio, Some(PathBuf::from("/home/u/.lmstudio/models")));
    assert_eq!(s.llama_cache, Some(PathBuf::from("/home/u/.cache/llama.cpp")));
    let with_hub = |k: &str| (k == "HF_HUB_CACHE").then(|| "/x/hub".to_string()).or_else(|| vars(k));
    assert_eq!(
        Stores::locate(&all, with_hub).hugging_face,
        Some(PathBuf::from("/x/hub"))
    );
    let off = crate::config::StoreSwitches {
        ollama: false,
        hugging_face: false,
        ..all
    };
    let s = Stores::locate(&off, vars);
    assert_eq!((s.ollama, s.hugging_face), (None, None));
    assert!(s.lm_studio.is_some());
}

/// A store entry that is not GGUF is listed as unusable with its reason,
/// never served; the warden's own id wins a clash; sources are told.
#[test]
fn an_unusable_store_entry_is_listed_not_served() {
    let dir = tempfile::tempdir().unwrap();
    ollama_store(dir.path());
    let mut cat = crate::catalog::Catalog::default();
    let stores = Stores {
        ollama: Some(dir.path().to_path_buf()),
        ..Stores::none()
    };
    cat.add_stores(&stores);
    // Every blob here is 4 bytes: "GGUF" and nothing more, a truncated file.
    assert!(cat.entries().is_empty(), "{:?}", cat.entries());
    assert_eq!(cat.unusable().len(), 4);
    assert!(
        cat.unusable()
            .iter()
            .all(|u| u.source == Source::Ollama && !u.reason.is_empty())
    );
    assert!(cat.get("smollm2:135m").is_none());
}

/// What an Ollama params layer becomes: each knob by the warden's name,
/// the rest left out.
#[test]
fn ollama_params_table() {
    /// The layer; the ctx, temperature and stops it gives; why.
    type Row<'a> = (
        serde_json::Value,
        Option<u32>,
        Option<f64>,
        Option<Vec<&'a str>>,
        &'a str,
    );
    let rows: &[Row] = &[
        // why: num_ctx is the model's window ceiling, as Ollama means it
        (serde_json::json!({"num_ctx": 4096}), Some(4096), None, None, "num_ctx"),
        // why: Ollama writes stop as a list, one stop each
        (
            serde_json::json!({"stop": ["<|im_end|>", "<|im_start|>"]}),
            None,
            None,
            Some(vec!["<|im_end|>", "<|im_start|>"]),
            "stops",
        ),
        // why: a single string is one stop
        (
            serde_json::json!({"stop": "END"}),
            None,
            None,
            Some(vec!["END"]),
            "one stop",
        ),
        // why: temperature is a sampling default
        (
            serde_json::json!({"temperature": 0.7}),
            None,
            Some(0.7),
            None,
            "temperature",
        ),
        // why: knobs the warden has no setting for (num_predict, mirostat) are left out
        (
            serde_json::json!({"num_predict": 64, "mirostat": 2}),
            None,
            None,
            None,
            "unknown",
        ),
        // why: a window past u32 is no window: left out, not wrapped
        (serde_json::json!({"num_ctx": 1u64 << 40}), None, None, None, "huge"),
    ];
    for (p, ctx, temp, stop, why) in rows {
        let s = ollama_params(p);
        assert_eq!(s.ctx, *ctx, "{why}");
        assert_eq!(s.sampling.temperature, *temp, "{why}");
        assert_eq!(
            s.sampling.stop,
            stop.as_ref()
                .map(|v| v.iter().map(|s| s.to_string()).collect::<Vec<_>>()),
            "{why}"
        );
    }
}

/// A manifest's system and params layers are read beside its model; one
/// without them has none.
#[test]
fn ollama_layers_are_read_beside_the_model() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    write(&r.join("blobs/sha256-mmm"), b"GGUF");
    write(&r.join("blobs/sha256-sys"), b"Be brief.");
    write(&r.join("blobs/sha256-par"), br#"{"temperature": 0.1}"#);
    let manifest = serde_json::json!({"layers": [
        {"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:mmm"},
        {"mediaType": "application/vnd.ollama.image.system", "digest": "sha256:sys"},
        {"mediaType": "application/vnd.ollama.image.params", "digest": "sha256:par"}]});
    write(
        &r.join("manifests/registry.ollama.ai/library/a/latest"),
        manifest.to_string().as_bytes(),
    );
    let bare = serde_json::json!({"layers": [
        {"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:mmm"}]});
    write(
        &r.join("manifests/registry.ollama.ai/library/b/latest"),
        bare.to_string().as_bytes(),
    );
    let found = ollama_layered(r);
    assert_eq!(found.len(), 2);
    let (a, la) = &found[0];
    assert_eq!(a.id, "a:latest");
    assert_eq!(la.settings.system.as_deref(), Some("Be brief."));
    assert_eq!(la.settings.sampling.temperature, Some(0.1));
    assert_eq!(found[1].1, Layers::default());
}
