//! Fetching a GGUF model from the Hugging Face hub (`llm-warden pull`),
//! through the hub's own client crate (`hf-hub`), into the hub's cache
//! layout (`models--ORG--NAME/{blobs,snapshots,refs}` under
//! `catalog::stores::hub_cache`), where every other tool that reads that
//! cache sees it too, and the warden's catalog serves it as `ORG/NAME`.
//!
//! - The name: `ORG/NAME`, `ORG/NAME:QUANT`, with `hf.co/` or
//!   `https://huggingface.co/` before it as Ollama and the hub write it.
//! - The file: the quant named (`law::quant::with_tag`), else the one the
//!   law picks among those that fit this machine (`law::quant::pull_choice`);
//!   a split family is fetched whole, and a vision model's projector
//!   (`mmproj`, its f16, else its smallest) with it.
//! - The hub: `HF_ENDPOINT` (a mirror, or a test's local server), the token
//!   `HF_TOKEN`, else the hub's token file.
//! - Resumable: `hf-hub` writes each file in 10 MB chunks to a `.sync.part`
//!   beside its blob, recording what is complete; a pull cut short takes up
//!   from there the next time.

use std::path::PathBuf;

pub use hf_hub::api::tokio::Progress;
use hf_hub::api::tokio::{Api, ApiBuilder, ApiError};
use hf_hub::{Cache, Repo, RepoType};

use crate::law::quant::{self, Candidate};

/// The hub's address when `HF_ENDPOINT` is unset.
pub const HUB: &str = "https://huggingface.co";

/// What `pull` was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    /// `ORG/NAME`.
    pub repo: String,
    /// The quant tag named, if any (`Q4_K_M`).
    pub quant: Option<String>,
}

/// Reads a model name as people write it.
pub fn parse(name: &str) -> Result<Wanted, String> {
    let bare = name
        .trim()
        .trim_start_matches("https://")
        .trim_start_matches("http://")
        .trim_start_matches("huggingface.co/")
        .trim_start_matches("hf.co/")
        .trim_end_matches('/');
    let (repo, quant) = match bare.split_once(':') {
        Some((r, q)) if !q.is_empty() => (r, Some(q.to_string())),
        Some((r, _)) => (r, None),
        None => (bare, None),
    };
    let mut parts = repo.split('/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(org), Some(model), None) if !org.is_empty() && !model.is_empty() => Ok(Wanted {
            repo: repo.to_string(),
            quant,
        }),
        _ => Err(format!(
            "'{name}' is not a hub model name: write ORG/NAME or ORG/NAME:QUANT (e.g. bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M)"
        )),
    }
}

/// Why a pull failed, with a sentence that says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct PullError {
    /// What kind of failure.
    pub kind: Failed,
    /// The sentence.
    pub message: String,
}

/// The kinds of a failed pull.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failed {
    /// No such repository, or no such quant in it.
    NotThere,
    /// The repository wants a token this pull lacks.
    NeedsToken,
    /// No model file fits this machine (a quant may be named).
    DoesNotFit,
    /// The repository holds no GGUF model.
    NoModel,
    /// The hub or the transfer failed (the same pull resumes).
    Hub,
}

fn failed(kind: Failed, message: String) -> PullError {
    PullError { kind, message }
}

/// What a pull fetched.
#[derive(Debug, Clone)]
pub struct Pulled {
    /// Another model file of the snapshot the catalog serves under the
    /// same id (its quant order puts it first), when there is one.
    pub shadowed_by: Option<String>,
    /// The catalog id it is served under (`ORG/NAME`).
    pub id: String,
    /// The model file (a split family's first part) in the snapshot.
    pub path: PathBuf,
    /// Its bytes (a family's total).
    pub bytes: u64,
}

/// Where and how to pull.
pub struct Puller {
    api: Api,
    endpoint: String,
}

