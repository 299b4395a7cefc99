//! The optional reranker (`RERANK`): a tool's rows, fetched deeper than asked, reordered by a
//! model that scores each row's text against the query, then cut to the caller's limit. A
//! reranker that fails never fails the call: the rows keep the order the SQL gave them.
//!
//! Backends: any HTTP service with the common `/rerank` shape (Cohere, Jina, Voyage, Hugging
//! Face text-embeddings-inference), with the embeddings client's retry policy
//! (`parley_core::retry`); or Amazon Bedrock's rerank models through the AWS SDK (its
//! `Rerank` operation), with the same timeout and number of retries. It logs no query, no text
//! and no key.

use std::sync::Arc;
use std::time::Duration;

use parley_core::config::{ConfigError, Env, SecretString};
use parley_core::retry::{self, PostError, RetryDefaults, RetryPolicy, RetrySettings};
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
    pub backend: Backend,
    /// `RERANK_MODEL`: sent as `model` when set (`http`); the model's ARN (`bedrock`).
    pub model: Option<String>,
    /// `RERANK_TIMEOUT_MS`: one request (default 3000); `RERANK_MAX_RETRIES`: retries after a
    /// 429, a 5xx or a transport failure (default 1); `RERANK_RETRY_BUDGET_MS`: waiting between
    /// one request's retries (default 500; `http`).
    pub retry: RetrySettings,
}

/// `RERANK`: `http` or `bedrock`.
#[derive(Debug, Clone)]
pub enum Backend {
    Http {
        /// `RERANK_URL`: the endpoint itself, e.g. `https://api.cohere.com/v2/rerank`.
        url: url::Url,
        /// `RERANK_API_KEY`: sent as `Authorization: Bearer` when set.
        api_key: Option<SecretString>,
    },
    /// Bedrock's `Rerank` in the region of `AWS_REGION`, the endpoint overridable with
    /// `AWS_ENDPOINT_URL_BEDROCK_AGENT_RUNTIME`.
    Bedrock,
}

/// `RERANK_TIMEOUT_MS`, `RERANK_MAX_RETRIES` and `RERANK_RETRY_BUDGET_MS` before a deployment
/// sets them: a search waits for the reranker, so a few seconds, not the embeddings' ten.
const RETRY_DEFAULTS: RetryDefaults = RetryDefaults {
    timeout: Duration::from_secs(3),
    timeout_ms: 10..=60_000,
    max_retries: 1,
    retry_budget: Duration::from_millis(500),
    retry_budget_ms: 0..=60_000,
};

impl RerankSettings {
    pub fn from_env(env: &Env) -> Result<Option<Self>, ConfigError> {
        let backend = match env.get("RERANK").unwrap_or("off") {
            "off" => return Ok(None),
            "http" => {
                let url: url::Url = env.required("RERANK_URL")?;
                if !matches!(url.scheme(), "http" | "https") {
                    return Err(ConfigError::new("RERANK_URL", "must be an http(s) URL"));
                }
                Backend::Http {
                    url,
                    api_key: env.secret("RERANK_API_KEY"),
                }
            }
            "bedrock" => {
                if !env
                    .get("RERANK_MODEL")
                    .is_some_and(|m| m.starts_with("arn:"))
                {
                    return Err(ConfigError::new(
                        "RERANK_MODEL",
                        "must be a rerank model's ARN with RERANK=bedrock, e.g. \
                         arn:aws:bedrock:us-west-2::foundation-model/amazon.rerank-v1:0",
                    ));
                }
                Backend::Bedrock
            }
            other => {
                return Err(ConfigError::new(
                    "RERANK",
                    format!("must be off, http or bedrock, got {other:?}"),
                ));
            }
        };
        Ok(Some(Self {
            backend,
            model: env.get("RERANK_MODEL").map(str::to_owned),
            retry: RetrySettings::from_env(env, "RERANK", RETRY_DEFAULTS)?,
        }))
    }
}

