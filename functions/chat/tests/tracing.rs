//! OpenTelemetry traces across the chat and mcp (docs/tracing.md), each a real process with
//! its own global subscriber (the chat's binary; mcp as this test binary run again, see
//! [`mcp_process`]), exporting through the real OTLP exporter to a real OTLP/HTTP receiver
//! (`parley_testkit::otlp`). One turn with one tool call must make one trace from the chat's
//! request to the SQL statement mcp ran, with the GenAI and database attributes, and no
//! question, answer, argument value, statement text or secret in any attribute unless a
//! setting allows it.

use std::net::TcpListener;
use std::process::{Child, Command};
use std::time::Duration;

use jsonwebtoken::{EncodingKey, Header, encode};
use parley_testkit::TestDb;
use parley_testkit::llm::{ScriptedLlm, Step, USAGE_INPUT_TOKENS, USAGE_OUTPUT_TOKENS};
use parley_testkit::otlp::{OtlpReceiver, ReceivedSpan};
use serde_json::json;

const JWT_SECRET: &str = "test-secret-0123456789abcdef0123456789abcdef";
const MCP_TOKEN: &str = "mcp-test-token-0123456789";
const CALLER_KEY: &str = "chat-test-caller-key-0123456789abcdef";
const LLM_KEY: &str = "sk-test-not-a-real-key-tracing";
const TOOLS_FILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../domains/feedback/tools.toml"
);
const QUESTION: &str = "How is my district doing, asks question-text-5d1?";
const ARGUMENT: &str = "argument-value-8c2";
const ANSWER: &str = "answer-text-3e9: no district matches.";
/// The longest any process may take to start or its spans to arrive: far past what they take.
const PATIENCE: Duration = Duration::from_secs(60);

/// The mcp function, when this test binary is run again by [`Functions::start`] with
/// `PARLEY_TRACING_TEST_MCP=1`: a process of its own, as `functions/mcp/src/main.rs` starts it,
/// serving until SIGTERM. Run directly, it does nothing.
#[test]
#[ignore = "the mcp process of the other tests, which run it"]
fn mcp_process() {
    if std::env::var_os("PARLEY_TRACING_TEST_MCP").is_none() {
        return;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let env = parley_core::config::Env::from_process();
        parley_core::telemetry::init_with_traces(&env, parley_mcp::TRACES).expect("settings");
        parley_mcp::Application::build(env)
            .await
            .expect("mcp starts")
            .run_until_stopped()
            .await
            .expect("mcp serves");
    });
}

/// A chat and an mcp process over one database, a scripted model that calls `lad_by_ref`
/// once and answers, and the receiver their spans go to.
struct Functions {
    chat: Child,
    mcp: Child,
    chat_url: String,
    receiver: OtlpReceiver,
    _llm: ScriptedLlm,
    _db: TestDb,
}

