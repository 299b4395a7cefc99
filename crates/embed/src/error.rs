//! What can go wrong while loading a model or embedding text. Messages never carry an API key
//! or the embeddings URL (which may hold credentials).

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// The built-in model's files are missing or unreadable.
    #[error(
        "the embedding model in {} cannot be loaded: {problem} (run `scripts/model install`, or set EMBEDDINGS_MODEL_DIR)",
        dir.display()
    )]
    Model { dir: PathBuf, problem: String },
    /// The built-in model failed on some input (tokenizer or tensor error).
    #[error("embedding failed: {0}")]
    Inference(String),
}
