//! The built-in embedding model for tests: where its files are ([`model_dir`]), one loaded
//! copy per test binary ([`embedder`]), and an OpenAI-compatible embeddings server backed by
//! it ([`EmbeddingsServer`]). A missing model fails the test with what to run: tests that embed
//! are never silently skipped.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use parley_embed::{EmbedSettings, Embedder};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

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

/// The cosine of the angle between two vectors: 1 when they point the same way.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (norm(a) * norm(b))
}

/// What the [`EmbeddingsServer`] does instead of answering one request, in order.
#[derive(Debug, Clone)]
pub enum Fault {
    /// This status with an OpenAI-shaped error body; a 429 also says `Retry-After: 0`.
    Status(u16, String),
    /// A proper answer but with every vector cut (or padded with zeros) to this many numbers.
    WrongDimensions(usize),
}

#[derive(Default)]
struct Record {
    faults: VecDeque<Fault>,
    requests: Vec<Value>,
    authorizations: Vec<Option<String>>,
}

type Shared = Arc<Mutex<Record>>;

/// A local OpenAI-compatible embeddings server, `POST /v1/embeddings`, answering with the
/// built-in model's real vectors (so an HTTP embedder pointed at it must agree with the
/// built-in one), after the planned [`Fault`]s. It lists the vectors in reverse order, so a
/// client that ignores `index` is caught. `dimensions`, when sent, must be 384.
pub struct EmbeddingsServer {
    addr: SocketAddr,
    record: Shared,
    task: JoinHandle<()>,
}

impl EmbeddingsServer {
    /// A server that answers every request.
    pub async fn start() -> EmbeddingsServer {
        Self::with_faults(Vec::new()).await
    }

    /// A server whose first requests get `faults`, one each, in order; the rest are answered.
    pub async fn with_faults(faults: Vec<Fault>) -> EmbeddingsServer {
        // Loaded before serving, so the first request is not slowed by it.
        let embedder = embedder();
        let record: Shared = Arc::new(Mutex::new(Record {
            faults: faults.into(),
            ..Record::default()
        }));
        let router = Router::new()
            .route("/v1/embeddings", post(answer))
            .with_state((record.clone(), embedder));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the embeddings server to 127.0.0.1:0");
        let addr = listener
            .local_addr()
            .expect("reading the embeddings server's address");
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, router).await {
                eprintln!("embeddings server stopped: {e}");
            }
        });
        EmbeddingsServer { addr, record, task }
    }

    /// The base URL to configure as `EMBEDDINGS_URL`: `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Request bodies received, in order (a body that is not JSON is recorded as a string).
    pub fn requests(&self) -> Vec<Value> {
        lock(&self.record).requests.clone()
    }

    /// The `Authorization` header of each request, in order.
    pub fn authorizations(&self) -> Vec<Option<String>> {
        lock(&self.record).authorizations.clone()
    }
}

impl Drop for EmbeddingsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A panic in a test thread holding the lock must not hide the record from the others.
fn lock(record: &Shared) -> MutexGuard<'_, Record> {
    record
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn error(status: StatusCode, message: &str) -> Response {
    let body = json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": null}});
    (status, Json(body)).into_response()
}

async fn answer(
    State((record, embedder)): State<(Shared, Embedder)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request: Value = serde_json::from_slice(&body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
    let fault = {
        let mut record = lock(&record);
        record.requests.push(request.clone());
        record.authorizations.push(
            headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
        );
        record.faults.pop_front()
    };
    let mut dims = embedder.dims();
    match fault {
        Some(Fault::Status(status, message)) => {
            let status = StatusCode::from_u16(status).expect("a valid status code");
            let mut response = error(status, &message);
            if status == StatusCode::TOO_MANY_REQUESTS {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("0"));
            }
            return response;
        }
        Some(Fault::WrongDimensions(wrong)) => dims = wrong,
        None => {}
    }
    let Some(texts) = request["input"].as_array().and_then(|input| {
        input
            .iter()
            .map(|text| text.as_str().map(str::to_owned))
            .collect::<Option<Vec<String>>>()
    }) else {
        return error(StatusCode::BAD_REQUEST, "input must be an array of strings");
    };
    if let Some(asked) = request.get("dimensions").and_then(Value::as_u64)
        && asked != embedder.dims() as u64
    {
        return error(
            StatusCode::BAD_REQUEST,
            &format!("this model has {} dimensions, not {asked}", embedder.dims()),
        );
    }
    let vectors = match embedder.embed(&texts).await {
        Ok(vectors) => vectors,
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    };
    let data: Vec<Value> = vectors
        .into_iter()
        .enumerate()
        .rev()
        .map(|(index, mut vector)| {
            vector.resize(dims, 0.0);
            json!({"object": "embedding", "index": index, "embedding": vector})
        })
        .collect();
    let model = request["model"].clone();
    Json(json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": 0, "total_tokens": 0},
    }))
    .into_response()
}
