//! The mcp function as the walkthroughs and `parley search`'s tests meet it: started in the
//! test on its `scripts/dev` login and the tools files given, its tools called over HTTP by a
//! signed-in user. Included by path (`#[path = "common/mcp.rs"]`) by the tests that use it.

use jsonwebtoken::{Algorithm, EncodingKey, Header, encode, get_current_timestamp};
use parley_core::config::Env;
use parley_mcp::Application;
use parley_testkit::TestDb;
use serde_json::{Value, json};

/// User tokens for [`Mcp::rows`] are signed with this (HS256).
const SECRET: &str = "a-walkthrough-test-secret-of-32-bytes-or-more";

/// The mcp function, served as `scripts/dev` serves it: its login `parley_mcp`, the tools
/// files given, with user tokens signed by [`SECRET`].
pub struct Mcp {
    url: String,
    http: reqwest::Client,
}

impl Mcp {
    /// Starts it on `tools`: each tools file is read and every statement prepared against
    /// `db`, else the test fails with the start-up error a reader would see.
    pub async fn start(db: &TestDb, tools: &[String]) -> Mcp {
        let mut login = url::Url::parse(&db.url).unwrap();
        login.set_username(MCP_LOGIN).unwrap();
        login.set_password(Some(MCP_LOGIN)).unwrap();
        let env = Env::from_pairs([
            ("DATABASE_URL", login.to_string()),
            ("TOOLS_FILE", tools.join(",")),
            (
                "EMBEDDINGS_MODEL_DIR",
                parley_testkit::model_dir().display().to_string(),
            ),
            (
                "MCP_AUTH_TOKEN",
                "walkthrough-service-token-0123456789".into(),
            ),
            ("JWT_SECRET", SECRET.into()),
            ("MCP_RESOURCE_URL", "http://127.0.0.1/mcp".into()),
            ("LISTEN_ADDR", "127.0.0.1:0".into()),
        ]);
        let app = Application::build(env).await.unwrap_or_else(|e| {
            panic!(
                "the mcp function does not start on {}: {e}",
                tools.join(",")
            )
        });
        let addr = app.local_addr().expect("bound outside Lambda");
        app.spawn().expect("serving plain HTTP");
        Mcp {
            url: format!("http://{addr}/mcp"),
            http: reqwest::Client::new(),
        }
    }

    /// The rows of `tool` called by user `sub`, after checking it was no tool error.
    pub async fn rows(&self, sub: &str, tool: &str, arguments: Value) -> Vec<Value> {
        let claims = json!({"sub": sub, "exp": get_current_timestamp() + 600});
        let token = encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(SECRET.as_bytes()),
        )
        .expect("token");
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                          "params": {"name": tool, "arguments": arguments}});
        let response = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .bearer_auth(token)
            .body(body.to_string())
            .send()
            .await
            .expect("request sent");
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.expect("JSON body");
        let result = &body["result"];
        assert_eq!(result["isError"], false, "{tool}: {body}");
        result["structuredContent"]["rows"]
            .as_array()
            .unwrap_or_else(|| panic!("{tool}: no rows in {body}"))
            .clone()
    }
}

/// `scripts/dev`'s login for the mcp function, which a walkthrough may grant roles to: made
/// and granted as `scripts/dev` makes it (roles are cluster-wide, so it may exist already),
/// the tasks domain's writer role included when the domain is loaded: the mcp function checks
/// at start-up that its login may take each tool's role.
pub const MCP_LOGIN: &str = "parley_mcp";

pub async fn scripts_dev_login(db: &TestDb) {
    db.client()
        .await
        .batch_execute(&format!(
            "SET client_min_messages = warning;
             DO $$ BEGIN
                 IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = '{MCP_LOGIN}') THEN
                     CREATE ROLE {MCP_LOGIN} LOGIN PASSWORD '{MCP_LOGIN}' IN ROLE parley_readonly;
                 END IF;
             EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
             END $$;
             GRANT parley_readonly TO {MCP_LOGIN};
             DO $$ BEGIN
                 IF EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'parley_tasks_writer') THEN
                     GRANT parley_tasks_writer TO {MCP_LOGIN} WITH INHERIT FALSE, SET TRUE;
                 END IF;
             END $$;"
        ))
        .await
        .expect("scripts/dev's login");
}