impl Puller {
    /// A client writing into the hub cache the environment names
    /// (`stores::hub_cache`: where the store reads), and that cache.
    pub fn from_env(progress: bool) -> Result<(Self, PathBuf), String> {
        let cache = super::stores::hub_cache(&|k| std::env::var(k).ok())
            .ok_or("no home directory to keep the hub's cache in: set HF_HOME")?;
        Ok((Self::new(cache.clone(), progress)?, cache))
    }

    /// A client of the hub `HF_ENDPOINT` names (else the hub) writing into
    /// `cache` (`stores::hub_cache`), with `HF_TOKEN` (else the hub's token
    /// file), showing progress bars when `progress`.
    pub fn new(cache: PathBuf, progress: bool) -> Result<Self, String> {
        let endpoint = std::env::var("HF_ENDPOINT")
            .ok()
            .filter(|e| !e.trim().is_empty())
            .map_or_else(|| HUB.to_string(), |e| e.trim_end_matches('/').to_string());
        let cache = Cache::new(cache);
        let token = std::env::var("HF_TOKEN")
            .ok()
            .filter(|t| !t.trim().is_empty())
            .or_else(|| cache.token());
        let api = ApiBuilder::from_cache(cache)
            .with_endpoint(endpoint.clone())
            .with_token(token)
            .with_progress(progress)
            .build()
            .map_err(|e| format!("cannot start the hub client: {e}"))?;
        Ok(Self { api, endpoint })
    }

    /// Fetches what `want` names, the quant chosen against `ram_bytes`,
    /// showing the client's own progress bars when it was built with them.
    pub async fn pull(&self, want: &Wanted, ram_bytes: u64) -> Result<Pulled, PullError> {
        self.pull_with(want, ram_bytes, None::<()>).await
    }

    /// As `pull`, each file's bytes told to `progress` as they come.
    pub async fn pull_with<P: Progress + Clone + Send + Sync + 'static>(
        &self,
        want: &Wanted,
        ram_bytes: u64,
        progress: Option<P>,
    ) -> Result<Pulled, PullError> {
        let repo = self.api.repo(Repo::new(want.repo.clone(), RepoType::Model));
        let info = repo.info().await.map_err(|e| self.said(&want.repo, e))?;
        let families = families(info.siblings.iter().map(|s| s.rfilename.as_str()));
        if families.is_empty() {
            return Err(failed(
                Failed::NoModel,
                format!(
                    "{} on {} holds no GGUF file (the warden runs GGUF models: look for a repository named ...-GGUF)",
                    want.repo, self.endpoint
                ),
            ));
        }
        let mut candidates = Vec::with_capacity(families.len());
        for f in &families {
            let mut size = 0;
            for part in &f.parts {
                let m = self
                    .api
                    .metadata(&repo.url(part))
                    .await
                    .map_err(|e| self.said(&want.repo, e))?;
                size += m.size() as u64;
            }
            candidates.push(Candidate {
                name: f.parts[0].clone(),
                size,
            });
        }
        let chosen = choose(&candidates, want, ram_bytes)?;
        // A vision model's projector comes with it (the store loads the
        // snapshot's mmproj beside the model): its f16, else its smallest.
        let projector = projector(&candidates);
        let mut parts: Vec<&String> = families[chosen].parts.iter().collect();
        parts.extend(projector.map(|i| &families[i].parts[0]));
        let mut first = None;
        for part in parts {
            let got = match &progress {
                Some(p) => repo.download_with_progress(part, p.clone()).await,
                None => repo.download(part).await,
            };
            let path = got.map_err(|e| self.said(&want.repo, e))?;
            first.get_or_insert(path);
        }
        let path = first.expect("a family has a part");
        Ok(Pulled {
            id: want.repo.clone(),
            shadowed_by: shadowing(&path),
            path,
            bytes: candidates[chosen].size,
        })
    }

    /// A hub error as a sentence that says what to do.
    fn said(&self, repo: &str, e: ApiError) -> PullError {
        let status = match &e {
            ApiError::RequestError(r) => r.status().map(|s| s.as_u16()),
            _ => None,
        };
        match status {
            Some(401 | 403) => failed(
                Failed::NeedsToken,
                format!(
                    "{repo} on {} needs a token with access to it: set HF_TOKEN (a gated model must also be accepted on its page)",
                    self.endpoint
                ),
            ),
            Some(404) => failed(
                Failed::NotThere,
                format!("no repository {repo} on {} (check the name)", self.endpoint),
            ),
            _ => failed(
                Failed::Hub,
                format!(
                    "could not fetch {repo} from {}: {e}; the same pull again resumes where this one stopped",
                    self.endpoint
                ),
            ),
        }
    }
}

