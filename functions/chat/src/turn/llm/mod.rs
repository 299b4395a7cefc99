//! The LLM, spoken to over HTTP in one of two OpenAI-compatible dialects: the Responses API
//! (`function_call` / `function_call_output`, `store: false`) or Chat Completions
//! (`tool_calls` / `role: tool`). The rest of the chat function sees only the neutral types here.
//! Each model request, its retries included, leaves one metrics document (docs/metrics.md).

mod chat_completions;
#[cfg(test)]
mod fixtures;
mod responses;
mod retry;
mod sse;
mod streamed;

use std::time::Duration;

use parley_core::config::{ConfigError, Env, ExposeSecret, SecretString};
use parley_core::metrics::{Document, Metrics};
use parley_core::retry::{RetryDefaults, RetryPolicy, RetrySettings, post_json, post_stream};
use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;
use tracing::Instrument;

use crate::nul;

/// Which wire dialect the LLM server speaks (`LLM_API`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LlmApi {
    Responses,
    ChatCompletions,
}

#[derive(Debug, Clone)]
pub struct LlmConfig {
    /// `LLM_API`: `responses` (default) or `chat-completions`.
    pub api: LlmApi,
    /// `LLM_BASE_URL`: default `https://api.openai.com/v1`; `/responses` or `/chat/completions`
    /// is appended.
    pub base_url: url::Url,
    /// `LLM_MODEL`: default `gpt-4.1-mini`.
    pub model: String,
    /// `LLM_API_KEY`, else `OPENAI_API_KEY`; sent as `Authorization: Bearer`. Optional because
    /// local servers (Ollama, vLLM) often need none.
    pub api_key: Option<SecretString>,
    /// `LLM_TIMEOUT_MS`: one HTTP request to the LLM, start to end of body (default 60000); a
    /// streamed answer has it as the time to its first bytes and as the longest silence after.
    /// `LLM_MAX_RETRIES`: retries after a 429, a 5xx or a transport failure (default 3).
    /// `LLM_RETRY_BUDGET_MS`: total time one LLM call may spend waiting between retries
    /// (default 20000); a `Retry-After` longer than what is left ends the retries.
    pub retry: RetrySettings,
    /// `LLM_MAX_OUTPUT_TOKENS`: optional cap sent with each request.
    pub max_output_tokens: Option<u32>,
    /// `LLM_TEMPERATURE` (0-2) and `LLM_TOP_P` (0-1): sent only when set, so the provider's
    /// default applies otherwise (OpenAI's reasoning models refuse any value but their own).
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    /// `LLM_MAX_RESPONSE_BYTES`: the largest response body read (default 4 MiB), a stream's
    /// events all counted; a larger one is a failed turn, not a full instance.
    pub max_response_bytes: usize,
}

/// The LLM's `LLM_TIMEOUT_MS`, `LLM_MAX_RETRIES` and `LLM_RETRY_BUDGET_MS` before a
/// deployment sets them: a model may think for a minute.
const RETRY_DEFAULTS: RetryDefaults = RetryDefaults {
    timeout: Duration::from_secs(60),
    timeout_ms: 100..=900_000,
    max_retries: 3,
    retry_budget: Duration::from_secs(20),
    retry_budget_ms: 0..=300_000,
};

impl LlmConfig {
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let api = match env.get("LLM_API").map(str::to_ascii_lowercase).as_deref() {
            None | Some("responses") => LlmApi::Responses,
            Some("chat-completions" | "chat_completions" | "chat") => LlmApi::ChatCompletions,
            Some(_) => {
                return Err(ConfigError::new(
                    "LLM_API",
                    "must be responses or chat-completions",
                ));
            }
        };
        let raw_base = env
            .get("LLM_BASE_URL")
            .unwrap_or("https://api.openai.com/v1");
        let base_url = parley_core::config::api_base_url("LLM_BASE_URL", raw_base)?;
        Ok(Self {
            api,
            base_url,
            model: env.get("LLM_MODEL").unwrap_or("gpt-4.1-mini").to_owned(),
            api_key: env
                .secret("LLM_API_KEY")
                .or_else(|| env.secret("OPENAI_API_KEY")),
            retry: RetrySettings::from_env(env, "LLM", RETRY_DEFAULTS)?,
            max_output_tokens: env
                .optional::<u32>("LLM_MAX_OUTPUT_TOKENS")?
                .filter(|n| *n > 0),
            temperature: fraction(env, "LLM_TEMPERATURE", 2.0)?,
            top_p: fraction(env, "LLM_TOP_P", 1.0)?,
            max_response_bytes: env.limit(
                "LLM_MAX_RESPONSE_BYTES",
                4 * 1024 * 1024,
                1024..=256 * 1024 * 1024,
            )? as usize,
        })
    }

    /// Whether the server is OpenAI's own, which knows its newest names for things that
    /// compatible servers know by older ones.
    fn is_openai(&self) -> bool {
        self.base_url.host_str() == Some("api.openai.com")
    }

    /// OpenAI's API refuses every request without a key, so leaving it unset there is a
    /// mistake worth a line at start-up; local servers often need none.
    fn key_missing_for_openai(&self) -> bool {
        self.api_key.is_none() && self.is_openai()
    }

    /// Why no model can be asked, and the two ways to configure one; `None` when one can.
    /// A turn answers it at once (nothing is sent or stored) and the page shows it on load.
    pub fn setup_problem(&self) -> Option<&'static str> {
        self.key_missing_for_openai().then_some(NO_MODEL)
    }
}

