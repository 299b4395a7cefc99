//! The built-in embedding model for tests: where its files are ([`model_dir`]) and one loaded
//! copy per test binary ([`embedder`]). A missing model fails the test with what to run: tests
//! that embed are never silently skipped.

use std::path::PathBuf;
use std::sync::OnceLock;

use parley_embed::{EmbedSettings, Embedder};

/// The built-in model's directory: `PARLEY_MODEL_DIR` if set, else the workspace's
/// `.parley/models/all-MiniLM-L6-v2`. Panics, saying to run `scripts/model install`, when the
/// model is not there.
pub fn model_dir() -> PathBuf {
    let dir = std::env::var_os("PARLEY_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../..")
                .join(".parley/models")
                .join(parley_embed::BUILT_IN_MODEL)
        });
    assert!(
        dir.join("model.safetensors").is_file() && dir.join("tokenizer.json").is_file(),
        "the embedding model is not in {}: run `scripts/model install` (or set PARLEY_MODEL_DIR)",
        dir.display()
    );
    dir
}

/// The built-in embedder, loaded once per test binary and shared (it is cheap to clone).
pub fn embedder() -> Embedder {
    static EMBEDDER: OnceLock<Embedder> = OnceLock::new();
    EMBEDDER
        .get_or_init(|| {
            Embedder::from_settings(&EmbedSettings::built_in(model_dir()))
                .unwrap_or_else(|e| panic!("{e}"))
        })
        .clone()
}