/// Why a reranking gave no scores; the rows then keep the SQL's order.
#[derive(Debug, thiserror::Error)]
pub enum RerankError {
    #[error("the reranker's request failed: {0}")]
    Request(#[from] PostError),
    /// Bedrock's error, as the SDK describes it (no request data).
    #[error("Bedrock's Rerank failed: {0}")]
    Bedrock(String),
    /// Never holds the answer's text: a service may echo the documents back.
    #[error("the reranker's answer is malformed: {0}")]
    BadResponse(String),
}

/// A client of one reranking endpoint; cheap to clone.
#[derive(Clone)]
pub struct Reranker {
    inner: Arc<Client>,
}

// One per instance, behind an `Arc`: the size of a variant costs nothing.
#[allow(clippy::large_enum_variant)]
enum Client {
    Http {
        settings: RerankSettings,
        url: url::Url,
        api_key: Option<SecretString>,
        policy: RetryPolicy,
        http: reqwest::Client,
    },
    Bedrock {
        model_arn: String,
        client: aws_sdk_bedrockagentruntime::Client,
    },
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
    /// The client `settings` describe; `env` gives Bedrock's region, endpoint and credentials.
    pub async fn new(settings: RerankSettings, env: &Env) -> Self {
        let client = match settings.backend.clone() {
            Backend::Http { url, api_key } => Client::Http {
                policy: settings.retry.policy("reranker", MAX_RESPONSE_BYTES),
                url,
                api_key,
                settings,
                http: reqwest::Client::new(),
            },
            Backend::Bedrock => {
                use aws_sdk_bedrockagentruntime::config::retry::RetryConfig;
                use aws_sdk_bedrockagentruntime::config::timeout::TimeoutConfig;
                let shared =
                    parley_core::aws::sdk_config(env, "AWS_ENDPOINT_URL_BEDROCK_AGENT_RUNTIME")
                        .await;
                // The SDK's own retries (throttling, 5xx, timeouts) with the http backend's
                // numbers: one attempt's timeout, as many retries.
                let config = aws_sdk_bedrockagentruntime::config::Builder::from(&shared)
                    .timeout_config(
                        TimeoutConfig::builder()
                            .operation_attempt_timeout(settings.retry.timeout)
                            .build(),
                    )
                    .retry_config(
                        RetryConfig::standard()
                            .with_max_attempts(settings.retry.max_retries.saturating_add(1)),
                    )
                    .build();
                Client::Bedrock {
                    model_arn: settings.model.clone().unwrap_or_default(),
                    client: aws_sdk_bedrockagentruntime::Client::from_conf(config),
                }
            }
        };
        Self {
            inner: Arc::new(client),
        }
    }

    /// One score per text, in the order of `texts` (higher is more relevant).
    pub async fn rerank(&self, query: &str, texts: &[String]) -> Result<Vec<f32>, RerankError> {
        match &*self.inner {
            Client::Http {
                settings,
                url,
                api_key,
                policy,
                http,
            } => {
                let body = serde_json::to_vec(&Request {
                    model: settings.model.as_deref(),
                    query,
                    documents: texts,
                    top_n: texts.len(),
                })
                .map_err(|e| {
                    RerankError::BadResponse(format!("the request cannot be written: {e}"))
                })?;
                // Every attempt's timeout and the waits between them, as the embeddings
                // client bounds one batch.
                let deadline = Instant::now() + settings.retry.worst_case();
                let key = api_key.as_ref();
                let bytes =
                    retry::post_json(http, policy, key, url.clone(), body, deadline, &mut 0)
                        .await?;
                scores(&bytes, texts.len())
            }
            Client::Bedrock { model_arn, client } => {
                let (queries, sources, configuration) = bedrock_request(model_arn, query, texts)?;
                let answer = client
                    .rerank()
                    .set_queries(Some(queries))
                    .set_sources(Some(sources))
                    .reranking_configuration(configuration)
                    .send()
                    .await
                    .map_err(|e| {
                        RerankError::Bedrock(
                            aws_sdk_bedrockagentruntime::error::DisplayErrorContext(e).to_string(),
                        )
                    })?;
                let scored = answer
                    .results
                    .iter()
                    .map(|r| {
                        (
                            usize::try_from(r.index).unwrap_or(usize::MAX),
                            r.relevance_score,
                        )
                    })
                    .collect();
                by_index(scored, texts.len())
            }
        }
    }