/// What [`LlmConfig::setup_problem`] says.
pub const NO_MODEL: &str = "No language model is configured: LLM_API_KEY is not set and \
LLM_BASE_URL is OpenAI's, which refuses every request without a key. Set LLM_API_KEY (or \
OPENAI_API_KEY) to an OpenAI key, or LLM_BASE_URL to a local OpenAI-compatible server (Ollama, \
vLLM, llama.cpp, ...) in the chat function's settings, then restart it. To try the chat locally \
without a model, `PARLEY_LLM=stub scripts/dev` runs it with a scripted stand-in.";

/// An optional number from 0 to `max`, as sampling settings are.
fn fraction(env: &Env, var: &str, max: f64) -> Result<Option<f64>, ConfigError> {
    let value = env.optional::<f64>(var)?;
    match value {
        // `contains` is false for NaN too.
        Some(v) if !(0.0..=max).contains(&v) => Err(ConfigError::new(
            var,
            format!("must be a number from 0 to {max}, got {v}"),
        )),
        _ => Ok(value),
    }
}

/// One element of the conversation as the model sees it, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    User(String),
    Assistant(String),
    /// A tool call the model made.
    Call(ToolCall),
    /// The output given back for the call with this id.
    Output {
        call_id: String,
        output: String,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolCall {
    pub call_id: String,
    pub name: String,
    /// The arguments exactly as the model wrote them: JSON text that may be invalid.
    pub arguments: String,
}

/// A tool as offered to the model.
#[derive(Debug, Clone)]
pub struct ToolDef {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object, serialized once when the tool is listed: every
    /// request carries it, and copying text is far cheaper than re-serializing a tree.
    pub parameters: Box<RawValue>,
}

impl ToolDef {
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: &Value,
    ) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            parameters: serde_json::value::to_raw_value(parameters)
                .expect("a JSON value always serializes"),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub total_tokens: u64,
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Self) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.total_tokens += other.total_tokens;
    }
}

/// Token counts as either dialect names them; absent counts are zero, an absent total is the
/// sum (some local servers report no usage at all).
#[derive(Debug, Default, serde::Deserialize)]
struct WireUsage {
    #[serde(alias = "prompt_tokens")]
    input_tokens: Option<u64>,
    #[serde(alias = "completion_tokens")]
    output_tokens: Option<u64>,
    total_tokens: Option<u64>,
}

impl From<WireUsage> for Usage {
    fn from(wire: WireUsage) -> Self {
        let input_tokens = wire.input_tokens.unwrap_or(0);
        let output_tokens = wire.output_tokens.unwrap_or(0);
        Usage {
            input_tokens,
            output_tokens,
            total_tokens: wire.total_tokens.unwrap_or(input_tokens + output_tokens),
        }
    }
}

/// A 2xx body as the dialect's wire type, straight from the bytes: JSON of another shape is a
/// bad response naming what did not fit; text that is not JSON is quoted (with `key` blanked).
fn decode<T: serde::de::DeserializeOwned>(body: &[u8], key: Option<&str>) -> Result<T, LlmError> {
    serde_json::from_slice(body).map_err(|e| {
        if e.is_data() {
            LlmError::BadResponse(format!("the response is not in the expected shape: {e}"))
        } else {
            retry::not_json(body, &e, key)
        }
    })
}

