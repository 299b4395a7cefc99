//! The LLM, spoken to over HTTP in one of two OpenAI-compatible dialects: the Responses API
//! (`function_call` / `function_call_output`, `store: false`) or Chat Completions
//! (`tool_calls` / `role: tool`). The rest of the chat function sees only the neutral types here.

mod chat_completions;
mod responses;
mod retry;

use std::time::Duration;

use parley_core::config::{ConfigError, Env, SecretString};
use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;

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
    /// `LLM_TIMEOUT_MS`: one HTTP request to the LLM, start to end of body (default 60000).
    pub timeout: Duration,
    /// `LLM_MAX_RETRIES`: retries after a 429, a 5xx or a transport failure (default 3).
    pub max_retries: u32,
    /// `LLM_RETRY_BUDGET_MS`: total time one LLM call may spend waiting between retries
    /// (default 20000); a `Retry-After` longer than what is left ends the retries.
    pub retry_budget: Duration,
    /// `LLM_MAX_OUTPUT_TOKENS`: optional cap sent with each request.
    pub max_output_tokens: Option<u32>,
}

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
        let mut base_url = url::Url::parse(raw_base)
            .map_err(|e| ConfigError::new("LLM_BASE_URL", format!("is not a URL: {e}")))?;
        if !matches!(base_url.scheme(), "http" | "https") {
            return Err(ConfigError::new("LLM_BASE_URL", "must be an http(s) URL"));
        }
        // `join` replaces the last path segment unless the path ends in a slash.
        if !base_url.path().ends_with('/') {
            let path = format!("{}/", base_url.path());
            base_url.set_path(&path);
        }
        Ok(Self {
            api,
            base_url,
            model: env.get("LLM_MODEL").unwrap_or("gpt-4.1-mini").to_owned(),
            api_key: env
                .secret("LLM_API_KEY")
                .or_else(|| env.secret("OPENAI_API_KEY")),
            timeout: env.millis("LLM_TIMEOUT_MS", Duration::from_secs(60), 100..=900_000)?,
            max_retries: env.limit("LLM_MAX_RETRIES", 3, 0..=10)? as u32,
            retry_budget: env.millis(
                "LLM_RETRY_BUDGET_MS",
                Duration::from_secs(20),
                0..=300_000,
            )?,
            max_output_tokens: env
                .optional::<u32>("LLM_MAX_OUTPUT_TOKENS")?
                .filter(|n| *n > 0),
        })
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

/// What the model said in one response: text, tool calls, or both.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reply {
    pub text: Option<String>,
    pub calls: Vec<ToolCall>,
    pub usage: Usage,
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
    http: reqwest::Client,
}

impl Llm {
    pub fn new(config: LlmConfig, http: reqwest::Client) -> Self {
        Self { config, http }
    }

    pub fn config(&self) -> &LlmConfig {
        &self.config
    }

    /// One model response, with retries for 429, 5xx and transport failures.
    pub async fn respond(&self, prompt: Prompt<'_>) -> Result<Reply, LlmError> {
        let (path, body) = self.request(prompt);
        let url = self
            .config
            .base_url
            .join(path)
            .map_err(|e| LlmError::Transport(e.to_string()))?;
        let body = retry::post_json(&self.http, &self.config, url, body).await?;
        match self.config.api {
            LlmApi::Responses => responses::parse(&body),
            LlmApi::ChatCompletions => chat_completions::parse(&body),
        }
    }

    /// The path under `LLM_BASE_URL` and the JSON body of one request in this dialect.
    fn request(&self, prompt: Prompt<'_>) -> (&'static str, Vec<u8>) {
        match self.config.api {
            LlmApi::Responses => ("responses", responses::request(&self.config, prompt)),
            LlmApi::ChatCompletions => (
                "chat/completions",
                chat_completions::request(&self.config, prompt),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use parley_testkit::llm::{ScriptedLlm, Step};

    use super::*;
    use crate::llm::responses::tests::{call_triples, config, history, tools};

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
            let reply = client.respond(prompt).await.unwrap();
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
            let sent: Value = serde_json::from_slice(&client.request(prompt).1).unwrap();
            assert_eq!(llm.requests(), vec![sent]);
        }
    }
}
