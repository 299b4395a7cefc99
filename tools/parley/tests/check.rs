//! `parley check` (issue 33, item 5) run as a person runs it, the binary against a stack started
//! here as `scripts/dev` serves it: the real chat and mcp functions on loopback over a fresh
//! database, the feedback domain's tools and ad-hoc SQL and the documents tools, the scripted
//! model writing at a steady pace (so a streamed turn's first byte comes well before its end).
//! A working stack passes every check; then each check is made to fail once, the way a
//! deployment goes wrong, and its line must say so with the fix, and the exit status be 1.

use std::process::Command;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use jsonwebtoken::{EncodingKey, Header, encode, get_current_timestamp};
use parley_core::config::Env;
use parley_testkit::llm::{Plan, ScriptedLlm, Step};
use parley_testkit::{TcpProxy, TestDb};
use serde_json::{Value, json};

const MCP_TOKEN: &str = "check-test-service-token-0123456789";
const CALLER_KEY: &str = "check-test-caller-key-0123456789abcdef";
const JWT_SECRET: &str = "check-test-jwt-secret-0123456789abcdef";
/// What the scripted model answers every turn, a piece of 4 characters every [`PACE`].
const REPLY: &str = "Every part of the stack answered this check.";
const PACE: Duration = Duration::from_millis(25);
const SQL_TOOLS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../domains/feedback/sql.toml"
);

/// One line of `parley check`'s report: its status, what was seen and the fix under it.
#[derive(Debug)]
struct Line {
    status: String,
    detail: String,
    fix: Option<String>,
}

/// `parley check`'s exit status and its report, by check name.
struct Report {
    code: Option<i32>,
    stdout: String,
}

impl Report {
    fn line(&self, check: &str) -> Line {
        let lines: Vec<&str> = self.stdout.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.split_whitespace().nth(1) == Some(check))
            .unwrap_or_else(|| panic!("no line for {check} in:\n{}", self.stdout));
        let mut words = lines[at].splitn(3, char::is_whitespace);
        let status = words.next().unwrap_or_default().to_owned();
        let detail = lines[at]
            .trim_start_matches(&status)
            .trim_start()
            .trim_start_matches(check)
            .trim()
            .to_owned();
        let fix = lines
            .get(at + 1)
            .and_then(|l| l.trim().strip_prefix("fix: "))
            .map(str::to_owned);
        Line {
            status,
            detail,
            fix,
        }
    }

    /// The line of `check`, which must have failed, and its fix.
    fn failed(&self, check: &str) -> (String, String) {
        let line = self.line(check);
        assert_eq!(line.status, "FAIL", "{check}:\n{}", self.stdout);
        let fix = line
            .fix
            .unwrap_or_else(|| panic!("no fix under {check}:\n{}", self.stdout));
        (line.detail, fix)
    }
}

/// Runs `parley check ARGS` with only the settings in `env` (none from the test's own
/// environment), as a separate process.
async fn check(args: &[&str], env: &[(&str, &str)]) -> Report {
    let mut command = Command::new(env!("CARGO_BIN_EXE_parley"));
    command.arg("check").args(args);
    if !args.contains(&"--timeout") {
        command.args(["--timeout", "60"]);
    }
    for name in [
        "MCP_AUTH_TOKEN",
        "PARLEY_USER_TOKEN",
        "SECRET_IDS",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ] {
        command.env_remove(name);
    }
    command.envs(env.iter().copied());
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("the check's thread")
        .expect("parley check runs");
    let stdout = String::from_utf8(output.stdout).expect("UTF-8 output");
    eprintln!(
        "parley check {}:\n{stdout}{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    Report {
        code: output.status.code(),
        stdout,
    }
}

/// A database with the feedback and tasks domains, and the SQL tools' login on it.
async fn database() -> (TestDb, String) {
    let db = TestDb::with_demo_data(300).await;
    let sql_url = db.sql_reader_url("").await;
    (db, sql_url)
}