impl Functions {
    /// Both functions export to `receiver`, with `OTEL_TRACES=otlp` when `traces`;
    /// `mcp_settings` and `chat_settings` go to that function only.
    async fn start(
        receiver: OtlpReceiver,
        traces: bool,
        mcp_settings: &[(&str, &str)],
        chat_settings: &[(&str, &str)],
    ) -> Functions {
        let db = TestDb::with_demo_data(100).await;
        let mut tracing = vec![("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())];
        if traces {
            tracing.push(("OTEL_TRACES", "otlp".to_owned()));
        }
        let llm = ScriptedLlm::start(vec![
            Step::call("lad_by_ref", json!({ "ref": ARGUMENT }).to_string()),
            Step::text(ANSWER),
        ])
        .await;
        let mcp_command = |port: u16| {
            let mut mcp = Command::new(std::env::current_exe().expect("this test binary"));
            mcp.args(["mcp_process", "--exact", "--ignored", "--nocapture"])
                .env_clear()
                .env("PARLEY_TRACING_TEST_MCP", "1")
                // The harness runs the test on a thread of its own; give it main's stack.
                .env("RUST_MIN_STACK", "8388608")
                .env("DATABASE_URL", &db.readonly_url)
                .env("MCP_AUTH_TOKEN", MCP_TOKEN)
                .env("MCP_CALLER_KEY", CALLER_KEY)
                .env("TOOLS_FILE", TOOLS_FILE)
                .env("LISTEN_ADDR", format!("127.0.0.1:{port}"))
                .envs(tracing.iter().map(|(k, v)| (k, v)))
                .envs(mcp_settings.iter().copied());
            mcp
        };
        let (mcp, mcp_port) = spawn_serving(mcp_command).await;
        let chat_command = |port: u16| {
            let mut chat = Command::new(env!("CARGO_BIN_EXE_chat"));
            chat.env_clear()
                .env("DATABASE_URL", &db.url)
                .env("JWT_SECRET", JWT_SECRET)
                .env("MCP_URL", format!("http://127.0.0.1:{mcp_port}/mcp"))
                .env("MCP_AUTH_TOKEN", MCP_TOKEN)
                .env("MCP_CALLER_KEY", CALLER_KEY)
                .env("LLM_BASE_URL", llm.base_url())
                .env("LLM_MODEL", "scripted-model")
                .env("LLM_API_KEY", LLM_KEY)
                .env("MCP_TIMEOUT_MS", "10000")
                .env("LISTEN_ADDR", format!("127.0.0.1:{port}"))
                .envs(tracing.iter().map(|(k, v)| (k, v)))
                .envs(chat_settings.iter().copied());
            chat
        };
        let (chat, chat_port) = spawn_serving(chat_command).await;
        Functions {
            chat,
            mcp,
            chat_url: format!("http://127.0.0.1:{chat_port}"),
            receiver,
            _llm: llm,
            _db: db,
        }
    }

    /// One turn, answered.
    async fn turn(&self) -> serde_json::Value {
        let response = reqwest::Client::new()
            .post(format!("{}/api/chat", self.chat_url))
            .bearer_auth(token("alice-tracing"))
            .json(&json!({ "message": QUESTION }))
            .send()
            .await
            .expect("the chat answers");
        assert_eq!(response.status(), 200);
        let body: serde_json::Value = response.json().await.expect("JSON");
        assert_eq!(body["reply"], ANSWER, "{body}");
        assert_eq!(body["traces"][0]["name"], "lad_by_ref", "{body}");
        body
    }

    /// Stops both processes as Lambda or a process manager would (SIGTERM), and waits for
    /// them: whatever they were going to export has been sent when this returns.
    fn stop(&mut self) {
        for child in [&mut self.chat, &mut self.mcp] {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let _ = child.wait();
        }
    }
}

impl Drop for Functions {
    fn drop(&mut self) {
        for child in [&mut self.chat, &mut self.mcp] {
            if child.try_wait().ok().flatten().is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Returns once something accepts connections on `port`.
/// Spawns `command(port)` on a free port until it serves there. Another test may take the port
/// between `free_port` and the process binding it: then that process exits ("address already in
/// use") while something else answers on the port, so a process that exits within a second of
/// its port answering is started again on another one.
async fn spawn_serving(command: impl Fn(u16) -> Command) -> (Child, u16) {
    for _ in 0..5 {
        let port = free_port();
        let mut child = command(port).spawn().expect("the function starts");
        let until = tokio::time::Instant::now() + PATIENCE;
        let mut exited = false;
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            if child.try_wait().expect("its status").is_some() {
                exited = true;
                break;
            }
            assert!(
                tokio::time::Instant::now() < until,
                "nothing serves on {port}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for _ in 0..20 {
            if exited || child.try_wait().expect("its status").is_some() {
                exited = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if !exited {
            return (child, port);
        }
        let _ = child.wait();
    }
    panic!("the function could not take a free port in five tries");
}

fn token(sub: &str) -> String {
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
        + 3600;
    encode(
        &Header::default(),
        &json!({"sub": sub, "exp": exp}),
        &EncodingKey::from_secret(JWT_SECRET.as_bytes()),
    )
    .expect("token")
}

/// The one span of `service` named `name` whose parent is `parent` (a span id, "" for none).
fn child<'a>(
    spans: &'a [ReceivedSpan],
    service: &str,
    name: &str,
    parent: &str,
) -> &'a ReceivedSpan {
    let found: Vec<_> = spans
        .iter()
        .filter(|s| s.service == service && s.name == name && s.parent_span_id == parent)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one {service} {name:?} under {parent:?}: {spans:#?}"
    );
    found[0]
}

fn children<'a>(spans: &'a [ReceivedSpan], name: &str, parent: &str) -> Vec<&'a ReceivedSpan> {
    spans
        .iter()
        .filter(|s| s.name == name && s.parent_span_id == parent)
        .collect()
}

/// The spans of the turn's trace, once the SQL span mcp ran for the chat's call is in, and
/// the chat's request span (the last of the chat's spans to end).
async fn the_turns_trace(receiver: &OtlpReceiver) -> Vec<ReceivedSpan> {
    let spans = receiver
        .wait_for(PATIENCE, |spans| {
            let chat_done = spans
                .iter()
                .any(|s| s.service == "parley-chat" && s.name == "request");
            let sql = spans
                .iter()
                .any(|s| s.service == "parley-mcp" && s.name == "SELECT");
            chat_done && sql
        })
        .await;
    let root = spans
        .iter()
        .find(|s| s.service == "parley-chat" && s.name == "request")
        .expect("the chat's request span");
    spans
        .iter()
        .filter(|s| s.trace_id == root.trace_id)
        .cloned()
        .collect()
}

/// Every attribute of every span, as `key=value` lines, for the privacy checks.
fn every_attribute(spans: &[ReceivedSpan]) -> String {
    spans
        .iter()
        .flat_map(|s| {
            s.attributes
                .iter()
                .map(move |(k, v)| format!("{} {k}={v}\n", s.name))
        })
        .collect()
}

#[tokio::test]
async fn one_trace_covers_the_turn_in_the_chat_and_its_tool_call_in_mcp_without_user_text() {
    let functions = Functions::start(OtlpReceiver::start().await, true, &[], &[]).await;
    let body = functions.turn().await;
    let spans = the_turns_trace(&functions.receiver).await;

    // The chat: request → invoke_agent → two model requests and the tool call.
    let request = child(&spans, "parley-chat", "request", "");
    assert_eq!(request.attr("path"), Some("/api/chat"));
    let turn = child(
        &spans,
        "parley-chat",
        "invoke_agent Parley",
        &request.span_id,
    );
    assert_eq!(turn.attr("gen_ai.operation.name"), Some("invoke_agent"));
    assert_eq!(turn.attr("gen_ai.request.model"), Some("scripted-model"));
    assert_eq!(turn.attr("parley.turn.outcome"), Some("answered"));
    assert_eq!(
        turn.attr("parley.turn.steps"),
        Some(body["steps"].to_string().as_str())
    );
    assert_eq!(
        turn.attr("gen_ai.conversation.id"),
        body["conversation_id"].as_str()
    );
    assert_eq!(
        turn.attr("gen_ai.usage.input_tokens"),
        Some((2 * USAGE_INPUT_TOKENS).to_string().as_str())
    );
    let model_calls = children(&spans, "chat scripted-model", &turn.span_id);
    assert_eq!(model_calls.len(), 2, "{spans:#?}");
    for call in &model_calls {
        assert_eq!(call.kind, 3, "a client span");
        assert_eq!(call.attr("gen_ai.operation.name"), Some("chat"));
        assert_eq!(call.attr("gen_ai.provider.name"), Some("_OTHER"));
        assert_eq!(call.attr("gen_ai.request.model"), Some("scripted-model"));
        assert_eq!(call.attr("server.address"), Some("127.0.0.1"));
        assert_eq!(
            call.attr("gen_ai.usage.input_tokens"),
            Some(USAGE_INPUT_TOKENS.to_string().as_str())
        );
        assert_eq!(
            call.attr("gen_ai.usage.output_tokens"),
            Some(USAGE_OUTPUT_TOKENS.to_string().as_str())
        );
    }
    let tool = child(
        &spans,
        "parley-chat",
        "execute_tool lad_by_ref",
        &turn.span_id,
    );
    assert_eq!(tool.attr("gen_ai.operation.name"), Some("execute_tool"));
    assert_eq!(tool.attr("gen_ai.tool.name"), Some("lad_by_ref"));
    assert_eq!(
        tool.attr("gen_ai.tool.call.id"),
        body["traces"][0]["call_id"].as_str()
    );

    // mcp, in the same trace: its request under the chat's tool call, then the call, then SQL.
    let mcp_request = child(&spans, "parley-mcp", "request", &tool.span_id);
    assert_eq!(mcp_request.attr("path"), Some("/mcp"));
    let mcp_tool = child(
        &spans,
        "parley-mcp",
        "execute_tool lad_by_ref",
        &mcp_request.span_id,
    );
    assert_eq!(mcp_tool.attr("parley.tool.outcome"), Some("ok"));
    let sql = child(&spans, "parley-mcp", "SELECT", &mcp_tool.span_id);
    assert_eq!(sql.attr("db.system.name"), Some("postgresql"));
    assert_eq!(sql.attr("db.operation.name"), Some("SELECT"));
    assert!(sql.attr("db.response.returned_rows").is_some(), "{sql:?}");
    assert_eq!(
        sql.attr("db.query.text"),
        None,
        "statement text is off by default"
    );

    // Nothing anyone wrote, and no secret, in any attribute of any span received.
    let all = every_attribute(&functions.receiver.spans());
    for private in [
        "question-text-5d1",
        "answer-text-3e9",
        ARGUMENT,
        "FROM",
        MCP_TOKEN,
        CALLER_KEY,
        LLM_KEY,
        JWT_SECRET,
        "alice-tracing",
        "postgres://",
    ] {
        assert!(
            !all.contains(private),
            "{private:?} is in an attribute:\n{all}"
        );
    }
    assert!(
        functions
            .receiver
            .content_types()
            .iter()
            .all(|t| t == "application/x-protobuf")
    );
}

#[tokio::test]
async fn statement_text_and_tool_content_are_on_spans_only_where_their_settings_allow_them() {
    let functions = Functions::start(
        OtlpReceiver::start().await,
        true,
        &[("OTEL_SQL_TEXT", "true")],
        &[("OTEL_GENAI_CONTENT", "true")],
    )
    .await;
    functions.turn().await;
    let spans = the_turns_trace(&functions.receiver).await;
    let sql = spans
        .iter()
        .find(|s| s.service == "parley-mcp" && s.name == "SELECT")
        .expect("the SQL span");
    let text = sql.attr("db.query.text").expect("the statement's text");
    assert!(
        text.contains("tool=lad_by_ref") && text.contains("FROM lads l, ref"),
        "{text}"
    );
    // The argument is bound as a parameter: the text never holds it.
    assert!(!text.contains(ARGUMENT), "{text}");

    // The chat's call carries what the model sent and what it got back.
    let tool = spans
        .iter()
        .find(|s| s.service == "parley-chat" && s.name == "execute_tool lad_by_ref")
        .expect("the chat's tool span");
    let arguments = tool.attr("gen_ai.tool.call.arguments").expect("arguments");
    assert!(arguments.contains(ARGUMENT), "{arguments}");
    assert!(tool.attr("gen_ai.tool.call.result").is_some(), "{tool:?}");

    // Neither setting puts the question or the answer on any span, nor a secret.
    let all = every_attribute(&spans);
    for private in ["question-text-5d1", "answer-text-3e9", MCP_TOKEN, LLM_KEY] {
        assert!(
            !all.contains(private),
            "{private:?} is in an attribute:\n{all}"
        );
    }
}

#[tokio::test]
async fn with_traces_off_nothing_is_sent_even_with_an_endpoint_set() {
    let mut functions = Functions::start(OtlpReceiver::start().await, false, &[], &[]).await;
    functions.turn().await;
    // Stopped as Lambda stops them: a function that traced would have flushed by now.
    functions.stop();
    assert_eq!(functions.receiver.posts(), 0);
}
