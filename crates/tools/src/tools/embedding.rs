//! The values the server computes for a call: the embeddings of its texts
//! (`from = "embedding.<argument>"`) and the embedder's model id (`from = "embedder.model"`).
//!
//! A call embeds once, before its transaction, so no pooled connection waits on the model; it
//! never embeds the same text twice. It knows no SQL: the vectors are bound as `float4[]`.

use std::collections::HashMap;

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
    let by_argument: HashMap<&str, &Vec<f32>> = params
        .iter()
        .filter_map(|p| match &p.source {
            Source::Embedding(argument) => text_of(argument)
                .and_then(|text| texts.iter().position(|t| *t == text))
                .and_then(|i| vectors.get(i))
                .map(|vector| (argument.as_str(), vector)),
            _ => None,
        })
        .collect();
    fill(
        params,
        values,
        |argument| by_argument.get(argument).map(|v| (*v).clone()),
        embedder.model_id(),
    );
    Ok(())
}

/// Sets the computed parameters in `values` (in the order of `params`): each embedding to
/// `vector_of(argument)`, NULL for a text left out, and the model id to `model`. The one place
/// computed values are bound: for a call's own embeddings ([`bind`]) and for `parley eval`'s,
/// which embeds a question once for every variant of the SQL it runs.
pub fn fill(
    params: &[ParamSpec],
    values: &mut [SqlValue],
    vector_of: impl Fn(&str) -> Option<Vec<f32>>,
    model: &str,
) {
    for (p, value) in params.iter().zip(values.iter_mut()) {
        match &p.source {
            Source::Embedding(argument) => {
                *value = vector_of(argument).map_or(SqlValue::Null, SqlValue::Vector);
            }
            Source::EmbedderModel => *value = SqlValue::Text(model.to_owned()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::params::ParamType;

    fn param(name: &str, source: Source, ty: ParamType) -> ParamSpec {
        ParamSpec {
            name: name.into(),
            description: None,
            ty,
            required: false,
            default: None,
            sensitive: false,
            source,
        }
    }

    fn params() -> Vec<ParamSpec> {
        let text = ParamType::String {
            min_length: None,
            max_length: None,
        };
        vec![
            param("q", Source::Argument, text.clone()),
            param("other", Source::Argument, text),
            param("e1", Source::Embedding("q".into()), ParamType::Vector),
            param("e2", Source::Embedding("q".into()), ParamType::Vector),
            param("e3", Source::Embedding("other".into()), ParamType::Vector),
            param(
                "model",
                Source::EmbedderModel,
                ParamType::String {
                    min_length: None,
                    max_length: None,
                },
            ),
        ]
    }

    #[tokio::test]
    async fn each_text_is_embedded_once_and_a_null_text_has_a_null_embedding() {
        let embedder = parley_testkit::embeddings::embedder();
        let mut values = vec![
            SqlValue::Text("a cat on a mat".into()),
            SqlValue::Null,
            SqlValue::Null,
            SqlValue::Null,
            SqlValue::Null,
            SqlValue::Null,
        ];
        bind(&params(), &mut values, Some(&embedder)).await.unwrap();
        let SqlValue::Vector(v) = &values[2] else {
            panic!("not a vector: {:?}", values[2]);
        };
        assert_eq!(v.len(), 384);
        assert_eq!(values[3], values[2], "the same text, the same vector");
        assert_eq!(values[4], SqlValue::Null);
        assert_eq!(values[5], SqlValue::Text("all-MiniLM-L6-v2@384".into()));
        assert_eq!(
            values[0],
            SqlValue::Text("a cat on a mat".into()),
            "untouched"
        );
    }

    #[tokio::test]
    async fn without_an_embedder_a_tool_that_needs_one_is_refused_and_others_run() {
        let mut values = vec![SqlValue::Text("x".into()), SqlValue::Null];
        let plain = &params()[..2];
        bind(plain, &mut values, None).await.unwrap();
        let mut values = vec![SqlValue::Null; 6];
        let err = bind(&params(), &mut values, None).await.unwrap_err();
        assert!(matches!(err, EmbeddingError::NoEmbedder));
    }
}