/// A public collection of one small document, ingested with `parley ingest` as README's first
/// document is, so the service token's search finds passages.
async fn public_handbook(db: &TestDb) {
    let dir = tempfile::tempdir().expect("a folder");
    std::fs::write(
        dir.path().join("deploying.md"),
        "# Deploying\n\n## After the deploy\nRun parley check against the page's URL: it \
         checks the page, a turn, the tools and the stream, and names the fix for each failure.\n",
    )
    .expect("the document");
    let mut command = Command::new(env!("CARGO_BIN_EXE_parley"));
    command
        .args(["ingest", "--collection", "handbook", "--public"])
        .arg(dir.path())
        .env("DATABASE_URL", &db.url)
        .env("EMBEDDINGS_MODEL_DIR", parley_testkit::model_dir());
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("the ingest's thread")
        .expect("parley ingest runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The mcp function as scripts/dev serves it (its read-only login; the feedback domain's tools
/// and ad-hoc SQL and the documents tools; the service token and the chat's caller key), with
/// `changes` laid over those settings (`None` removes one). Returns its `/mcp` URL.
async fn mcp(db: &TestDb, sql_url: &str, changes: &[(&str, Option<&str>)]) -> String {
    let tools = format!(
        "{},{SQL_TOOLS},{}",
        parley_testkit::domains::FEEDBACK_TOOLS,
        parley_testkit::domains::DOCUMENTS_TOOLS
    );
    let model = parley_testkit::model_dir().display().to_string();
    let settings = vec![
        ("DATABASE_URL", db.readonly_url.clone()),
        ("SQL_DATABASE_URL", sql_url.to_owned()),
        ("TOOLS_FILE", tools),
        ("EMBEDDINGS_MODEL_DIR", model),
        ("MCP_AUTH_TOKEN", MCP_TOKEN.to_owned()),
        ("MCP_CALLER_KEY", CALLER_KEY.to_owned()),
        ("LISTEN_ADDR", "127.0.0.1:0".to_owned()),
    ];
    let app = parley_mcp::Application::build(with(settings, changes))
        .await
        .unwrap_or_else(|e| panic!("the mcp function does not start: {e}"));
    let addr = app.local_addr().expect("bound outside Lambda");
    app.spawn().expect("serving plain HTTP");
    format!("http://{addr}/mcp")
}

/// The chat as scripts/dev serves it (`CHAT_AUTH=none`, the scripted model), over `db` and
/// the mcp function at `mcp_url`, with `changes` laid over those settings. Returns its base
/// URL (the page's), ending in `/`.
async fn chat(
    db: &TestDb,
    mcp_url: &str,
    llm: &ScriptedLlm,
    changes: &[(&str, Option<&str>)],
) -> String {
    let settings = vec![
        ("DATABASE_URL", db.url.clone()),
        ("CHAT_AUTH", "none".to_owned()),
        ("MCP_URL", mcp_url.to_owned()),
        ("MCP_AUTH_TOKEN", MCP_TOKEN.to_owned()),
        ("MCP_CALLER_KEY", CALLER_KEY.to_owned()),
        ("LLM_BASE_URL", llm.base_url()),
        ("LLM_API_KEY", "sk-test-not-a-real-key".to_owned()),
        ("LLM_MODEL", "scripted-model".to_owned()),
        ("LISTEN_ADDR", "127.0.0.1:0".to_owned()),
    ];
    let app = parley_chat::Application::build(with(settings, changes))
        .await
        .unwrap_or_else(|e| panic!("the chat function does not start: {e}"));
    let addr = app.local_addr().expect("bound outside Lambda");
    app.spawn().expect("serving plain HTTP");
    format!("http://{addr}/")
}

/// `settings` with `changes` applied: a value replaces or adds one, `None` removes it.
fn with(settings: Vec<(&str, String)>, changes: &[(&str, Option<&str>)]) -> Env {
    let mut pairs: Vec<(String, String)> = settings
        .into_iter()
        .filter(|(name, _)| !changes.iter().any(|(c, _)| c == name))
        .map(|(n, v)| (n.to_owned(), v))
        .collect();
    pairs.extend(
        changes
            .iter()
            .filter_map(|(name, value)| value.map(|v| ((*name).to_owned(), v.to_owned()))),
    );
    Env::from_pairs(pairs)
}

/// The scripted model: every request answered with [`REPLY`], written at [`PACE`].
async fn model() -> ScriptedLlm {
    let llm = ScriptedLlm::serve(Plan::Forever(Step::text(REPLY)), 0)
        .await
        .expect("the scripted model starts");
    llm.set_pace(PACE);
    llm
}

/// An OpenID provider's discovery document and keys, as Cognito publishes them; with
/// `document` false the document answers 404 (an issuer URL with a typo, a deleted pool).
async fn provider(document: bool) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let body = json!({
        "issuer": base,
        "authorization_endpoint": format!("{base}/oauth2/authorize"),
        "token_endpoint": format!("{base}/oauth2/token"),
        "jwks_uri": format!("{base}/jwks"),
        "code_challenge_methods_supported": ["S256"],
    });
    let app = Router::new()
        .route(
            "/.well-known/openid-configuration",
            get(move || async move {
                if document {
                    (StatusCode::OK, axum::Json(body)).into_response()
                } else {
                    StatusCode::NOT_FOUND.into_response()
                }
            }),
        )
        .route("/jwks", get(|| async { parley_testkit::keys::JWKS }));
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

/// The chat settings that make the page sign people in with the provider at `issuer`.
fn signing_in_with(issuer: &str) -> Vec<(&'static str, Option<String>)> {
    vec![
        ("CHAT_AUTH", None),
        ("JWT_SECRET", Some(JWT_SECRET.to_owned())),
        ("JWT_JWKS_URL", Some(format!("{issuer}/jwks"))),
        ("OIDC_ISSUER", Some(issuer.to_owned())),
        ("OIDC_CLIENT_ID", Some("parley-page".to_owned())),
    ]
}

fn borrowed<'a>(
    changes: &'a [(&'static str, Option<String>)],
) -> Vec<(&'static str, Option<&'a str>)> {
    changes.iter().map(|(n, v)| (*n, v.as_deref())).collect()
}

