//! The optional reranker (`RERANK`): a tool's rows, fetched deeper than asked, reordered by a
//! model that scores each row's text against the query, then cut to the caller's limit. A
//! reranker that fails never fails the call: the rows keep the order the SQL gave them.
//!
//! Backend: any HTTP service with the common `/rerank` shape (Cohere, Jina, Voyage, Hugging
//! Face text-embeddings-inference), with the embeddings client's retry policy
//! (`parley_core::retry`). It logs no query, no text and no key.

use std::sync::Arc;
use std::time::Duration;

use parley_core::config::{ConfigError, Env, SecretString};
use parley_core::retry::{self, PostError, RetryPolicy};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tokio::time::Instant;

use crate::output::{ToolOutput, render};

/// The largest answer read: 1000 scores as JSON are under 64 KiB; the rest is slack for
/// services that echo the documents back.
const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// `RERANK_*`, read once at start-up; `None` when `RERANK` is `off` (the default).
#[derive(Debug, Clone)]
pub struct RerankSettings {
    /// `RERANK_URL`: the endpoint itself, e.g. `https://api.cohere.com/v2/rerank`.
    pub url: url::Url,
    /// `RERANK_MODEL`: sent as `model` when set.
    pub model: Option<String>,
    /// `RERANK_API_KEY`: sent as `Authorization: Bearer` when set.
    pub api_key: Option<SecretString>,
    /// `RERANK_TIMEOUT_MS`: one request (default 3000).
    pub timeout: Duration,
    /// `RERANK_MAX_RETRIES`: retries after a 429, a 5xx or a transport failure (default 1).
    pub max_retries: u32,
    /// `RERANK_RETRY_BUDGET_MS`: waiting between one request's retries (default 500).
    pub retry_budget: Duration,
}

impl RerankSettings {
    pub fn from_env(env: &Env) -> Result<Option<Self>, ConfigError> {
        match env.get("RERANK").unwrap_or("off") {
            "off" => Ok(None),
            "http" => {
                let url: url::Url = env.required("RERANK_URL")?;
                if !matches!(url.scheme(), "http" | "https") {
                    return Err(ConfigError::new("RERANK_URL", "must be an http(s) URL"));
                }
                Ok(Some(Self {
                    url,
                    model: env.get("RERANK_MODEL").map(str::to_owned),
                    api_key: env.secret("RERANK_API_KEY"),
                    // A search waits for it: a few seconds, not the embeddings' ten.
                    timeout: env.millis(
                        "RERANK_TIMEOUT_MS",
                        Duration::from_secs(3),
                        10..=60_000,
                    )?,
                    max_retries: env.limit("RERANK_MAX_RETRIES", 1, 0..=10)? as u32,
                    retry_budget: env.millis(
                        "RERANK_RETRY_BUDGET_MS",
                        Duration::from_millis(500),
                        0..=60_000,
                    )?,
                }))
            }
            other => Err(ConfigError::new(
                "RERANK",
                format!("must be off or http, got {other:?}"),
            )),
        }
    }
}

/// Why a reranking gave no scores; the rows then keep the SQL's order.
#[derive(Debug, thiserror::Error)]
pub enum RerankError {
    #[error("the reranker's request failed: {0}")]
    Request(#[from] PostError),
    /// Never holds the answer's text: a service may echo the documents back.
    #[error("the reranker's answer is malformed: {0}")]
    BadResponse(String),
}

/// A client of one reranking endpoint; cheap to clone.
#[derive(Clone)]
pub struct Reranker {
    inner: Arc<Inner>,
}

struct Inner {
    settings: RerankSettings,
    policy: RetryPolicy,
    http: reqwest::Client,
}

#[derive(Serialize)]
struct Request<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<&'a str>,
    query: &'a str,
    documents: &'a [String],
    /// Every document's score is wanted (some services return only the best few otherwise).
    top_n: usize,
}

/// `{"results": [...]}` (Cohere, Jina, Voyage) or a bare array (text-embeddings-inference).
#[derive(Deserialize)]
#[serde(untagged)]
enum Answer {
    Results { results: Vec<Scored> },
    Bare(Vec<Scored>),
}

#[derive(Deserialize)]
struct Scored {
    index: usize,
    #[serde(alias = "score")]
    relevance_score: f32,
}

impl Reranker {
    pub fn new(settings: RerankSettings) -> Self {
        let policy = RetryPolicy {
            service: "reranker",
            timeout: settings.timeout,
            max_retries: settings.max_retries,
            retry_budget: settings.retry_budget,
            max_response_bytes: MAX_RESPONSE_BYTES,
            base_backoff: retry::BASE_BACKOFF,
        };
        Self {
            inner: Arc::new(Inner {
                settings,
                policy,
                http: reqwest::Client::new(),
            }),
        }
    }

