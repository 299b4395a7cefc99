//! The HTTP embedder against a local OpenAI-compatible server backed by the built-in model:
//! the same vectors as the built-in embedder, in order across batches, the retry policy, and
//! clear failures that never show the key.

use parley_core::config::Env;
use parley_embed::{EmbedError, EmbedSettings, Embedder};
use parley_testkit::embeddings::{EmbeddingsServer, Fault, embedder};

const KEY: &str = "sk-embed-test-key";

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (norm(a) * norm(b))
}

/// An HTTP embedder for `server`, configured as a deployment would be, plus `extra` settings.
fn http_embedder(server: &EmbeddingsServer, extra: &[(&str, &str)]) -> Embedder {
    let url = server.base_url();
    let mut pairs = vec![
        ("EMBEDDINGS", "http"),
        ("EMBEDDINGS_URL", url.as_str()),
        ("EMBEDDINGS_MODEL", "all-MiniLM-L6-v2"),
        ("EMBEDDINGS_DIMENSIONS", "384"),
        ("EMBEDDINGS_API_KEY", KEY),
        ("EMBEDDINGS_BATCH", "4"),
    ];
    pairs.extend_from_slice(extra);
    let env = Env::from_pairs(pairs);
    Embedder::from_settings(&EmbedSettings::from_env(&env).unwrap()).unwrap()
}

fn texts(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            format!(
                "Text {i} about {}",
                ["vacuum", "indexes", "locks", "WAL"][i % 4]
            )
        })
        .collect()
}

#[tokio::test]
async fn http_vectors_equal_the_built_in_ones_in_input_order() {
    let server = EmbeddingsServer::start().await;
    let http = http_embedder(&server, &[]);
    assert_eq!(http.model_id(), "all-MiniLM-L6-v2@384");
    assert_eq!(http.dims(), 384);
    let texts = texts(10);
    let remote = http.embed(&texts).await.unwrap();
    let local = embedder().embed(&texts).await.unwrap();
    assert_eq!(remote.len(), texts.len());
    for (i, (r, l)) in remote.iter().zip(&local).enumerate() {
        assert!(cosine(r, l) > 0.9999, "text {i}: {}", cosine(r, l));
    }
    // Batches of 4: 4 + 4 + 2, each with the model, the dimensions and the key.
    let requests = server.requests();
    let sizes: Vec<usize> = requests
        .iter()
        .map(|r| r["input"].as_array().unwrap().len())
        .collect();
    assert_eq!(sizes, vec![4, 4, 2]);
    assert_eq!(requests[0]["model"], "all-MiniLM-L6-v2");
    assert_eq!(requests[0]["dimensions"], 384);
    assert_eq!(
        server.authorizations(),
        vec![Some(format!("Bearer {KEY}")); 3]
    );
    let one = http.embed_one(&texts[7]).await.unwrap();
    assert!(cosine(&one, &local[7]) > 0.9999);
}

#[tokio::test]
async fn a_429_and_a_500_are_retried_then_answered() {
    let server = EmbeddingsServer::with_faults(vec![
        Fault::Status(429, "Rate limit reached".into()),
        Fault::Status(500, "upstream hiccup".into()),
    ])
    .await;
    let http = http_embedder(&server, &[("EMBEDDINGS_RETRY_BUDGET_MS", "5000")]);
    let vectors = http.embed(&texts(2)).await.unwrap();
    assert_eq!(vectors.len(), 2);
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn persistent_500s_end_in_an_error_after_the_allowed_retries() {
    let fault = Fault::Status(503, "overloaded".into());
    let server = EmbeddingsServer::with_faults(vec![fault; 5]).await;
    let http = http_embedder(
        &server,
        &[
            ("EMBEDDINGS_MAX_RETRIES", "1"),
            ("EMBEDDINGS_RETRY_BUDGET_MS", "5000"),
        ],
    );
    let err = http.embed(&texts(1)).await.unwrap_err();
    assert!(matches!(err, EmbedError::Request { .. }), "{err:?}");
    assert!(err.to_string().contains("HTTP 503: overloaded"), "{err}");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn vectors_of_the_wrong_dimensions_are_refused_naming_both() {
    let server = EmbeddingsServer::with_faults(vec![Fault::WrongDimensions(256)]).await;
    let http = http_embedder(&server, &[]);
    let err = http.embed(&texts(2)).await.unwrap_err();
    assert!(
        matches!(
            err,
            EmbedError::Dimensions {
                expected: 384,
                got: 256
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "the embeddings server returned a vector of 256 dimensions, but EMBEDDINGS_DIMENSIONS is 384"
    );
}

#[tokio::test]
async fn a_401_is_not_retried_and_its_message_never_shows_the_key() {
    let server = EmbeddingsServer::with_faults(vec![Fault::Status(
        401,
        format!("Incorrect API key provided: {KEY}. You can find your API key at ..."),
    )])
    .await;
    let http = http_embedder(&server, &[]);
    let err = http.embed(&texts(1)).await.unwrap_err();
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains(KEY), "{shown}");
    assert!(
        err.to_string().starts_with(
            "the embeddings server refused the credentials (HTTP 401; check EMBEDDINGS_API_KEY)"
        ),
        "{err}"
    );
    assert_eq!(server.requests().len(), 1, "a 401 is not retried");
}

#[tokio::test]
async fn dimensions_the_server_does_not_offer_are_its_400() {
    let server = EmbeddingsServer::start().await;
    let http = http_embedder(&server, &[("EMBEDDINGS_DIMENSIONS", "512")]);
    assert_eq!(http.model_id(), "all-MiniLM-L6-v2@512");
    let err = http.embed(&texts(1)).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("HTTP 400: this model has 384 dimensions, not 512"),
        "{err}"
    );
}

#[tokio::test]
async fn an_unreachable_server_is_an_error_without_the_url() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let url = format!("http://127.0.0.1:{port}/v1?token=hidden");
    let env = Env::from_pairs([
        ("EMBEDDINGS", "http"),
        ("EMBEDDINGS_URL", url.as_str()),
        ("EMBEDDINGS_MODEL", "m"),
        ("EMBEDDINGS_DIMENSIONS", "384"),
        ("EMBEDDINGS_MAX_RETRIES", "0"),
    ]);
    let http = Embedder::from_settings(&EmbedSettings::from_env(&env).unwrap()).unwrap();
    let err = http.embed_one("hello").await.unwrap_err();
    let shown = err.to_string();
    assert!(
        shown.starts_with("the embeddings server cannot be reached"),
        "{shown}"
    );
    assert!(!shown.contains("hidden"), "{shown}");
}