fn non_empty(text: Option<&str>) -> Option<&str> {
    text.filter(|t| !t.is_empty())
}

/// The arguments as the model wrote them. Some compatible servers send an object rather than
/// JSON text, and some leave them out for a call without arguments.
fn arguments(raw: Option<&Value>) -> String {
    match raw {
        Some(Value::String(text)) => text.clone(),
        None | Some(Value::Null) => "{}".to_owned(),
        Some(other) => other.to_string(),
    }
}

/// Gives every call a usable id: some local servers send none, or the same one for every call
/// of a response, and outputs are matched to calls by id. Generated ids are random so they do
/// not repeat across the responses of a conversation either.
fn assign_missing_ids(calls: &mut [ToolCall]) {
    let mut seen = std::collections::HashSet::new();
    for call in calls {
        if call.call_id.is_empty() || !seen.insert(call.call_id.clone()) {
            call.call_id = format!("call_{}", uuid::Uuid::new_v4().simple());
            seen.insert(call.call_id.clone());
        }
    }
}

/// What the model said in one response: text, tool calls, or both.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reply {
    pub text: Option<String>,
    pub calls: Vec<ToolCall>,
    pub usage: Usage,
}

impl Reply {
    /// Every string of the reply cleaned of NUL ([`crate::nul`]: text, call ids, tool names,
    /// arguments), before the turn uses any of it: what is stored, replayed and answered is
    /// then the same text.
    pub fn clean_nul(&mut self) {
        self.text = self.text.take().map(nul::clean);
        for call in &mut self.calls {
            for s in [&mut call.call_id, &mut call.name, &mut call.arguments] {
                *s = nul::clean(std::mem::take(s));
            }
        }
    }
}

/// One request to the model.
#[derive(Debug, Clone, Copy)]
pub struct Prompt<'a> {
    pub instructions: &'a str,
    pub items: &'a [Item],
    pub tools: &'a [ToolDef],
}

#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// Still rate limited (429) after the retries allowed.
    #[error("the language model is rate limited")]
    RateLimited { retry_after: Option<Duration> },
    /// The LLM server answered with an error status (after retries for 5xx).
    #[error("the language model returned HTTP {status}")]
    Status { status: u16, detail: String },
    /// 401 or 403: the key is missing or refused. Not transient, so never retried.
    #[error("the language model refused the credentials (HTTP {status})")]
    Unauthorized {
        status: u16,
        /// Whether `LLM_API_KEY` (or `OPENAI_API_KEY`) was set at all.
        key_set: bool,
        detail: String,
    },
    /// A 2xx body larger than `LLM_MAX_RESPONSE_BYTES`; reading stopped there.
    #[error("the language model's response is larger than LLM_MAX_RESPONSE_BYTES ({limit} bytes)")]
    TooLarge { limit: usize },
    /// The turn's deadline (`TURN_DEADLINE_MS`) came before an answer.
    #[error("the turn's deadline was reached before the language model answered")]
    DeadlineReached,
    /// No answer in `LLM_TIMEOUT_MS` (after retries).
    #[error("the language model did not answer in time")]
    Timeout,
    /// Connection refused, reset, DNS... (after retries).
    #[error("the language model could not be reached: {0}")]
    Transport(String),
    /// A 2xx whose body is not what the dialect promises.
    #[error("the language model's response could not be read: {0}")]
    BadResponse(String),
}

/// The LLM client: one per instance, reused across invocations (it holds a connection pool).
#[derive(Debug, Clone)]
pub struct Llm {
    config: LlmConfig,
    /// From `config`: how each POST is retried.
    policy: RetryPolicy,
    http: reqwest::Client,
    metrics: Metrics,
}

impl Llm {
    pub fn new(config: LlmConfig, http: reqwest::Client) -> Self {
        if config.key_missing_for_openai() {
            tracing::warn!(
                "LLM_API_KEY is not set and LLM_BASE_URL is OpenAI's: every chat turn will fail \
until it is"
            );
        }
        Self {
            policy: retry::policy(&config),
            config,
            http,
            metrics: Metrics::off(),
        }
    }