    /// One score per text, in the order of `texts` (higher is more relevant).
    pub async fn rerank(&self, query: &str, texts: &[String]) -> Result<Vec<f32>, RerankError> {
        let inner = &self.inner;
        let settings = &inner.settings;
        let body = serde_json::to_vec(&Request {
            model: settings.model.as_deref(),
            query,
            documents: texts,
            top_n: texts.len(),
        })
        .map_err(|e| RerankError::BadResponse(format!("the request cannot be written: {e}")))?;
        // Every attempt's timeout and the waits between them, as the embeddings client bounds
        // one batch.
        let attempts = settings.max_retries.saturating_add(1);
        let deadline =
            Instant::now() + settings.timeout.saturating_mul(attempts) + settings.retry_budget;
        let bytes = retry::post_json(
            &inner.http,
            &inner.policy,
            settings.api_key.as_ref(),
            settings.url.clone(),
            body,
            deadline,
        )
        .await?;
        scores(&bytes, texts.len())
    }

    /// `fetched` (the rows of a call run `depth` deep) reordered by their scores for `query`,
    /// the text of each row in its column `text`, then cut to `row_limit` rows and `max_bytes`.
    /// When reranking fails the rows keep their order, and `tool` is named in a warning.
    pub async fn reorder(
        &self,
        tool: &str,
        query: &str,
        text: &str,
        fetched: &ToolOutput,
        row_limit: u64,
        max_bytes: u64,
    ) -> ToolOutput {
        let rows = match rows_of(&fetched.json) {
            Ok(rows) => rows,
            Err(e) => {
                tracing::error!(tool, error = %e, "a tool's result cannot be read back to rerank");
                return fetched.clone();
            }
        };
        let mut order: Vec<usize> = (0..rows.len()).collect();
        // One row has nothing to be ordered against: no request.
        if rows.len() > 1 {
            let texts: Vec<String> = rows.iter().map(|row| text_of(row, text)).collect();
            let started = std::time::Instant::now();
            match self.rerank(query, &texts).await {
                // Stable: ties keep the SQL's order.
                Ok(scores) => order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a])),
                Err(e) => tracing::warn!(
                    tool,
                    rows = rows.len(),
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    error = %e,
                    "reranking failed; the rows keep the search's order"
                ),
            }
        }
        // The call fetched more rows than the limit (see `fetch_depth`), so a result that had
        // more than the limit is marked truncated here as it would have been without reranking.
        render(order.iter().map(|&i| rows[i].get()), row_limit, max_bytes)
    }
}

/// How many rows a call is run for when its rows are reranked: the tool's `depth`, and at
/// least one more than the caller's limit so a cut result is still marked truncated.
pub fn fetch_depth(depth: u64, row_limit: u64) -> u64 {
    depth.max(row_limit.saturating_add(1))
}

/// The scores of an answer by index, each of the `count` texts scored once.
fn scores(bytes: &[u8], count: usize) -> Result<Vec<f32>, RerankError> {
    let answer: Answer = serde_json::from_slice(bytes).map_err(|e| {
        // The position, not the text: an answer may hold the documents.
        RerankError::BadResponse(format!(
            "not a rerank answer (line {}, column {})",
            e.line(),
            e.column()
        ))
    })?;
    let scored = match answer {
        Answer::Results { results } => results,
        Answer::Bare(results) => results,
    };
    if scored.len() != count {
        return Err(RerankError::BadResponse(format!(
            "{} scores came back for {count} texts",
            scored.len()
        )));
    }
    let mut scores: Vec<Option<f32>> = vec![None; count];
    for s in scored {
        if !s.relevance_score.is_finite() {
            return Err(RerankError::BadResponse(format!(
                "the score of index {} is not a number",
                s.index
            )));
        }
        let slot = scores.get_mut(s.index).ok_or_else(|| {
            RerankError::BadResponse(format!("index {} for {count} texts", s.index))
        })?;
        if slot.replace(s.relevance_score).is_some() {
            return Err(RerankError::BadResponse(format!(
                "index {} came back twice",
                s.index
            )));
        }
    }
    // As many scores as slots, none twice: every slot is filled.
    Ok(scores.into_iter().flatten().collect())
}

/// The rows of a rendered result, each exactly as Postgres wrote it.
fn rows_of(json: &str) -> Result<Vec<&RawValue>, serde_json::Error> {
    #[derive(Deserialize)]
    struct Rows<'a> {
        #[serde(borrow)]
        rows: Vec<&'a RawValue>,
    }
    serde_json::from_str::<Rows<'_>>(json).map(|r| r.rows)
}

