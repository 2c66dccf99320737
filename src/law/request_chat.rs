//! What a request needs of its model beyond text (its media parts, or the
//! fill-in-the-middle tokens an infill needs) and what a model can take
//! (its projector and header): the decision that refuses a part the model
//! cannot read (`Needs::unmet`), where llama-server b10883 answers a
//! runtime error (a 500: "image input is not supported"). Each dialect
//! reads its request's shapes into `Needs`; the front door
//! (`Warden::submit`) decides, once, on the model it resolved. Pure.

use super::request::Violation;

/// What a request needs of its model beyond text: the first part that
/// needs each, by its path, for the 400 that names it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Needs {
    /// An `image_url` part.
    pub image: Option<String>,
    /// An `input_audio` part.
    pub audio: Option<String>,
    /// An `input_video` part.
    pub video: Option<String>,
    /// The request infills (`/infill`): the model needs the prefix,
    /// suffix and middle tokens.
    pub infill: bool,
}

/// What a model can take, read from its files (its projector and its
/// header).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// A projector with a vision encoder.
    pub vision: bool,
    /// A projector with an audio encoder.
    pub audio: bool,
    /// Fill-in-the-middle tokens (prefix, suffix, middle).
    pub fim: bool,
    /// What the model serves (its header declares a pooling: embedding).
    pub kind: super::types::ModelKind,
    /// An embedding model whose pooling is `rank`: it serves `/v1/rerank`.
    pub reranks: bool,
    /// A generating model whose GGUF holds no chat template (its settings
    /// may still name one: `ModelKind::served`).
    pub lacks_chat_template: bool,
}

impl Needs {
    /// The first need `caps` cannot meet, as the 400 naming its part.
    pub fn unmet(&self, caps: Capabilities, model: &str) -> Option<Violation> {
        let refuse = |param: &String, what: &str| Violation {
            param: param.clone(),
            code: "unsupported_value",
            message: format!(
                "'{param}' is {what}, but the model '{model}' was loaded without a projector that reads it (a mmproj GGUF beside the model)"
            ),
        };
        if let Some(p) = &self.image
            && !caps.vision
        {
            return Some(refuse(p, "an image"));
        }
        if let Some(p) = &self.audio
            && !caps.audio
        {
            return Some(refuse(p, "audio"));
        }
        // No projector format of b10883 reads video for the server.
        if let Some(p) = &self.video {
            return Some(refuse(p, "a video"));
        }
        (self.infill && !caps.fim).then(|| Violation {
            param: "model".into(),
            code: "unsupported_value",
            message: format!(
                "the model '{model}' has no fill-in-the-middle tokens (prefix, suffix and middle), so it cannot infill; name a code model that has them in 'model'"
            ),
        })
    }

    /// Needs an image read, its first part at `param` (`None`: no image).
    pub fn image_at(param: Option<String>) -> Self {
        Self {
            image: param,
            ..Self::default()
        }
    }

    /// An infill's need (`false`: none).
    pub fn infill(infill: bool) -> Self {
        Self {
            infill,
            ..Self::default()
        }
    }
}
