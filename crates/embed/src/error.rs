//! What can go wrong while loading a model or embedding text. Messages never carry the API key
//! (server messages quoting it are redacted) or the embeddings URL (which may hold credentials).

use std::path::PathBuf;

use parley_core::retry::PostError;

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
    /// The embeddings server did not answer with a 2xx, after the retries allowed.
    #[error("the embeddings server {}", describe(error, *key_set))]
    Request {
        error: PostError,
        /// Whether `EMBEDDINGS_API_KEY` was set, to say so when credentials are refused.
        key_set: bool,
    },
    /// A 2xx whose body is not an embeddings response (or not one for these texts).
    #[error("the embeddings server's response could not be used: {0}")]
    BadResponse(String),
    /// A vector whose length is not the configured one: storing it would mix models.
    #[error(
        "the embeddings server returned a vector of {got} dimensions, but EMBEDDINGS_DIMENSIONS is {expected}"
    )]
    Dimensions { expected: usize, got: usize },
}

/// The rest of the sentence after "the embeddings server": what happened, with the server's
/// own (redacted) message when it gave one.
fn describe(error: &PostError, key_set: bool) -> String {
    let with = |what: String, detail: &str| {
        if detail.is_empty() {
            what
        } else {
            format!("{what}: {detail}")
        }
    };
    match error {
        PostError::Unauthorized { status, detail, .. } => {
            let key = if key_set {
                "check EMBEDDINGS_API_KEY"
            } else {
                "EMBEDDINGS_API_KEY is not set"
            };
            with(
                format!("refused the credentials (HTTP {status}; {key})"),
                detail,
            )
        }
        PostError::Status { status, detail } => with(format!("answered HTTP {status}"), detail),
        PostError::RateLimited { .. } => {
            "is still rate limiting (HTTP 429) after the retries allowed".into()
        }
        PostError::TooLarge { limit } => format!("sent a response larger than {limit} bytes"),
        PostError::DeadlineReached | PostError::Timeout => {
            "did not answer within EMBEDDINGS_TIMEOUT_MS".into()
        }
        PostError::Transport(message) => format!("cannot be reached: {message}"),
    }
}
