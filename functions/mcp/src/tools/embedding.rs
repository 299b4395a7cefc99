//! The values the server computes for a call: the embeddings of its texts
//! (`from = "embedding.<argument>"`) and the embedder's model id (`from = "embedder.model"`).
//!
//! A call embeds once, before its transaction, so no pooled connection waits on the model; it
//! never embeds the same text twice. It knows no SQL: the vectors are bound as `float4[]`.

use parley_embed::{EmbedError, Embedder};

use super::params::{ParamSpec, Source, SqlValue};
use super::spec::ToolSpec;

/// Why a call's computed values are missing; the tool error the caller sees.
#[derive(Debug, thiserror::Error)]
pub enum EmbeddingError {
    #[error("the text could not be embedded right now; try again in a few seconds")]
    Failed(#[source] EmbedError),
    #[error("this tool embeds text, and the server was started without an embedder")]
    NoEmbedder,
}

/// Some tool needs the embedder (an embedding or its model id), so start-up loads it.
pub fn needed_by(tools: &[ToolSpec]) -> bool {
    tools
        .iter()
        .flat_map(|t| &t.params)
        .any(|p| p.source.needs_embedder())
}

/// Fills in the computed parameters of a call whose arguments are already in `values` (in the
/// order of `params`). An embedding of a text left out (NULL) is NULL.
pub async fn bind(
    params: &[ParamSpec],
    values: &mut [SqlValue],
    embedder: Option<&Embedder>,
) -> Result<(), EmbeddingError> {
    if !params.iter().any(|p| p.source.needs_embedder()) {
        return Ok(());
    }
    let embedder = embedder.ok_or(EmbeddingError::NoEmbedder)?;
    let text_of = |argument: &str| {
        params
            .iter()
            .position(|p| p.name == argument)
            .and_then(|i| match &values[i] {
                SqlValue::Text(text) => Some(text.clone()),
                _ => None,
            })
    };
    let mut texts: Vec<String> = Vec::new();
    for p in params {
        if let Source::Embedding(argument) = &p.source
            && let Some(text) = text_of(argument)
            && !texts.contains(&text)
        {
            texts.push(text);
        }
    }
    let vectors = embedder
        .embed(&texts)
        .await
        .map_err(EmbeddingError::Failed)?;
    let computed: Vec<Option<SqlValue>> = params
        .iter()
        .map(|p| match &p.source {
            Source::Embedding(argument) => Some(
                text_of(argument)
                    .and_then(|text| texts.iter().position(|t| *t == text))
                    .and_then(|i| vectors.get(i).cloned())
                    .map_or(SqlValue::Null, SqlValue::Vector),
            ),
            Source::EmbedderModel => Some(SqlValue::Text(embedder.model_id().to_owned())),
            _ => None,
        })
        .collect();
    for (value, computed) in values.iter_mut().zip(computed) {
        if let Some(computed) = computed {
            *value = computed;
        }
    }
    Ok(())
}
