//! Text embeddings behind one small interface, [`Embedder`]: all-MiniLM-L6-v2 run in-process
//! on the CPU ([`BuiltIn`]), or any OpenAI-compatible `/v1/embeddings` endpoint. The embedder is
//! built once at start-up from [`EmbedSettings`]; every vector it returns has [`Embedder::dims`]
//! numbers. It knows no database: what a vector is stored as is the caller's business.

mod bert;
mod builtin;
mod error;
mod http;
mod math;
#[cfg(target_arch = "x86_64")]
mod query;
mod settings;

use std::path::PathBuf;

pub use builtin::BuiltIn;
pub use error::EmbedError;
pub use http::HttpEmbedder;
pub use settings::{Backend, EmbedSettings, HttpSettings};

/// The built-in model's name, the first half of its [`Embedder::model_id`].
pub const BUILT_IN_MODEL: &str = "all-MiniLM-L6-v2";

/// Where the built-in model's files are looked for when `EMBEDDINGS_MODEL_DIR` is not set: a
/// Lambda layer's `/opt/models/all-MiniLM-L6-v2` inside Lambda, else
/// `./.parley/models/all-MiniLM-L6-v2` (where `scripts/model install` puts it).
pub fn default_model_dir() -> PathBuf {
    if std::env::var_os("AWS_LAMBDA_FUNCTION_NAME").is_some() {
        PathBuf::from("/opt/models").join(BUILT_IN_MODEL)
    } else {
        PathBuf::from(".parley/models").join(BUILT_IN_MODEL)
    }
}

/// One way of turning text into vectors. An enum, not a trait object: there are two, and the
/// callers (ingestion, the mcp function) hold one for the life of the process.
#[derive(Clone)]
pub enum Embedder {
    BuiltIn(BuiltIn),
    Http(HttpEmbedder),
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Embedder").field(&self.model_id()).finish()
    }
}

impl Embedder {
    /// The embedder the settings describe; the built-in model is loaded now, so a missing or
    /// broken model stops start-up rather than the first call.
    pub fn from_settings(settings: &EmbedSettings) -> Result<Embedder, EmbedError> {
        match &settings.backend {
            Backend::BuiltIn { model_dir } => {
                Ok(Embedder::BuiltIn(BuiltIn::load(model_dir, settings.batch)?))
            }
            Backend::Http(http) => {
                let client = reqwest::Client::builder().build().map_err(|e| {
                    EmbedError::Inference(format!(
                        "no HTTP client: {}",
                        parley_core::error::chain(&e)
                    ))
                })?;
                Ok(Embedder::Http(HttpEmbedder::new(
                    http.clone(),
                    settings.batch,
                    client,
                )))
            }
        }
    }

    /// `<model>@<dims>`, recorded per collection so a query embedded by another model is
    /// refused: `all-MiniLM-L6-v2@384` for the built-in model.
    pub fn model_id(&self) -> &str {
        match self {
            Embedder::BuiltIn(model) => model.model_id(),
            Embedder::Http(http) => http.model_id(),
        }
    }

    /// How many numbers each vector has.
    pub fn dims(&self) -> usize {
        match self {
            Embedder::BuiltIn(model) => model.dims(),
            Embedder::Http(http) => http.dims(),
        }
    }

    /// One vector per text, in order. Texts are sent (or run) in batches of `EMBEDDINGS_BATCH`;
    /// the built-in model runs on a blocking thread, so the async runtime stays responsive.
    pub async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        match self {
            Embedder::BuiltIn(model) => {
                let model = model.clone();
                let texts = texts.to_vec();
                tokio::task::spawn_blocking(move || model.embed_blocking(&texts))
                    .await
                    .map_err(|e| EmbedError::Inference(format!("the embedding task failed: {e}")))?
            }
            Embedder::Http(http) => http.embed(texts).await,
        }
    }

    /// The vector of one text, e.g. a search query.
    pub async fn embed_one(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        let mut vectors = self.embed(&[text.to_owned()]).await?;
        vectors
            .pop()
            .ok_or_else(|| EmbedError::Inference("no vector came back for one text".into()))
    }
}