/// A row's text in `column`: a string as is, another value as JSON, none as empty.
fn text_of(row: &RawValue, column: &str) -> String {
    let value: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(row.get()).unwrap_or_default();
    match value.get(column) {
        Some(serde_json::Value::String(s)) => s.clone(),
        None | Some(serde_json::Value::Null) => String::new(),
        Some(other) => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Env {
        Env::from_pairs(pairs.iter().copied())
    }

    #[test]
    fn reranking_is_off_unless_asked_for() {
        assert!(RerankSettings::from_env(&env(&[])).unwrap().is_none());
        assert!(
            RerankSettings::from_env(&env(&[("RERANK", "off"), ("RERANK_URL", "::")]))
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn http_reads_its_endpoint_model_key_and_retry_policy() {
        let s = RerankSettings::from_env(&env(&[
            ("RERANK", "http"),
            ("RERANK_URL", "https://api.example.com/v2/rerank"),
            ("RERANK_MODEL", "rerank-v3.5"),
            ("RERANK_API_KEY", "sk-secret"),
            ("RERANK_TIMEOUT_MS", "750"),
            ("RERANK_MAX_RETRIES", "0"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(s.url.as_str(), "https://api.example.com/v2/rerank");
        assert_eq!(s.model.as_deref(), Some("rerank-v3.5"));
        assert_eq!(s.timeout, Duration::from_millis(750));
        assert_eq!(s.max_retries, 0);
        assert_eq!(s.retry_budget, Duration::from_millis(500));
        assert!(
            !format!("{s:?}").contains("sk-secret"),
            "the key is redacted"
        );
    }

    #[test]
    fn a_bad_setting_is_named() {
        for (pairs, var) in [
            (vec![("RERANK", "on")], "RERANK"),
            (vec![("RERANK", "http")], "RERANK_URL"),
            (
                vec![("RERANK", "http"), ("RERANK_URL", "ftp://x/rerank")],
                "RERANK_URL",
            ),
            (
                vec![
                    ("RERANK", "http"),
                    ("RERANK_URL", "http://x/rerank"),
                    ("RERANK_TIMEOUT_MS", "soon"),
                ],
                "RERANK_TIMEOUT_MS",
            ),
            (
                vec![
                    ("RERANK", "http"),
                    ("RERANK_URL", "http://x/rerank"),
                    ("RERANK_MAX_RETRIES", "99"),
                ],
                "RERANK_MAX_RETRIES",
            ),
        ] {
            let err = RerankSettings::from_env(&env(&pairs)).unwrap_err();
            assert_eq!(err.var, var, "{pairs:?}: {err}");
        }
    }

    #[test]
    fn the_request_has_the_common_rerank_shape() {
        let texts = ["a".to_owned(), "b".to_owned()];
        let body = serde_json::to_value(Request {
            model: Some("m"),
            query: "q",
            documents: &texts,
            top_n: 2,
        })
        .unwrap();
        assert_eq!(
            body,
            serde_json::json!({"model": "m", "query": "q", "documents": ["a", "b"], "top_n": 2})
        );
        let body = serde_json::to_value(Request {
            model: None,
            query: "q",
            documents: &texts,
            top_n: 2,
        })
        .unwrap();
        assert!(body.get("model").is_none(), "{body}");
    }

    #[test]
    fn scores_come_back_in_input_order_from_either_answer_shape() {
        let cohere = br#"{"id":"x","results":[{"index":2,"relevance_score":0.9},
            {"index":0,"relevance_score":0.5},{"index":1,"relevance_score":0.1}]}"#;
        assert_eq!(scores(cohere, 3).unwrap(), vec![0.5, 0.1, 0.9]);
        let tei = br#"[{"index":1,"score":3.5},{"index":0,"score":-2.0}]"#;
        assert_eq!(scores(tei, 2).unwrap(), vec![-2.0, 3.5]);
    }

    #[test]
    fn a_wrong_count_a_stray_or_repeated_index_or_another_shape_is_malformed() {
        for (answer, count) in [
            (&br#"{"results":[{"index":0,"relevance_score":1}]}"#[..], 2),
            (
                br#"{"results":[{"index":0,"relevance_score":1},{"index":0,"relevance_score":2}]}"#,
                2,
            ),
            (
                br#"{"results":[{"index":0,"relevance_score":1},{"index":7,"relevance_score":2}]}"#,
                2,
            ),
            (br#"{"data":[0.1,0.2]}"#, 2),
            (b"<html>secret document text</html>", 2),
        ] {
            let err = scores(answer, count).unwrap_err();
            assert!(matches!(err, RerankError::BadResponse(_)), "{err:?}");
            assert!(!err.to_string().contains("secret"), "{err}");
        }
    }

    #[test]
    fn a_rows_text_is_its_column_as_a_string() {
        let rows = rows_of(r#"{"rows":[{"s":"x y","n":2},{"s":null}],"row_count":2}"#).unwrap();
        assert_eq!(text_of(rows[0], "s"), "x y");
        assert_eq!(text_of(rows[0], "n"), "2");
        assert_eq!(text_of(rows[1], "s"), "");
        assert_eq!(fetch_depth(20, 8), 20);
        assert_eq!(fetch_depth(4, 8), 9, "one past the caller's limit");
    }
}
