//! Tools that act for the signed-in user: caller-bound parameters, row-level security over
//! `parley.caller`, exactly-once writes under an idempotency key, and the prompts and
//! instructions a tools file declares. A test schema of notes owned by users stands in for a
//! team's own data; it is declared here, as a team would write it.

use jsonwebtoken::{Algorithm, EncodingKey, Header, encode, get_current_timestamp};
use parley_testkit::{TcpProxy, TestDb};
use serde_json::{Value, json};

use crate::helpers::{Options, TOKEN, TestApp, env, spawn_on};

const SECRET: &str = "a-test-secret-that-is-at-least-32-bytes-long";
const WRITER: &str = "parley_test_notes_writer";

/// Notes owned by users, protected by row-level security on `parley.caller_sub()`.
const SCHEMA: &str = "
CREATE TABLE notes (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    owner text NOT NULL DEFAULT parley.caller_sub(),
    body text NOT NULL,
    tags text[] NOT NULL DEFAULT '{}'
);
ALTER TABLE notes ENABLE ROW LEVEL SECURITY;
ALTER TABLE notes FORCE ROW LEVEL SECURITY;
CREATE POLICY own_notes ON notes
    USING (owner = parley.caller_sub()) WITH CHECK (owner = parley.caller_sub());
GRANT SELECT ON notes TO parley_readonly;
INSERT INTO notes (owner, body) VALUES ('alice', 'a1'), ('alice', 'a2'), ('bob', 'b1');
";

const TOOLS: &str = r#"
instructions = "Notes belong to the person asking; never guess another person's notes."

[[tool]]
name = "my_notes"
description = "Lists the caller's notes."
context = { note = "body" }
sql = "SELECT id, owner, body FROM notes WHERE owner = :owner AND (:body IS NULL OR body = :body) ORDER BY id"
[tool.params.owner]
from = "caller.sub"
[tool.params.body]
type = "string"

[[tool]]
name = "all_notes"
description = "Lists notes with no owner filter: row-level security is all that scopes it."
sql = "SELECT id, owner, body FROM notes ORDER BY id"

[[tool]]
name = "org_of_caller"
description = "Echoes the caller's organisation claim."
sql = "SELECT :org AS org"
[tool.params.org]
from = "caller.claims.org_id"

[[tool]]
name = "add_note"
description = "Adds a note for the caller."
writes = true
destructive = false
role = "parley_test_notes_writer"
timeout_hint = "a shorter note"
sql = "INSERT INTO notes (owner, body, tags) VALUES (:owner, :body, coalesce(:tags, '{}')) RETURNING id, owner, body, tags"
[tool.params.owner]
from = "caller.sub"
[tool.params.body]
type = "string"
required = true
min_length = 1
[tool.params.tags]
type = "string_array"
max_items = 3

[[prompt]]
name = "summarise"
title = "Summarise my notes"
description = "Summarise the caller's notes about a topic"
text = "Summarise my notes about {{topic}}{{style}}."
[prompt.arguments.topic]
description = "what the notes are about"
required = true
[prompt.arguments.style]
description = "how to write it, e.g. ' in one line'"
"#;

/// `Accept` with weights: the direct path leaves such requests to rmcp's transport.
const VIA_RMCP: &str = "application/json;q=1, text/event-stream;q=1";
/// `Accept` as ordinary clients send it: `tools/call` and `tools/list` take the direct path.
const DIRECT: &str = "application/json, text/event-stream";

async fn spawn_notes() -> TestApp {
    spawn_notes_on(notes_db().await, None, Vec::new()).await
}

/// A fresh database with the notes schema and its write role.
async fn notes_db() -> TestDb {
    let db = TestDb::migrated().await;
    db.writer_role(
        WRITER,
        &format!(
            "{SCHEMA}
             GRANT SELECT, INSERT ON notes TO {WRITER};
             GRANT USAGE ON SEQUENCE notes_id_seq TO {WRITER};"
        ),
    )
    .await;
    db
}

