//! The HTTP embedder: any OpenAI-compatible `POST {EMBEDDINGS_URL}/embeddings`, texts sent in
//! batches of `EMBEDDINGS_BATCH`, each request with the retry policy the LLM client uses
//! (`parley_core::retry`). Every vector is checked to have `EMBEDDINGS_DIMENSIONS` numbers and
//! put back in input order by its `index`: a server's answer is not trusted to be either.

use std::sync::Arc;

use parley_core::config::ExposeSecret;
use parley_core::retry::{self, RetryPolicy};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::EmbedError;
use crate::settings::HttpSettings;

/// The most bytes of one response read: 32 vectors of 3072 floats as JSON text are ~2 MiB.
const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;

/// A client of one embeddings endpoint; cheap to clone (it shares its connection pool).
#[derive(Clone)]
pub struct HttpEmbedder {
    inner: Arc<Inner>,
}

struct Inner {
    settings: HttpSettings,
    url: url::Url,
    model_id: String,
    batch: usize,
    policy: RetryPolicy,
    http: reqwest::Client,
}

#[derive(Serialize)]
struct Request<'a> {
    model: &'a str,
    input: &'a [String],
    dimensions: usize,
    encoding_format: &'static str,
}

#[derive(Deserialize)]
struct Response {
    data: Vec<Datum>,
}

#[derive(Deserialize)]
struct Datum {
    index: usize,
    embedding: Vec<f32>,
}

impl HttpEmbedder {
    /// An embedder posting with `http` (a client the caller may share). `batch` is the most
    /// texts per request.
    pub fn new(settings: HttpSettings, batch: usize, http: reqwest::Client) -> Self {
        let url = settings
            .url
            .join("embeddings")
            .expect("a base URL that ends in '/' joins a relative path");
        let policy = settings.retry.policy("embeddings", MAX_RESPONSE_BYTES);
        Self {
            inner: Arc::new(Inner {
                model_id: format!("{}@{}", settings.model, settings.dimensions),
                url,
                batch: batch.max(1),
                policy,
                settings,
                http,
            }),
        }
    }

    pub fn model_id(&self) -> &str {
        &self.inner.model_id
    }

    pub fn dims(&self) -> usize {
        self.inner.settings.dimensions
    }

    /// One vector per text, in order: one request per batch, one after the other (a server
    /// that rate-limits is not helped by more at once).
    pub async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut vectors = Vec::with_capacity(texts.len());
        for batch in texts.chunks(self.inner.batch) {
            vectors.extend(self.embed_batch(batch).await?);
        }
        Ok(vectors)
    }

    async fn embed_batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let inner = &self.inner;
        let settings = &inner.settings;
        let body = serde_json::to_vec(&Request {
            model: &settings.model,
            input: texts,
            dimensions: settings.dimensions,
            encoding_format: "float",
        })
        .map_err(|e| EmbedError::BadResponse(format!("the request cannot be written: {e}")))?;
        // Every attempt's timeout, and the retry budget between them: the bound of one batch.
        let deadline = Instant::now() + settings.retry.worst_case();
        let key = settings.api_key.as_ref();
        let bytes = retry::post_json(
            &inner.http,
            &inner.policy,
            key,
            inner.url.clone(),
            body,
            deadline,
            &mut 0,
        )
        .await
        .map_err(|error| EmbedError::Request {
            error,
            key_set: key.is_some(),
        })?;
        let response: Response = serde_json::from_slice(&bytes).map_err(|e| {
            let key = key.map(|k| k.expose_secret());
            let text = retry::excerpt(&String::from_utf8_lossy(&bytes), key);
            EmbedError::BadResponse(format!("not an embeddings response ({e}): {text}"))
        })?;
        in_order(response.data, texts.len(), settings.dimensions)
    }
}

/// The vectors by their `index`, each checked to be there once and to have `dims` numbers.
fn in_order(data: Vec<Datum>, count: usize, dims: usize) -> Result<Vec<Vec<f32>>, EmbedError> {
    if data.len() != count {
        return Err(EmbedError::BadResponse(format!(
            "{} vectors came back for {count} texts",
            data.len()
        )));
    }
    let mut vectors: Vec<Option<Vec<f32>>> = vec![None; count];
    for datum in data {
        if datum.embedding.len() != dims {
            return Err(EmbedError::Dimensions {
                expected: dims,
                got: datum.embedding.len(),
            });
        }
        let slot = vectors.get_mut(datum.index).ok_or_else(|| {
            EmbedError::BadResponse(format!("index {} for {count} texts", datum.index))
        })?;
        if slot.replace(datum.embedding).is_some() {
            return Err(EmbedError::BadResponse(format!(
                "index {} came back twice",
                datum.index
            )));
        }
    }
    // All `count` slots are filled: as many data as slots, none twice.
    Ok(vectors.into_iter().flatten().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn datum(index: usize, first: f32) -> Datum {
        Datum {
            index,
            embedding: vec![first, 0.0],
        }
    }

    #[test]
    fn vectors_are_put_back_in_input_order_by_index() {
        let vectors = in_order(vec![datum(1, 1.0), datum(0, 0.0), datum(2, 2.0)], 3, 2).unwrap();
        assert_eq!(
            vectors,
            vec![vec![0.0, 0.0], vec![1.0, 0.0], vec![2.0, 0.0]]
        );
    }

    #[test]
    fn a_missing_repeated_or_stray_index_is_a_bad_response() {
        for data in [
            vec![datum(0, 0.0)],
            vec![datum(0, 0.0), datum(0, 1.0)],
            vec![datum(0, 0.0), datum(5, 1.0)],
        ] {
            let err = in_order(data, 2, 2).unwrap_err();
            assert!(matches!(err, EmbedError::BadResponse(_)), "{err:?}");
        }
    }

    #[test]
    fn a_vector_of_other_dimensions_is_refused_naming_both() {
        let err = in_order(vec![datum(0, 0.0)], 1, 3).unwrap_err();
        assert!(
            matches!(
                err,
                EmbedError::Dimensions {
                    expected: 3,
                    got: 2
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("EMBEDDINGS_DIMENSIONS"), "{err}");
    }
}