    /// Each request's `ModelCalls`, `ModelErrors`, `ModelRetries` and `ModelLatency` go to
    /// `metrics` (nowhere unless set).
    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = metrics;
        self
    }

    pub fn config(&self) -> &LlmConfig {
        &self.config
    }

    /// One model response, with retries for 429, 5xx and transport failures, by `deadline`.
    pub async fn respond(
        &self,
        prompt: Prompt<'_>,
        deadline: tokio::time::Instant,
    ) -> Result<Reply, LlmError> {
        let started = std::time::Instant::now();
        let mut retries = 0;
        let (path, body) = self.request(prompt, false);
        let span = self.span();
        let reply = async {
            let url = self.url(path)?;
            let (http, policy, key) = (&self.http, &self.policy, self.config.api_key.as_ref());
            let bytes = post_json(http, policy, key, url, body, deadline, &mut retries).await?;
            self.parse(&bytes)
        }
        .instrument(span.clone())
        .await;
        answered(&span, &reply);
        self.measured(&reply, retries, started);
        reply
    }

    /// The same request as [`Llm::respond`] with `stream: true` (Chat Completions also sends
    /// `stream_options: {"include_usage": true}`). Each text delta is handed to `on_text` as it
    /// arrives; tool-call arguments are assembled from their deltas; the returned `Reply` is
    /// what `respond` would have returned for the same answer, its text all the deltas joined.
    /// Retries (429/5xx/transport) only happen before the first bytes of a 2xx stream; after
    /// that a failure is an error. `LLM_TIMEOUT_MS` is the time to those first bytes and the
    /// longest silence allowed after them; `LLM_MAX_RESPONSE_BYTES` caps the whole stream. At
    /// `deadline` it returns [`LlmError::DeadlineReached`]; the text delivered through
    /// `on_text` so far is the caller's to keep.
    pub async fn respond_streaming(
        &self,
        prompt: Prompt<'_>,
        deadline: tokio::time::Instant,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<Reply, LlmError> {
        let started = std::time::Instant::now();
        let mut retries = 0;
        let (path, body) = self.request(prompt, true);
        let span = self.span();
        let reply = async {
            let url = self.url(path)?;
            let (http, policy, key) = (&self.http, &self.policy, self.config.api_key.as_ref());
            let opened = post_stream(http, policy, key, url, body, deadline, &mut retries).await?;
            streamed::read(self, opened, deadline, on_text).await
        }
        .instrument(span.clone())
        .await;
        answered(&span, &reply);
        self.measured(&reply, retries, started);
        reply
    }

    /// The span of one model request, its retries included (OpenTelemetry's GenAI `chat`;
    /// docs/tracing.md): the provider, the model, the server, then the tokens; never the
    /// prompt or the answer.
    fn span(&self) -> tracing::Span {
        tracing::info_span!(
            target: parley_core::telemetry::traces::TARGET,
            "chat",
            otel.name = %format_args!("chat {}", self.config.model),
            otel.kind = "client",
            gen_ai.operation.name = "chat",
            gen_ai.provider.name = provider_name(&self.config.base_url),
            gen_ai.request.model = %self.config.model,
            gen_ai.request.max_tokens = self.config.max_output_tokens,
            server.address = self.config.base_url.host_str(),
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            "error.type" = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        )
    }

    /// One request's metrics, once its retries are over: a request abandoned half-way (a
    /// streamed turn whose client went away) leaves none.
    fn measured(&self, reply: &Result<Reply, LlmError>, retries: u32, started: std::time::Instant) {
        self.metrics.emit(
            Document::new()
                .dimension("Status", status_of(reply))
                .count("ModelCalls", 1)
                .count("ModelErrors", u64::from(reply.is_err()))
                .count("ModelRetries", u64::from(retries))
                .millis("ModelLatency", started.elapsed()),
        );
    }

    /// The path under `LLM_BASE_URL` and the JSON body of one request in this dialect.
    fn request(&self, prompt: Prompt<'_>, stream: bool) -> (&'static str, Vec<u8>) {
        match self.config.api {
            LlmApi::Responses => (
                "responses",
                responses::request(&self.config, prompt, stream),
            ),
            LlmApi::ChatCompletions => (
                "chat/completions",
                chat_completions::request(&self.config, prompt, stream),
            ),
        }
    }

    fn url(&self, path: &str) -> Result<url::Url, LlmError> {
        self.config
            .base_url
            .join(path)
            .map_err(|e| LlmError::Transport(e.to_string()))
    }

    /// A whole answer's body, read in this dialect.
    fn parse(&self, body: &[u8]) -> Result<Reply, LlmError> {
        let key = self.api_key();
        match self.config.api {
            LlmApi::Responses => responses::parse(decode(body, key)?),
            LlmApi::ChatCompletions => chat_completions::parse(decode(body, key)?),
        }
    }

    /// The key as text, to blank it out of what a server quotes back.
    fn api_key(&self) -> Option<&str> {
        self.config.api_key.as_ref().map(|k| k.expose_secret())
    }
}