/// A signed-in user's access token, as the chat verifies it with `JWT_SECRET`.
fn user_token() -> String {
    let claims = json!({"sub": "check-user", "exp": get_current_timestamp() + 600});
    encode(
        &Header::default(),
        &claims,
        &EncodingKey::from_secret(JWT_SECRET.as_bytes()),
    )
    .expect("token")
}

/// What a front door in front of the chat does besides handing each answer on whole, as API
/// Gateway's HTTP API does.
#[derive(Clone, Copy)]
enum Door {
    /// Nothing else.
    Buffers,
    /// Answers 404 for this path (a route the front door lacks).
    Lacks(&'static str),
    /// Drops the Content-Security-Policy header (a CDN configured to).
    DropsThePolicy,
}

/// A front door to `upstream` (the chat's base URL): every request passed on, every answer
/// read whole before it is sent on. Returns its base URL.
async fn front_door(upstream: String, door: Door) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/", listener.local_addr().unwrap());
    let app = Router::new()
        .fallback(pass_on)
        .with_state((reqwest::Client::new(), upstream, door));
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

async fn pass_on(
    State((http, upstream, door)): State<(reqwest::Client, String, Door)>,
    request: Request,
) -> Response {
    let path = request
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    if matches!(door, Door::Lacks(lacking) if lacking == path) {
        return (StatusCode::NOT_FOUND, "{\"message\":\"Not Found\"}").into_response();
    }
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20)
        .await
        .expect("request body");
    let url = format!("{}{}", upstream.trim_end_matches('/'), path);
    let mut forward = http.request(parts.method, url).body(body);
    for (name, value) in &parts.headers {
        if name != header::HOST && name != header::CONTENT_LENGTH {
            forward = forward.header(name, value);
        }
    }
    let answer = forward
        .send()
        .await
        .expect("the chat answers the front door");
    let status = answer.status();
    let headers = answer.headers().clone();
    let whole = answer.bytes().await.expect("the chat's whole answer");
    let mut response = Response::builder().status(status);
    for (name, value) in &headers {
        let hop = [
            header::TRANSFER_ENCODING,
            header::CONTENT_LENGTH,
            header::CONNECTION,
        ];
        let dropped =
            matches!(door, Door::DropsThePolicy) && name == header::CONTENT_SECURITY_POLICY;
        if !hop.contains(name) && !dropped {
            response = response.header(name, value);
        }
    }
    response.body(Body::from(whole)).expect("a response")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_working_stack_passes_every_check_and_leaves_no_conversation_behind() {
    let (db, sql_url) = database().await;
    public_handbook(&db).await;
    let llm = model().await;
    let mcp_url = mcp(&db, &sql_url, &[]).await;
    let issuer = provider(true).await;
    let page = chat(&db, &mcp_url, &llm, &borrowed(&signing_in_with(&issuer))).await;
    let token = user_token();

    let report = check(
        &[&page, "--mcp", &mcp_url],
        &[("PARLEY_USER_TOKEN", &token), ("MCP_AUTH_TOKEN", MCP_TOKEN)],
    )
    .await;
    assert_eq!(report.code, Some(0), "{}", report.stdout);
    for name in [
        "page",
        "sign-in",
        "turn",
        "mcp-auth",
        "tools",
        "documents",
        "stream",
        "sql",
    ] {
        let line = report.line(name);
        assert_eq!(line.status, "ok", "{name}: {}", report.stdout);
        assert!(line.fix.is_none(), "{name}: {}", report.stdout);
    }
    assert!(
        report
            .line("page")
            .detail
            .contains(&format!("signs in with {issuer}"))
    );
    assert!(report.line("turn").detail.contains(REPLY));
    assert!(report.line("tools").detail.contains("search_documents"));
    let documents = report.line("documents").detail;
    assert!(
        documents.starts_with("search_documents answered") && !documents.contains(" 0 passages"),
        "{documents}"
    );
    assert!(report.line("sql").detail.contains("SELECT 1"));
    // The command measured the order a person sees: text before the turn is over.
    assert!(
        report.line("stream").detail.contains("first byte after"),
        "{}",
        report.stdout
    );
    assert!(
        report
            .stdout
            .ends_with("8 checks: 8 ok, 0 failed, 0 skipped\n")
    );

    // The same as JSON, for scripts; and the user's conversation list is as it was.
    let report = check(
        &[&page, "--mcp", &mcp_url, "--json", "--token", &token],
        &[("MCP_AUTH_TOKEN", MCP_TOKEN)],
    )
    .await;
    assert_eq!(report.code, Some(0), "{}", report.stdout);
    let checks: Vec<Value> = serde_json::from_str(&report.stdout).expect("a JSON array");
    assert_eq!(checks.len(), 8);
    for c in &checks {
        assert_eq!(c["status"], "ok", "{c}");
        assert_eq!(c["fix"], Value::Null, "{c}");
        assert!(c["detail"].as_str().is_some_and(|d| !d.is_empty()), "{c}");
    }
    let listed: Value = reqwest::Client::new()
        .get(format!("{page}api/conversations"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["conversations"], json!([]), "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_front_door_that_drops_an_asset_or_the_pages_policy_fails_the_page_check() {
    let (db, sql_url) = database().await;
    let llm = model().await;
    let mcp_url = mcp(&db, &sql_url, &[]).await;
    let page = chat(&db, &mcp_url, &llm, &[]).await;

    let door = front_door(page.clone(), Door::Lacks("/assets/page.js")).await;
    let report = check(
        &[&door, "--mcp", &mcp_url],
        &[("MCP_AUTH_TOKEN", MCP_TOKEN)],
    )
    .await;
    assert_eq!(report.code, Some(1));
    let (detail, fix) = report.failed("page");
    assert!(
        detail.contains("assets/page.js") && detail.contains("404"),
        "{detail}"
    );
    assert!(
        fix.contains("does not pass assets/page.js on to the chat function"),
        "{fix}"
    );
    // The page's settings still load, so the checks that need them run.
    let sign_in = report.line("sign-in");
    assert!(
        sign_in.detail.contains("CHAT_AUTH=none"),
        "{}",
        report.stdout
    );

    let door = front_door(page, Door::DropsThePolicy).await;
    let report = check(
        &[&door, "--mcp", &mcp_url],
        &[("MCP_AUTH_TOKEN", MCP_TOKEN)],
    )
    .await;
    assert_eq!(report.code, Some(1));
    let (detail, fix) = report.failed("page");
    assert!(
        detail.contains("without its Content-Security-Policy"),
        "{detail}"
    );
    assert!(fix.contains("drops the header"), "{fix}");
    // What does not depend on the page still runs.
    assert_eq!(report.line("turn").status, "ok", "{}", report.stdout);
    assert_eq!(report.line("tools").status, "ok", "{}", report.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_without_its_discovery_document_fails_sign_in_naming_oidc_issuer() {
    let (db, sql_url) = database().await;
    let llm = model().await;
    let mcp_url = mcp(&db, &sql_url, &[]).await;
    let issuer = provider(false).await;
    let page = chat(&db, &mcp_url, &llm, &borrowed(&signing_in_with(&issuer))).await;

    let report = check(
        &[&page, "--mcp", &mcp_url],
        &[
            ("PARLEY_USER_TOKEN", &user_token()),
            ("MCP_AUTH_TOKEN", MCP_TOKEN),
        ],
    )
    .await;
    assert_eq!(report.code, Some(1));
    assert_eq!(report.line("page").status, "ok", "{}", report.stdout);
    let (detail, fix) = report.failed("sign-in");
    assert!(
        detail.contains(&format!("{issuer}/.well-known/openid-configuration"))
            && detail.contains("404"),
        "{detail}"
    );
    assert!(fix.contains("OIDC_ISSUER"), "{fix}");
    assert!(fix.contains("Another sign-in provider"), "{fix}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_model_key_the_turn_check_says_the_key_is_missing_and_how_to_give_one() {
    let (db, sql_url) = database().await;
    let llm = model().await;
    let mcp_url = mcp(&db, &sql_url, &[]).await;
    // As `scripts/dev` runs without LLM_API_KEY: OpenAI's URL, no key.
    let page = chat(
        &db,
        &mcp_url,
        &llm,
        &[
            ("LLM_BASE_URL", None),
            ("LLM_API_KEY", None),
            ("LLM_MODEL", None),
        ],
    )
    .await;

    let report = check(
        &[&page, "--mcp", &mcp_url],
        &[("MCP_AUTH_TOKEN", MCP_TOKEN)],
    )
    .await;
    assert_eq!(report.code, Some(1));
    let (detail, fix) = report.failed("turn");
    assert!(detail.starts_with("the model key is missing"), "{detail}");
    assert!(fix.contains("LLM_API_KEY=sk-... scripts/dev"), "{fix}");
    assert!(fix.contains("PARLEY_LLM=stub scripts/dev"), "{fix}");
    // The stream cannot be measured without a model; it says why rather than failing twice.
    let stream = report.line("stream");
    assert_eq!(stream.status, "skip", "{}", report.stdout);
    assert!(
        stream.detail.contains("the model key is missing"),
        "{}",
        stream.detail
    );
    assert!(llm.requests().is_empty(), "no model was asked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_function_that_answers_calls_without_credentials_fails_naming_mcp_auth_token() {
    let (db, sql_url) = database().await;
    let llm = model().await;
    let mcp_url = mcp(&db, &sql_url, &[]).await;
    let page = chat(&db, &mcp_url, &llm, &[]).await;
    // scripts/dev's mcp function unless told otherwise: no service token, no user tokens.
    let open = mcp(&db, &sql_url, &[("MCP_AUTH_TOKEN", None)]).await;

    let report = check(&[&page, "--mcp", &open], &[]).await;
    assert_eq!(report.code, Some(1));
    let (detail, fix) = report.failed("mcp-auth");
    assert!(
        detail.contains("answered a call without credentials"),
        "{detail}"
    );
    assert!(
        fix.contains("MCP_AUTH_TOKEN=$(openssl rand -hex 32) scripts/dev"),
        "{fix}"
    );
    // Anyone may list its tools, so the checks that use them still run.
    assert_eq!(report.line("tools").status, "ok", "{}", report.stdout);
    assert_eq!(report.line("sql").status, "ok", "{}", report.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_token_the_mcp_function_refuses_fails_the_tools_check() {
    let (db, sql_url) = database().await;
    let llm = model().await;
    let mcp_url = mcp(&db, &sql_url, &[]).await;
    let page = chat(&db, &mcp_url, &llm, &[]).await;

    // A token from before the app secret was rotated.
    let report = check(
        &[
            &page,
            "--mcp",
            &mcp_url,
            "--mcp-token",
            "an-old-service-token",
        ],
        &[],
    )
    .await;
    assert_eq!(report.code, Some(1));
    assert_eq!(report.line("mcp-auth").status, "ok", "{}", report.stdout);
    let (detail, fix) = report.failed("tools");
    assert!(
        detail.contains("refused") && detail.contains("401"),
        "{detail}"
    );
    assert!(fix.contains("app secret's MCP_AUTH_TOKEN"), "{fix}");
    for name in ["documents", "sql"] {
        assert_eq!(report.line(name).status, "skip", "{}", report.stdout);
    }

    // Without any token, the tools cannot be listed: skipped, saying what to pass.
    let report = check(&[&page, "--mcp", &mcp_url], &[]).await;
    let tools = report.line("tools");
    assert_eq!(tools.status, "skip", "{}", report.stdout);
    assert!(tools.detail.contains("--mcp-token"), "{}", tools.detail);
    assert_eq!(report.code, Some(0), "skips are not failures");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_whose_embeddings_cannot_be_reached_fails_the_documents_check() {
    let (db, sql_url) = database().await;
    let llm = model().await;
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let nowhere = format!("http://{}/v1", closed.local_addr().unwrap());
    drop(closed);
    // An embeddings API the function has no way out to.
    let mcp_url = mcp(
        &db,
        &sql_url,
        &[
            ("EMBEDDINGS", Some("http")),
            ("EMBEDDINGS_URL", Some(&nowhere)),
            ("EMBEDDINGS_MODEL", Some("text-embedding-3-small")),
            ("EMBEDDINGS_DIMENSIONS", Some("384")),
            ("EMBEDDINGS_MAX_RETRIES", Some("0")),
        ],
    )
    .await;
    let page = chat(&db, &mcp_url, &llm, &[]).await;

    let report = check(
        &[&page, "--mcp", &mcp_url],
        &[("MCP_AUTH_TOKEN", MCP_TOKEN)],
    )
    .await;
    assert_eq!(report.code, Some(1));
    let (detail, fix) = report.failed("documents");
    assert!(
        detail.starts_with("search_documents answered an error"),
        "{detail}"
    );
    assert!(fix.contains("EMBEDDINGS_*"), "{fix}");
    assert_eq!(report.line("sql").status, "ok", "{}", report.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_front_door_that_buffers_fails_the_stream_check_naming_page_stream_url() {
    let (db, sql_url) = database().await;
    let llm = model().await;
    let mcp_url = mcp(&db, &sql_url, &[]).await;
    let page = chat(&db, &mcp_url, &llm, &[]).await;
    let door = front_door(page, Door::Buffers).await;

    let report = check(
        &[&door, "--mcp", &mcp_url],
        &[("MCP_AUTH_TOKEN", MCP_TOKEN)],
    )
    .await;
    assert_eq!(report.code, Some(1));
    assert_eq!(report.line("turn").status, "ok", "{}", report.stdout);
    let (detail, fix) = report.failed("stream");
    assert!(detail.contains("the answer came whole"), "{detail}");
    assert!(fix.contains("PAGE_STREAM_URL"), "{fix}");
    assert!(fix.contains("Streaming chat turns"), "{fix}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_tools_whose_database_login_is_gone_fail_the_sql_check() {
    let (db, sql_url) = database().await;
    let llm = model().await;
    let (proxy, through_proxy) = TcpProxy::in_front_of(&sql_url).await;
    let mcp_url = mcp(&db, &through_proxy, &[]).await;
    let page = chat(&db, &mcp_url, &llm, &[]).await;
    // The SQL login's database goes away after start-up (its connections cut, its port closed).
    proxy.sever();
    drop(proxy);

    let report = check(
        &[&page, "--mcp", &mcp_url],
        &[("MCP_AUTH_TOKEN", MCP_TOKEN)],
    )
    .await;
    assert_eq!(report.code, Some(1));
    let (detail, fix) = report.failed("sql");
    assert!(detail.starts_with("run_sql answered an error"), "{detail}");
    assert!(fix.contains("SQL_DATABASE_URL"), "{fix}");
    // No collection is public here: the search says so, which is an answer.
    let documents = report.line("documents");
    assert_eq!(documents.status, "ok", "{}", report.stdout);
    assert!(
        documents.detail.contains("may read no collection"),
        "{}",
        documents.detail
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_listening_fails_the_page_and_mcp_checks_with_the_command_to_start_it() {
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let nowhere = format!("http://{}/", closed.local_addr().unwrap());
    drop(closed);
    let report = check(&[&nowhere, "--mcp", &format!("{nowhere}mcp")], &[]).await;
    assert_eq!(report.code, Some(1));
    let (detail, fix) = report.failed("page");
    assert!(detail.starts_with("nothing answers at"), "{detail}");
    assert!(fix.contains("scripts/dev"), "{fix}");
    let (_, fix) = report.failed("mcp-auth");
    assert!(fix.contains("scripts/dev"), "{fix}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stack_that_never_answers_fails_each_check_at_its_timeout() {
    // Accepts connections and never answers, as a function stuck at start-up behind its URL.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent = format!("http://{}/", listener.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((connection, _)) = listener.accept().await {
            open.push(connection);
        }
    });
    let report = check(
        &[&silent, "--mcp", &format!("{silent}mcp"), "--timeout", "1"],
        &[],
    )
    .await;
    held.abort();
    assert_eq!(report.code, Some(1));
    for name in ["page", "turn", "mcp-auth"] {
        let (detail, fix) = report.failed(name);
        assert_eq!(detail, "no answer within 1 s (--timeout)");
        assert!(fix.contains("raise --timeout"), "{fix}");
    }
}