/// The projector to fetch beside the model, if the repository has one:
/// the f16 one, else the smallest.
fn projector(candidates: &[Candidate]) -> Option<usize> {
    let mmproj: Vec<usize> = (0..candidates.len())
        .filter(|&i| quant::is_mmproj(&candidates[i].name))
        .collect();
    mmproj
        .iter()
        .copied()
        .find(|&i| quant::tag_of(&candidates[i].name).eq_ignore_ascii_case("f16"))
        .or_else(|| mmproj.into_iter().min_by_key(|&i| candidates[i].size))
}

/// The model file of `path`'s snapshot the catalog serves instead of it
/// (the store reads a snapshot as any model directory: `catalog::entry_for`),
/// if another.
fn shadowing(path: &std::path::Path) -> Option<String> {
    let served = super::entry_for(path.parent()?)?.path;
    let served = served.file_name()?.to_string_lossy().into_owned();
    (served != path.file_name()?.to_string_lossy()).then_some(served)
}

/// The quant to fetch: the one named, else what fits `ram_bytes`.
fn choose(candidates: &[Candidate], want: &Wanted, ram_bytes: u64) -> Result<usize, PullError> {
    let tags = || {
        candidates
            .iter()
            .filter(|c| !quant::is_mmproj(&c.name))
            .map(|c| quant::tag_of(&c.name))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match &want.quant {
        Some(tag) => quant::with_tag(candidates, tag).ok_or_else(|| {
            failed(
                Failed::NotThere,
                format!("{} has no {tag} file (it has: {})", want.repo, tags()),
            )
        }),
        None => quant::pull_choice(candidates, quant::pull_budget(ram_bytes)).map_err(|smallest| match smallest {
            Some(i) => failed(
                Failed::DoesNotFit,
                format!(
                    "no file of {} fits this machine ({} of RAM; the smallest, {}, takes {} MiB): name a quant to fetch it anyway (it has: {})",
                    want.repo,
                    human_gib(ram_bytes),
                    candidates[i].name,
                    candidates[i].size >> 20,
                    tags()
                ),
            ),
            None => failed(
                Failed::NoModel,
                format!("{} holds only projector files (mmproj), no model", want.repo),
            ),
        }),
    }
}

fn human_gib(b: u64) -> String {
    format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64)
}

/// A model file of a repository: one GGUF, or a split family's parts in
/// order.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Family {
    parts: Vec<String>,
}

