//! A local stand-in for the Hugging Face hub, for `pull`'s tests (no
//! machine here reaches the hub): the two routes the hub client asks, a
//! repository's info (`/api/models/ORG/NAME/revision/REV`) and its files
//! (`/ORG/NAME/resolve/REV/FILE`, answered by byte range with the hub's
//! `etag`, `x-repo-commit` and `content-range` headers), a gated repository
//! that wants a bearer token, and one failure on demand for the resume.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use serde_json::json;

/// One repository.
#[derive(Clone, Default)]
pub struct HubRepo {
    /// Its commit.
    pub sha: String,
    /// Its files by path.
    pub files: BTreeMap<String, Arc<Vec<u8>>>,
    /// The token it wants, when gated.
    pub token: Option<String>,
}

#[derive(Default)]
struct State {
    repos: BTreeMap<String, HubRepo>,
    /// While set: the first data range starting at or past this offset is
    /// answered 500, then this clears.
    fail_from: Option<u64>,
    /// Every range asked: (file, start, end).
    ranges: Vec<(String, u64, u64)>,
}

/// The running stand-in.
#[derive(Clone)]
pub struct FakeHub {
    /// `http://127.0.0.1:PORT`, for `HF_ENDPOINT`.
    pub base: String,
    state: Arc<Mutex<State>>,
}

impl FakeHub {
    /// Serves `repos` (by `ORG/NAME`) on a free port, on the test's runtime.
    pub fn start(repos: BTreeMap<String, HubRepo>) -> Self {
        let state = Arc::new(Mutex::new(State {
            repos,
            ..State::default()
        }));
        let shared = web::Data::new(state.clone());
        let server = HttpServer::new(move || {
            App::new()
                .app_data(shared.clone())
                .route("/api/models/{org}/{name}/revision/{rev}", web::get().to(info))
                .route("/{org}/{name}/resolve/{rev}/{file:.*}", web::get().to(file))
        })
        .workers(1)
        .bind(("127.0.0.1", 0))
        .unwrap();
        let port = server.addrs()[0].port();
        actix_rt::spawn(server.run());
        Self {
            base: format!("http://127.0.0.1:{port}"),
            state,
        }
    }

    /// Answers the next data range starting at or past `offset` with a 500.
    pub fn fail_once_from(&self, offset: u64) {
        self.state.lock().unwrap().fail_from = Some(offset);
    }

    /// The ranges asked so far: (file, start, end).
    pub fn ranges(&self) -> Vec<(String, u64, u64)> {
        self.state.lock().unwrap().ranges.clone()
    }
}

type Shared = web::Data<Arc<Mutex<State>>>;

/// Whether `req` carries what `repo` wants.
fn allowed(req: &HttpRequest, repo: &HubRepo) -> bool {
    repo.token.as_ref().is_none_or(|t| {
        req.headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v == format!("Bearer {t}"))
    })
}

async fn info(req: HttpRequest, path: web::Path<(String, String, String)>, state: Shared) -> HttpResponse {
    let (org, name, _) = path.into_inner();
    let s = state.lock().unwrap();
    let Some(repo) = s.repos.get(&format!("{org}/{name}")) else {
        return HttpResponse::NotFound().json(json!({"error": "Repository not found"}));
    };
    if !allowed(&req, repo) {
        return HttpResponse::Unauthorized().json(json!({"error": "Access to this model is restricted"}));
    }
    let siblings: Vec<_> = repo.files.keys().map(|f| json!({"rfilename": f})).collect();
    HttpResponse::Ok().json(json!({"id": format!("{org}/{name}"), "sha": repo.sha, "siblings": siblings}))
}

async fn file(req: HttpRequest, path: web::Path<(String, String, String, String)>, state: Shared) -> HttpResponse {
    let (org, name, _, file) = path.into_inner();
    let mut s = state.lock().unwrap();
    let Some(repo) = s.repos.get(&format!("{org}/{name}")).cloned() else {
        return HttpResponse::NotFound().finish();
    };
    if !allowed(&req, &repo) {
        return HttpResponse::Unauthorized().finish();
    }
    let Some(bytes) = repo.files.get(&file) else {
        return HttpResponse::NotFound().finish();
    };
    let len = bytes.len() as u64;
    let (start, end) = req
        .headers()
        .get("range")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("bytes="))
        .and_then(|v| v.split_once('-'))
        .and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?)))
        .unwrap_or((0, len.saturating_sub(1)));
    let end = end.min(len.saturating_sub(1));
    s.ranges.push((file.clone(), start, end));
    if end > start && s.fail_from.is_some_and(|f| start >= f) {
        s.fail_from = None;
        return HttpResponse::InternalServerError().finish();
    }
    // The blob's etag, as the hub gives a stored file: its own hash.
    let etag = format!("\"{:016x}{:016x}\"", len, bytes.iter().map(|&b| b as u64).sum::<u64>());
    HttpResponse::PartialContent()
        .insert_header(("etag", etag))
        .insert_header(("x-repo-commit", repo.sha.clone()))
        .insert_header(("content-range", format!("bytes {start}-{end}/{len}")))
        .body(bytes[start as usize..=end as usize].to_vec())
}