    /// The indexes of `texts`, best first for `query`, as a call orders its rows: stable (ties
    /// keep the SQL's order), and in the SQL's order with why when reranking fails. One text
    /// has nothing to be ordered against: no request.
    pub async fn order(&self, query: &str, texts: &[String]) -> (Vec<usize>, Option<RerankError>) {
        let mut order: Vec<usize> = (0..texts.len()).collect();
        if texts.len() < 2 {
            return (order, None);
        }
        match self.rerank(query, texts).await {
            Ok(scores) => {
                order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
                (order, None)
            }
            Err(e) => (order, Some(e)),
        }
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
        let texts: Vec<String> = rows.iter().map(|row| text_of(row, text)).collect();
        let started = std::time::Instant::now();
        let (order, failed) = self.order(query, &texts).await;
        if let Some(e) = failed {
            tracing::warn!(
                tool,
                rows = rows.len(),
                elapsed_ms = started.elapsed().as_millis() as u64,
                error = %e,
                "reranking failed; the rows keep the search's order"
            );
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
    by_index(
        scored
            .into_iter()
            .map(|s| (s.index, s.relevance_score))
            .collect(),
        count,
    )
}

/// `(index, score)` pairs as one score per text, each of the `count` texts scored once.
fn by_index(scored: Vec<(usize, f32)>, count: usize) -> Result<Vec<f32>, RerankError> {
    if scored.len() != count {
        return Err(RerankError::BadResponse(format!(
            "{} scores came back for {count} texts",
            scored.len()
        )));
    }
    let mut scores: Vec<Option<f32>> = vec![None; count];
    for (index, score) in scored {
        if !score.is_finite() {
            return Err(RerankError::BadResponse(format!(
                "the score of index {index} is not a number"
            )));
        }
        let slot = scores
            .get_mut(index)
            .ok_or_else(|| RerankError::BadResponse(format!("index {index} for {count} texts")))?;
        if slot.replace(score).is_some() {
            return Err(RerankError::BadResponse(format!(
                "index {index} came back twice"
            )));
        }
    }
    // As many scores as slots, none twice: every slot is filled.
    Ok(scores.into_iter().flatten().collect())
}

/// Bedrock's `Rerank` input: the query as text, each text an inline text document, every one
/// scored (`numberOfResults`) by the model `model_arn`.
fn bedrock_request(
    model_arn: &str,
    query: &str,
    texts: &[String],
) -> Result<
    (
        Vec<aws_sdk_bedrockagentruntime::types::RerankQuery>,
        Vec<aws_sdk_bedrockagentruntime::types::RerankSource>,
        aws_sdk_bedrockagentruntime::types::RerankingConfiguration,
    ),
    RerankError,
> {
    use aws_sdk_bedrockagentruntime::types::{
        BedrockRerankingConfiguration, BedrockRerankingModelConfiguration, RerankDocument,
        RerankDocumentType, RerankQuery, RerankQueryContentType, RerankSource, RerankSourceType,
        RerankTextDocument, RerankingConfiguration, RerankingConfigurationType,
    };
    // The builders fail only on a missing required field, all of which are set here.
    let built = |e: aws_sdk_bedrockagentruntime::error::BuildError| {
        RerankError::BadResponse(format!("the request cannot be built: {e}"))
    };
    let text = |t: &str| RerankTextDocument::builder().text(t).build();
    let queries = vec![
        RerankQuery::builder()
            .r#type(RerankQueryContentType::Text)
            .text_query(text(query))
            .build()
            .map_err(built)?,
    ];
    let sources = texts
        .iter()
        .map(|t| {
            let document = RerankDocument::builder()
                .r#type(RerankDocumentType::Text)
                .text_document(text(t))
                .build()
                .map_err(built)?;
            RerankSource::builder()
                .r#type(RerankSourceType::Inline)
                .inline_document_source(document)
                .build()
                .map_err(built)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let model = BedrockRerankingModelConfiguration::builder()
        .model_arn(model_arn)
        .build()
        .map_err(built)?;
    let configuration = RerankingConfiguration::builder()
        .r#type(RerankingConfigurationType::BedrockRerankingModel)
        .bedrock_reranking_configuration(
            BedrockRerankingConfiguration::builder()
                .number_of_results(i32::try_from(texts.len()).unwrap_or(i32::MAX))
                .model_configuration(model)
                .build(),
        )
        .build()
        .map_err(built)?;
    Ok((queries, sources, configuration))
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

/// A row's text in `column` (see [`text_in`]).
fn text_of(row: &RawValue, column: &str) -> String {
    let value: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(row.get()).unwrap_or_default();
    text_in(&value, column)
}

/// The text a row is reranked by, its `column`: a string as is, another value as JSON, none
/// as empty.
pub fn text_in(row: &serde_json::Map<String, serde_json::Value>, column: &str) -> String {
    match row.get(column) {
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
        let Backend::Http { url, api_key } = &s.backend else {
            panic!("not http: {s:?}");
        };
        assert_eq!(url.as_str(), "https://api.example.com/v2/rerank");
        assert!(api_key.is_some());
        assert_eq!(s.model.as_deref(), Some("rerank-v3.5"));
        assert_eq!(s.retry.timeout, Duration::from_millis(750));
        assert_eq!(s.retry.max_retries, 0);
        assert_eq!(s.retry.retry_budget, Duration::from_millis(500));
        assert!(
            !format!("{s:?}").contains("sk-secret"),
            "the key is redacted"
        );
    }

    #[test]
    fn a_bad_setting_is_named() {
        for (pairs, var) in [
            (vec![("RERANK", "on")], "RERANK"),
            (vec![("RERANK", "bedrock")], "RERANK_MODEL"),
            (
                vec![
                    ("RERANK", "bedrock"),
                    ("RERANK_MODEL", "amazon.rerank-v1:0"),
                ],
                "RERANK_MODEL",
            ),
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
    fn bedrock_takes_the_model_arn_and_the_same_timeout_and_retries() {
        let arn = "arn:aws:bedrock:us-west-2::foundation-model/amazon.rerank-v1:0";
        let s = RerankSettings::from_env(&env(&[
            ("RERANK", "bedrock"),
            ("RERANK_MODEL", arn),
            ("RERANK_TIMEOUT_MS", "800"),
            ("RERANK_MAX_RETRIES", "2"),
        ]))
        .unwrap()
        .unwrap();
        assert!(matches!(s.backend, Backend::Bedrock), "{s:?}");
        assert_eq!(s.model.as_deref(), Some(arn));
        assert_eq!(
            (s.retry.timeout, s.retry.max_retries),
            (Duration::from_millis(800), 2)
        );
    }

    #[test]
    fn the_bedrock_request_sends_the_query_and_every_text_inline_to_the_model() {
        use aws_sdk_bedrockagentruntime::types::{
            RerankDocumentType, RerankQueryContentType, RerankSourceType,
            RerankingConfigurationType,
        };
        let arn = "arn:aws:bedrock:us-west-2::foundation-model/amazon.rerank-v1:0";
        let texts = ["first passage".to_owned(), "second passage".to_owned()];
        let (queries, sources, configuration) =
            bedrock_request(arn, "what is vacuum", &texts).unwrap();
        assert_eq!(queries.len(), 1);
        assert_eq!(queries[0].r#type(), &RerankQueryContentType::Text);
        assert_eq!(
            queries[0].text_query().and_then(|t| t.text()),
            Some("what is vacuum")
        );
        let sent: Vec<&str> = sources
            .iter()
            .map(|s| {
                assert_eq!(s.r#type(), &RerankSourceType::Inline);
                let document = s.inline_document_source().unwrap();
                assert_eq!(document.r#type(), &RerankDocumentType::Text);
                document.text_document().and_then(|t| t.text()).unwrap()
            })
            .collect();
        assert_eq!(sent, ["first passage", "second passage"]);
        assert_eq!(
            configuration.r#type(),
            &RerankingConfigurationType::BedrockRerankingModel
        );
        let bedrock = configuration.bedrock_reranking_configuration().unwrap();
        assert_eq!(bedrock.number_of_results(), Some(2), "every text scored");
        assert_eq!(bedrock.model_configuration().unwrap().model_arn(), arn);
    }

    #[test]
    fn bedrock_scores_are_put_back_by_index_and_a_short_answer_is_malformed() {
        assert_eq!(
            by_index(vec![(1, 0.9), (0, 0.2)], 2).unwrap(),
            vec![0.2, 0.9]
        );
        // A negative index from the SDK's i32 becomes usize::MAX: out of range.
        for scored in [vec![(0, 0.9)], vec![(0, 0.9), (usize::MAX, 0.1)]] {
            let err = by_index(scored, 2).unwrap_err();
            assert!(matches!(err, RerankError::BadResponse(_)), "{err:?}");
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
