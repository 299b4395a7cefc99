//! `EMBEDDINGS_*` settings: which embedder, and its knobs, read once at start-up.

use std::path::PathBuf;

use parley_core::config::{ConfigError, Env};

/// Texts per forward pass (built-in) or per request (http) unless `EMBEDDINGS_BATCH` says.
pub const DEFAULT_BATCH: usize = 32;

#[derive(Debug, Clone)]
pub struct EmbedSettings {
    pub backend: Backend,
    /// `EMBEDDINGS_BATCH`: texts per forward pass or request.
    pub batch: usize,
}

/// `EMBEDDINGS`: `builtin` (default) or `http`.
#[derive(Debug, Clone)]
pub enum Backend {
    /// all-MiniLM-L6-v2 from `EMBEDDINGS_MODEL_DIR` (default [`crate::default_model_dir`]).
    BuiltIn { model_dir: PathBuf },
}

impl EmbedSettings {
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let batch = env.limit("EMBEDDINGS_BATCH", DEFAULT_BATCH as u64, 1..=2048)? as usize;
        let backend = match env.get("EMBEDDINGS").unwrap_or("builtin") {
            "builtin" => Backend::BuiltIn {
                model_dir: env
                    .get("EMBEDDINGS_MODEL_DIR")
                    .map(PathBuf::from)
                    .unwrap_or_else(crate::default_model_dir),
            },
            other => {
                return Err(ConfigError::new(
                    "EMBEDDINGS",
                    format!("must be builtin or http, got {other:?}"),
                ));
            }
        };
        Ok(Self { backend, batch })
    }

    /// The built-in model from `model_dir`, with the default batch size.
    pub fn built_in(model_dir: PathBuf) -> Self {
        Self {
            backend: Backend::BuiltIn { model_dir },
            batch: DEFAULT_BATCH,
        }
    }
}