/// The repository's GGUF files as families (a lone file is a family of
/// one; a family with a part missing is left out).
fn families<'a>(names: impl Iterator<Item = &'a str>) -> Vec<Family> {
    let mut lone = Vec::new();
    let mut split: std::collections::BTreeMap<(String, u32), Vec<(u32, String)>> = Default::default();
    for n in names.filter(|n| n.to_ascii_lowercase().ends_with(".gguf")) {
        let file = n.rsplit('/').next().unwrap_or(n);
        match super::split_part(file) {
            Some((base, i, count)) => {
                let dir = &n[..n.len() - file.len()];
                split
                    .entry((format!("{dir}{base}"), count))
                    .or_default()
                    .push((i, n.to_string()));
            }
            None => lone.push(Family {
                parts: vec![n.to_string()],
            }),
        }
    }
    for ((_, count), mut parts) in split {
        parts.sort();
        if parts.len() == count as usize && parts.iter().enumerate().all(|(k, (i, _))| *i == k as u32 + 1) {
            lone.push(Family {
                parts: parts.into_iter().map(|(_, n)| n).collect(),
            });
        }
    }
    lone
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_as_people_write_them() {
        let w = |repo: &str, q: Option<&str>| {
            Ok(Wanted {
                repo: repo.into(),
                quant: q.map(str::to_string),
            })
        };
        let rows = [
            ("acme/tiny-GGUF", w("acme/tiny-GGUF", None)),
            ("acme/tiny-GGUF:Q4_K_M", w("acme/tiny-GGUF", Some("Q4_K_M"))),
            // why: Ollama's spelling of a hub model
            ("hf.co/acme/tiny-GGUF:q8_0", w("acme/tiny-GGUF", Some("q8_0"))),
            // why: the page's address, pasted
            ("https://huggingface.co/acme/tiny-GGUF/", w("acme/tiny-GGUF", None)),
            ("acme/tiny-GGUF:", w("acme/tiny-GGUF", None)),
        ];
        for (i, (name, want)) in rows.into_iter().enumerate() {
            assert_eq!(parse(name), want, "row {i}");
        }
        for bad in ["llama3.2", "acme/", "/x", "a/b/c", ""] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains("ORG/NAME"), "{bad}: {e}");
        }
    }

    #[test]
    fn families_group_split_parts_and_skip_the_rest() {
        let names = [
            "README.md",
            "tiny-Q4_K_M.gguf",
            "big/big-Q8_0-00002-of-00002.gguf",
            "big/big-Q8_0-00001-of-00002.gguf",
            "half-Q2_K-00001-of-00002.gguf",
            "mmproj-f16.gguf",
        ];
        let got = families(names.into_iter());
        let want = [
            vec!["tiny-Q4_K_M.gguf"],
            vec!["mmproj-f16.gguf"],
            // why: a whole family, its parts in order
            vec!["big/big-Q8_0-00001-of-00002.gguf", "big/big-Q8_0-00002-of-00002.gguf"],
            // (a family missing its second part is left out)
        ];
        let got: Vec<Vec<&str>> = got
            .iter()
            .map(|f| f.parts.iter().map(String::as_str).collect())
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn the_projector_is_its_f16_else_its_smallest() {
        let c = |n: &str, s: u64| Candidate {
            name: n.into(),
            size: s,
        };
        let files = [
            c("m-Q4_K_M.gguf", 10),
            c("mmproj-m-Q8_0.gguf", 2),
            c("mmproj-m-f16.gguf", 4),
        ];
        assert_eq!(projector(&files), Some(2));
        assert_eq!(projector(&files[..2]), Some(1));
        assert_eq!(projector(&files[..1]), None);
    }

    #[test]
    fn a_named_quant_missing_lists_the_others() {
        let c = |n: &str, s: u64| Candidate {
            name: n.into(),
            size: s,
        };
        let files = [c("t-Q4_K_M.gguf", 10), c("t-Q8_0.gguf", 20), c("mmproj-t-f16.gguf", 1)];
        let want = Wanted {
            repo: "acme/t".into(),
            quant: Some("Q2_K".into()),
        };
        let e = choose(&files, &want, 1 << 34).unwrap_err();
        assert_eq!(e.kind, Failed::NotThere);
        assert_eq!(e.message, "acme/t has no Q2_K file (it has: Q4_K_M, Q8_0)");
        let none_fit = Wanted { quant: None, ..want };
        let e = choose(&[c("t-Q8_0.gguf", 8 << 30)], &none_fit, 2 << 30).unwrap_err();
        assert_eq!(e.kind, Failed::DoesNotFit);
        let said = "no file of acme/t fits this machine (2.0 GiB of RAM; the smallest, t-Q8_0.gguf";
        assert!(e.message.starts_with(said), "{e}");
    }
}