/// `gen_ai.provider.name` for the server at `base_url`: the semantic conventions' name of the
/// well-known ones, `_OTHER` for any other OpenAI-compatible server (Ollama, vLLM, a proxy).
fn provider_name(base_url: &url::Url) -> &'static str {
    let host = base_url.host_str().unwrap_or_default();
    if host == "api.openai.com" {
        "openai"
    } else if host.ends_with(".openai.azure.com") {
        "azure.ai.openai"
    } else if host.starts_with("bedrock-runtime.") && host.ends_with(".amazonaws.com") {
        "aws.bedrock"
    } else {
        "_OTHER"
    }
}

/// Records a model request's end on its span: the tokens it used, or its error's kind.
fn answered(span: &tracing::Span, reply: &Result<Reply, LlmError>) {
    if span.is_disabled() {
        return;
    }
    match reply {
        Ok(reply) => {
            span.record("gen_ai.usage.input_tokens", reply.usage.input_tokens);
            span.record("gen_ai.usage.output_tokens", reply.usage.output_tokens);
        }
        Err(_) => {
            span.record("error.type", status_of(reply).as_str());
            span.record("otel.status_code", "ERROR");
        }
    }
}

/// The `Status` dimension of a request's metrics: the last HTTP status the model's server
/// answered, or `network` / `timeout` when it did not answer. A 2xx whose body could not be
/// used (too large, not the dialect's shape) is `200`: the server answered, and the error
/// count says it failed.
fn status_of(reply: &Result<Reply, LlmError>) -> String {
    match reply {
        Ok(_) | Err(LlmError::TooLarge { .. } | LlmError::BadResponse(_)) => "200".into(),
        Err(LlmError::RateLimited { .. }) => "429".into(),
        Err(LlmError::Status { status, .. } | LlmError::Unauthorized { status, .. }) => {
            status.to_string()
        }
        Err(LlmError::Timeout | LlmError::DeadlineReached) => "timeout".into(),
        Err(LlmError::Transport(_)) => "network".into(),
    }
}

#[cfg(test)]
mod tests {
    use parley_testkit::llm::{ScriptedLlm, Step};

    use super::*;
    use crate::turn::llm::fixtures::{call_triples, config, far_deadline, history, tools};

    fn client(llm: &ScriptedLlm, api: LlmApi) -> Llm {
        Llm::new(
            LlmConfig {
                api,
                base_url: url::Url::parse(&format!("{}/", llm.base_url())).unwrap(),
                retry: RetrySettings {
                    max_retries: 3,
                    retry_budget: std::time::Duration::from_secs(10),
                    ..config().retry
                },
                ..config()
            },
            reqwest::Client::new(),
        )
    }