/// The notes tools over `db`, with user tokens; `database_url` replaces the read-only login's.
async fn spawn_notes_on(
    db: TestDb,
    database_url: Option<String>,
    extra: Vec<(String, String)>,
) -> TestApp {
    let mut extra_env = env(&[
        ("JWT_SECRET", SECRET),
        ("MCP_RESOURCE_URL", "http://127.0.0.1/mcp"),
    ]);
    extra_env.extend(extra);
    spawn_on(
        db,
        Options {
            tools_toml: Some(TOOLS.into()),
            database_url,
            extra_env,
            ..Options::default()
        },
    )
    .await
    .expect("the MCP function starts")
}

fn user(sub: &str, extra: Value) -> String {
    let mut claims = json!({"sub": sub, "exp": get_current_timestamp() + 600});
    for (k, v) in extra.as_object().into_iter().flatten() {
        claims[k] = v.clone();
    }
    encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

/// One JSON-RPC request as `token`; `accept` picks the direct path or rmcp's. Returns the
/// JSON-RPC body.
async fn rpc(app: &TestApp, token: &str, accept: &str, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let authorization = format!("Bearer {token}");
    let response = app
        .post_mcp(
            body.to_string(),
            &[("accept", accept), ("authorization", &authorization)],
        )
        .await;
    assert_eq!(response.status(), 200);
    response.json().await.expect("JSON body")
}

/// A `tools/call` through the direct path with `_meta` `meta`; returns the `result`.
async fn call_as(app: &TestApp, token: &str, tool: &str, args: Value, meta: Value) -> Value {
    let mut params = json!({"name": tool, "arguments": args});
    if !meta.is_null() {
        params["_meta"] = meta;
    }
    let body = rpc(app, token, DIRECT, "tools/call", params).await;
    body["result"].clone()
}

fn rows(result: &Value) -> Value {
    assert_eq!(result["isError"], false, "{result}");
    result["structuredContent"]["rows"].clone()
}

fn error(result: &Value) -> String {
    assert_eq!(result["isError"], true, "{result}");
    result["content"][0]["text"].as_str().unwrap().to_owned()
}

async fn count_notes(app: &TestApp, body: &str) -> i64 {
    app.sql_one(&format!("SELECT count(*) FROM notes WHERE body = '{body}'"))
        .await
        .get(0)
}

fn bodies(rows: &Value) -> Vec<&str> {
    rows.as_array()
        .unwrap()
        .iter()
        .map(|r| r["body"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn two_users_each_see_only_their_own_rows() {
    let app = spawn_notes().await;
    let (alice, bob) = (user("alice", json!({})), user("bob", json!({})));
    let mine = rows(&call_as(&app, &alice, "my_notes", json!({}), Value::Null).await);
    assert_eq!(bodies(&mine), ["a1", "a2"]);
    assert!(
        mine.as_array()
            .unwrap()
            .iter()
            .all(|r| r["owner"] == "alice")
    );
    let theirs = rows(&call_as(&app, &bob, "my_notes", json!({}), Value::Null).await);
    assert_eq!(bodies(&theirs), ["b1"]);
    // Alice cannot reach Bob's note even by naming it.
    let named = rows(&call_as(&app, &alice, "my_notes", json!({"body": "b1"}), Value::Null).await);
    assert_eq!(named, json!([]));
}

#[tokio::test]
async fn an_argument_naming_the_owner_is_refused() {
    let app = spawn_notes().await;
    let alice = user("alice", json!({}));
    let message = error(
        &call_as(
            &app,
            &alice,
            "my_notes",
            json!({"owner": "bob"}),
            Value::Null,
        )
        .await,
    );
    assert_eq!(
        message,
        "invalid arguments: parameter `owner` is set from the caller's identity and cannot be \
         passed as an argument"
    );
    let message = error(
        &call_as(
            &app,
            &alice,
            "add_note",
            json!({"owner": "bob", "body": "x"}),
            Value::Null,
        )
        .await,
    );
    assert!(
        message.contains("set from the caller's identity"),
        "{message}"
    );
    assert_eq!(count_notes(&app, "x").await, 0);
}

#[tokio::test]
async fn a_tool_without_an_owner_filter_still_returns_only_the_callers_rows() {
    let app = spawn_notes().await;
    let alice = rows(
        &call_as(
            &app,
            &user("alice", json!({})),
            "all_notes",
            json!({}),
            Value::Null,
        )
        .await,
    );
    assert_eq!(bodies(&alice), ["a1", "a2"]);
    let bob = rows(
        &call_as(
            &app,
            &user("bob", json!({})),
            "all_notes",
            json!({}),
            Value::Null,
        )
        .await,
    );
    assert_eq!(bodies(&bob), ["b1"]);
    // The service carries no user: row-level security shows it nothing.
    let service = rows(&call_as(&app, TOKEN, "all_notes", json!({}), Value::Null).await);
    assert_eq!(service, json!([]));
}

#[tokio::test]
async fn the_service_token_cannot_call_a_caller_bound_tool_and_a_missing_claim_is_named() {
    let app = spawn_notes().await;
    let message = error(&call_as(&app, TOKEN, "my_notes", json!({}), Value::Null).await);
    assert_eq!(
        message,
        "`my_notes` acts for a signed-in user and this request carries no user token"
    );
    let message = error(
        &call_as(
            &app,
            TOKEN,
            "add_note",
            json!({"body": "from the service"}),
            Value::Null,
        )
        .await,
    );
    assert!(message.contains("carries no user token"), "{message}");

    let message = error(
        &call_as(
            &app,
            &user("alice", json!({})),
            "org_of_caller",
            json!({}),
            Value::Null,
        )
        .await,
    );
    assert_eq!(
        message,
        "`org_of_caller` needs the caller's `org_id` claim, which the token does not have"
    );
    let org = rows(
        &call_as(
            &app,
            &user("alice", json!({"org_id": "acme"})),
            "org_of_caller",
            json!({}),
            Value::Null,
        )
        .await,
    );
    assert_eq!(org, json!([{"org": "acme"}]));
}

#[tokio::test]
async fn a_keyed_write_sent_twice_writes_once_and_returns_the_same_result() {
    let app = spawn_notes().await;
    let alice = user("alice", json!({}));
    let args = json!({"body": "renew passport", "tags": ["home", "admin"]});
    let key = json!({"parley/idempotency_key": "turn-1:call-1"});
    let first = call_as(&app, &alice, "add_note", args.clone(), key.clone()).await;
    let written = rows(&first);
    assert_eq!(written[0]["owner"], "alice");
    assert_eq!(written[0]["tags"], json!(["home", "admin"]));
    let again = call_as(&app, &alice, "add_note", args.clone(), key.clone()).await;
    assert_eq!(again, first, "the repeat returns the first result exactly");
    assert_eq!(count_notes(&app, "renew passport").await, 1);

    // Two other keys: two more writes, each its own row.
    for k in ["turn-1:call-2", "turn-2:call-1"] {
        let out = rows(
            &call_as(
                &app,
                &alice,
                "add_note",
                args.clone(),
                json!({"parley/idempotency_key": k}),
            )
            .await,
        );
        assert_ne!(out[0]["id"], written[0]["id"]);
    }
    assert_eq!(count_notes(&app, "renew passport").await, 3);

    // Keys are per caller: Bob's first use of Alice's key writes Bob's note.
    let bob = rows(&call_as(&app, &user("bob", json!({})), "add_note", args.clone(), key).await);
    assert_eq!(bob[0]["owner"], "bob");
    assert_eq!(count_notes(&app, "renew passport").await, 4);
    let recorded: i64 = app
        .sql_one("SELECT count(*) FROM parley.idempotency WHERE tool = 'add_note'")
        .await
        .get(0);
    assert_eq!(recorded, 4);
}

#[tokio::test]
async fn a_keyed_write_is_retried_on_a_connection_that_died_idle_and_an_unkeyed_one_is_not() {
    let db = notes_db().await;
    let (proxy, url) = TcpProxy::in_front_of(&db.readonly_url).await;
    // The audit writer shares the one pooled connection and could be the one to find it dead.
    let app = spawn_notes_on(
        db,
        Some(url),
        env(&[("DB_POOL_MAX_SIZE", "1"), ("AUDIT", "off")]),
    )
    .await;
    let alice = user("alice", json!({}));
    let warm = async || rows(&call_as(&app, &alice, "my_notes", json!({}), Value::Null).await);

    warm().await;
    proxy.sever();
    let args = json!({"body": "after the freeze"});
    let message = error(&call_as(&app, &alice, "add_note", args.clone(), Value::Null).await);
    assert!(message.contains("database is unavailable"), "{message}");
    assert_eq!(count_notes(&app, "after the freeze").await, 0);

    warm().await;
    proxy.sever();
    let key = json!({"parley/idempotency_key": "thaw-1"});
    let written = rows(&call_as(&app, &alice, "add_note", args, key).await);
    assert_eq!(written[0]["owner"], "alice");
    assert_eq!(count_notes(&app, "after the freeze").await, 1);
}

#[tokio::test]
async fn a_malformed_idempotency_key_is_a_tool_error_and_nothing_is_written() {
    let app = spawn_notes().await;
    let alice = user("alice", json!({}));
    for bad in [
        json!(""),
        json!("x".repeat(256)),
        json!(7),
        json!("tab\there"),
    ] {
        let message = error(
            &call_as(
                &app,
                &alice,
                "add_note",
                json!({"body": "never"}),
                json!({"parley/idempotency_key": bad}),
            )
            .await,
        );
        assert!(message.contains("parley/idempotency_key"), "{message}");
    }
    assert_eq!(count_notes(&app, "never").await, 0);
}

#[tokio::test]
async fn a_user_token_reaches_a_caller_bound_tool_through_rmcps_path_too() {
    let app = spawn_notes().await;
    let bob = user("bob", json!({}));
    let body = rpc(
        &app,
        &bob,
        VIA_RMCP,
        "tools/call",
        json!({"name": "my_notes", "arguments": {}}),
    )
    .await;
    assert_eq!(bodies(&rows(&body["result"])), ["b1"]);
    // The key travels in `_meta`, which rmcp keeps apart from the params.
    let keyed = json!({"name": "add_note", "arguments": {"body": "via rmcp"},
                       "_meta": {"parley/idempotency_key": "rmcp-1"}});
    let first = rpc(&app, &bob, VIA_RMCP, "tools/call", keyed.clone()).await;
    let again = rpc(&app, &bob, VIA_RMCP, "tools/call", keyed).await;
    assert_eq!(rows(&first["result"])[0]["owner"], "bob");
    assert_eq!(again["result"], first["result"]);
    assert_eq!(count_notes(&app, "via rmcp").await, 1);
    let service = rpc(
        &app,
        TOKEN,
        VIA_RMCP,
        "tools/call",
        json!({"name": "my_notes", "arguments": {}}),
    )
    .await;
    assert!(error(&service["result"]).contains("carries no user token"));
}

#[tokio::test]
async fn tools_list_hides_caller_bound_parameters_and_publishes_context_and_keys() {
    let app = spawn_notes().await;
    let listed = rpc(&app, TOKEN, DIRECT, "tools/list", json!({})).await;
    let tools = listed["result"]["tools"].as_array().unwrap();
    let tool = |name: &str| tools.iter().find(|t| t["name"] == name).unwrap().clone();
    let my_notes = tool("my_notes");
    assert_eq!(
        my_notes["inputSchema"]["properties"],
        json!({"body": {"type": "string"}})
    );
    assert_eq!(
        my_notes["_meta"],
        json!({"parley/context": {"note": "body"}})
    );
    let add = tool("add_note");
    assert_eq!(add["inputSchema"]["required"], json!(["body"]));
    assert_eq!(
        add["inputSchema"]["properties"]["tags"],
        json!({"type": "array", "items": {"type": "string"}, "maxItems": 3})
    );
    assert_eq!(add["_meta"], json!({"parley/idempotency_key": true}));
    assert_eq!(add["annotations"]["readOnlyHint"], false);
    assert!(tool("all_notes").get("_meta").is_none());
}

#[tokio::test]
async fn prompts_are_listed_and_rendered_with_their_arguments() {
    let app = spawn_notes().await;
    let client = app.client().await;
    let info = client.peer_info().expect("initialized");
    assert!(info.capabilities.prompts.is_some());
    let instructions = info.instructions.clone().unwrap_or_default();
    assert!(
        instructions.starts_with("Parley answers over a Postgres database"),
        "{instructions}"
    );
    assert!(
        instructions.ends_with(
            "\n\nNotes belong to the person asking; never guess another person's notes."
        ),
        "{instructions}"
    );
    for word in ["district", "categor"] {
        assert!(!instructions.contains(word), "{instructions}");
    }

    let prompts = client.list_all_prompts().await.expect("prompts/list");
    assert_eq!(prompts.len(), 1);
    let listed = serde_json::to_value(&prompts[0]).unwrap();
    assert_eq!(
        listed,
        json!({
            "name": "summarise",
            "title": "Summarise my notes",
            "description": "Summarise the caller's notes about a topic",
            "arguments": [
                {"name": "style", "description": "how to write it, e.g. ' in one line'", "required": false},
                {"name": "topic", "description": "what the notes are about", "required": true}
            ]
        })
    );

    let got = rpc(
        &app,
        TOKEN,
        DIRECT,
        "prompts/get",
        json!({"name": "summarise", "arguments": {"topic": "travel"}}),
    )
    .await;
    assert_eq!(
        got["result"]["messages"],
        json!([{"role": "user", "content": {"type": "text", "text": "Summarise my notes about travel."}}])
    );
    assert_eq!(
        got["result"]["description"],
        "Summarise the caller's notes about a topic"
    );
    let got = rpc(
        &app,
        TOKEN,
        DIRECT,
        "prompts/get",
        json!({"name": "summarise", "arguments": {"topic": "travel", "style": " in one line"}}),
    )
    .await;
    assert_eq!(
        got["result"]["messages"][0]["content"]["text"],
        "Summarise my notes about travel in one line."
    );

    for (arguments, why) in [
        (json!({}), "needs the argument `topic`"),
        (
            json!({"topic": "x", "tone": "y"}),
            "takes no argument `tone`",
        ),
        (json!({"topic": 5}), "must be a string"),
    ] {
        let refused = rpc(
            &app,
            TOKEN,
            DIRECT,
            "prompts/get",
            json!({"name": "summarise", "arguments": arguments}),
        )
        .await;
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.contains(why), "{why}: {message}");
    }
    let unknown = rpc(&app, TOKEN, DIRECT, "prompts/get", json!({"name": "nope"})).await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
}

#[tokio::test]
async fn tool_and_prompt_names_must_be_unique_across_tools_files() {
    let dir = tempfile::tempdir().unwrap();
    let one = dir.path().join("one.toml");
    let two = dir.path().join("two.toml");
    let tool = "[[tool]]\nname = \"same\"\ndescription = \"d\"\nsql = \"SELECT 1 AS one\"\n";
    std::fs::write(&one, tool).unwrap();
    std::fs::write(&two, tool.replace("SELECT 1 AS one", "SELECT 2 AS two")).unwrap();
    let files = format!("{},{}", one.display(), two.display());
    let err = spawn_on(
        TestDb::migrated().await,
        Options {
            extra_env: env(&[("TOOLS_FILE", &files)]),
            ..Options::default()
        },
    )
    .await
    .err()
    .expect("start-up refused");
    assert!(
        err.contains(&format!(
            "tool `same` is declared in both {} and {}",
            one.display(),
            two.display()
        )),
        "{err}"
    );

    // Different names merge: both files' tools are served.
    std::fs::write(&two, tool.replace("same", "other")).unwrap();
    let app = spawn_on(
        TestDb::migrated().await,
        Options {
            extra_env: env(&[("TOOLS_FILE", &files)]),
            ..Options::default()
        },
    )
    .await
    .expect("starts");
    let (_, listed) = app.rpc("tools/list", json!({})).await;
    assert_eq!(listed["result"]["tools"].as_array().unwrap().len(), 2);
}

/// The code blocks of docs/tools.md's "your own data" walk-through, as written there.
fn readme_walkthrough() -> (String, String) {
    let readme = include_str!("../../../../docs/tools.md");
    let section = readme
        .split("\n## Walkthrough: your own data")
        .nth(1)
        .expect("docs/tools.md has the section `## Walkthrough: your own data`");
    let block = |lang: &str| {
        let start = section
            .find(&format!("```{lang}\n"))
            .unwrap_or_else(|| panic!("a ```{lang} block in the walk-through"))
            + lang.len()
            + 4;
        let end = section[start..].find("```").expect("the block ends") + start;
        section[start..end].to_owned()
    };
    (block("sql"), block("toml"))
}

#[tokio::test]
async fn the_readme_walkthrough_works_as_written() {
    let (sql, tools) = readme_walkthrough();
    // The two cluster-wide statements are the test kit's to run (its login is not
    // `parley_mcp`, and roles outlive the test database); the rest runs verbatim.
    let role = "CREATE ROLE shop_orders_writer NOLOGIN IN ROLE parley_tool_writer;";
    let grant = "GRANT shop_orders_writer TO parley_mcp WITH INHERIT FALSE, SET TRUE;";
    assert!(sql.contains(role) && sql.contains(grant), "{sql}");
    let schema = sql.replace(role, "").replace(grant, "");
    let db = TestDb::migrated().await;
    db.writer_role("shop_orders_writer", &schema).await;
    db.client()
        .await
        .batch_execute(
            "INSERT INTO orders (customer, item) VALUES ('alice', 'lamp'), ('bob', 'chair')",
        )
        .await
        .expect("orders");
    let app = spawn_on(
        db,
        Options {
            tools_toml: Some(tools),
            extra_env: env(&[
                ("JWT_SECRET", SECRET),
                ("MCP_RESOURCE_URL", "http://127.0.0.1/mcp"),
            ]),
            ..Options::default()
        },
    )
    .await
    .expect("the walk-through's tools start");
    let (alice, bob) = (user("alice", json!({})), user("bob", json!({})));

    let mine = rows(&call_as(&app, &alice, "my_orders", json!({}), Value::Null).await);
    assert_eq!(mine.as_array().unwrap().len(), 1, "{mine}");
    assert_eq!(mine[0]["item"], "lamp");
    let lamp = mine[0]["id"].clone();
    // Bob cannot cancel Alice's order, nor name himself as her.
    let refused =
        rows(&call_as(&app, &bob, "cancel_order", json!({"id": lamp}), Value::Null).await);
    assert_eq!(refused, json!([]));
    let forged =
        error(&call_as(&app, &bob, "my_orders", json!({"me": "alice"}), Value::Null).await);
    assert!(forged.contains("`me`"), "{forged}");
    let cancelled = rows(
        &call_as(
            &app,
            &alice,
            "cancel_order",
            json!({"id": lamp}),
            Value::Null,
        )
        .await,
    );
    assert_eq!(cancelled[0]["status"], "cancelled");
    // The service token carries no user.
    let service = error(&call_as(&app, TOKEN, "my_orders", json!({}), Value::Null).await);
    assert!(service.contains("signed-in user"), "{service}");
}

#[tokio::test]
async fn a_subject_with_quotes_and_backslashes_reaches_postgres_exactly() {
    let app = spawn_notes().await;
    let odd = r#"o'brien\'); SELECT 1; --\\"#;
    let token = user(odd, json!({"org_id": "it's \\ fine"}));
    let added = rows(
        &call_as(
            &app,
            &token,
            "add_note",
            json!({"body": "odd"}),
            Value::Null,
        )
        .await,
    );
    assert_eq!(added[0]["owner"], odd);
    // Row-level security compares parley.caller_sub() with the stored owner: it must be the
    // same string, byte for byte.
    let seen = rows(&call_as(&app, &token, "all_notes", json!({}), Value::Null).await);
    assert_eq!(bodies(&seen), ["odd"]);
    let org = rows(&call_as(&app, &token, "org_of_caller", json!({}), Value::Null).await);
    assert_eq!(org[0]["org"], "it's \\ fine");
}