    #[tokio::test]
    async fn a_2xx_body_that_is_not_json_is_a_bad_response_and_not_retried() {
        let llm = ScriptedLlm::start(vec![Step::Status {
            status: 200,
            retry_after: None,
            body: "<html>gateway</html>".to_owned(),
        }])
        .await;
        let items = history();
        let prompt = Prompt {
            instructions: "",
            items: &items,
            tools: &[],
        };
        let err = client(&llm, LlmApi::Responses)
            .respond(prompt, far_deadline())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, LlmError::BadResponse(m) if m.contains("gateway")),
            "{err:?}"
        );
        assert_eq!(llm.requests().len(), 1);
    }

    #[test]
    fn a_missing_key_is_flagged_only_for_openai() {
        let openai = LlmConfig {
            base_url: url::Url::parse("https://api.openai.com/v1/").unwrap(),
            ..config()
        };
        assert!(openai.key_missing_for_openai());
        let with_key = LlmConfig {
            api_key: Some(SecretString::from("sk-x".to_owned())),
            ..openai.clone()
        };
        assert!(!with_key.key_missing_for_openai());
        assert!(
            !config().key_missing_for_openai(),
            "a local server needs no key"
        );
    }

    #[test]
    fn the_response_cap_is_a_setting_with_a_default() {
        let env = |pairs: &[(&str, &str)]| Env::from_pairs(pairs.iter().copied());
        assert_eq!(
            LlmConfig::from_env(&env(&[])).unwrap().max_response_bytes,
            4 * 1024 * 1024
        );
        let e = LlmConfig::from_env(&env(&[("LLM_MAX_RESPONSE_BYTES", "10")])).unwrap_err();
        assert_eq!(e.var, "LLM_MAX_RESPONSE_BYTES");
    }

    #[test]
    fn sampling_settings_are_sent_only_when_set_and_refused_outside_their_range() {
        let env = |pairs: &[(&str, &str)]| Env::from_pairs(pairs.iter().copied());
        let unset = LlmConfig::from_env(&env(&[])).unwrap();
        assert_eq!((unset.temperature, unset.top_p), (None, None));
        let set =
            LlmConfig::from_env(&env(&[("LLM_TEMPERATURE", "0.2"), ("LLM_TOP_P", "1")])).unwrap();
        assert_eq!((set.temperature, set.top_p), (Some(0.2), Some(1.0)));
        let edges =
            LlmConfig::from_env(&env(&[("LLM_TEMPERATURE", "2"), ("LLM_TOP_P", "0")])).unwrap();
        assert_eq!((edges.temperature, edges.top_p), (Some(2.0), Some(0.0)));
        for (var, raw) in [
            ("LLM_TEMPERATURE", "2.5"),
            ("LLM_TEMPERATURE", "-0.1"),
            ("LLM_TEMPERATURE", "NaN"),
            ("LLM_TEMPERATURE", "warm"),
            ("LLM_TOP_P", "1.01"),
            ("LLM_TOP_P", "inf"),
        ] {
            let e = LlmConfig::from_env(&env(&[(var, raw)])).unwrap_err();
            assert_eq!(e.var, var, "{raw}");
        }
        let e = LlmConfig::from_env(&env(&[("LLM_TOP_P", "2")])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid setting LLM_TOP_P: must be a number from 0 to 1, got 2"
        );
    }

    #[tokio::test]
    async fn respond_speaks_each_dialect_and_reads_the_scripted_answer() {
        for (api, path) in [
            (LlmApi::Responses, "/v1/responses"),
            (LlmApi::ChatCompletions, "/v1/chat/completions"),
        ] {
            let llm = ScriptedLlm::start(vec![Step::TextAndCalls(
                "Checking.".to_owned(),
                vec![
                    ("a".to_owned(), "{}".to_owned()),
                    ("b".to_owned(), "{\"x\":1}".to_owned()),
                ],
            )])
            .await;
            let client = Llm::new(
                LlmConfig {
                    api,
                    base_url: url::Url::parse(&format!("{}/", llm.base_url())).unwrap(),
                    ..config()
                },
                reqwest::Client::new(),
            );
            let (items, tools) = (history(), tools());
            let prompt = Prompt {
                instructions: "Be brief.",
                items: &items,
                tools: &tools,
            };
            let reply = client.respond(prompt, far_deadline()).await.unwrap();
            assert_eq!(reply.text.as_deref(), Some("Checking."), "{api:?}");
            let calls = call_triples(&reply);
            assert_eq!(
                calls,
                vec![("call_1", "a", "{}"), ("call_2", "b", "{\"x\":1}")]
            );
            assert_eq!(
                reply.usage,
                Usage {
                    input_tokens: 100,
                    output_tokens: 20,
                    total_tokens: 120
                }
            );
            assert_eq!(llm.paths(), vec![path]);
            let sent: Value = serde_json::from_slice(&client.request(prompt, false).1).unwrap();
            assert_eq!(llm.requests(), vec![sent]);
        }
    }

    #[test]
    fn every_string_of_a_reply_is_cleaned_of_nul() {
        let mut reply = Reply {
            text: Some("a\0b".into()),
            calls: vec![ToolCall {
                call_id: "call\0_1".into(),
                name: "lad\0".into(),
                arguments: "{\"ref\":\"\\u0000\0\"}".into(),
            }],
            ..Reply::default()
        };
        reply.clean_nul();
        assert_eq!(reply.text.as_deref(), Some("a\u{FFFD}b"));
        let call = &reply.calls[0];
        assert_eq!(call.call_id, "call\u{FFFD}_1");
        assert_eq!(call.name, "lad\u{FFFD}");
        assert!(!call.arguments.contains('\0'));
    }
}
