//! Settings from Secrets Manager (a local moto server): the function starts from an RDS-format
//! database secret and an application secret, and keeps serving when the database password or
//! the bearer token is rotated mid-run, without a restart.

use parley_testkit::{Moto, TestCluster, TestDb};
use serde_json::{Value, json};

use crate::helpers::{FEEDBACK_ROWS, FEEDBACK_TOOLS_FILE, TestApp, spawn_with_secrets};

/// A login role of its own, so the test can change its password; in `parley_readonly`, as the
/// deployed mcp function's role is.
const ROLE: &str = "parley_rotating";
/// Both carry characters that must be percent-encoded in a URL.
const OLD_PASSWORD: &str = "old@pass/word:1?";
const NEW_PASSWORD: &str = "new@pass/word:2?";
const OLD_TOKEN: &str = "old-token-0123456789abcdef";
const NEW_TOKEN: &str = "new-token-fedcba9876543210";

fn rds_secret(host: &str, port: u16, username: &str, password: &str, dbname: &str) -> Value {
    json!({"engine": "postgres", "host": host, "port": port, "username": username,
           "password": password, "dbname": dbname, "dbInstanceIdentifier": "parley-test"})
}

/// What `main` would see: moto's endpoint and dummy credentials, `SECRET_IDS`, and a refresh
/// limit of zero so each refused credential fetches again (the default waits 30 s).
fn secrets_env(moto: &Moto, ids: &[&str]) -> Vec<(String, String)> {
    let mut env = moto.env();
    env.extend([
        ("SECRET_IDS".to_owned(), ids.join(",")),
        ("SECRETS_MIN_REFRESH_MS".to_owned(), "0".to_owned()),
        // The test servers speak plain TCP; deployments keep the verify-full default.
        ("DB_SSLMODE".to_owned(), "disable".to_owned()),
        ("TOOLS_FILE".to_owned(), FEEDBACK_TOOLS_FILE.to_owned()),
    ]);
    env
}

async fn lad(app: &TestApp, token: &str) -> (u16, Value) {
    app.rpc_with(
        Some(token),
        "tools/call",
        json!({"name": "lad_by_ref", "arguments": {"ref": "Bristol"}}),
    )
    .await
}

fn assert_bristol(status: u16, body: &Value) {
    assert_eq!(status, 200, "{body}");
    let result = &body["result"];
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(
        result["structuredContent"]["rows"][0]["code"], "E06000023",
        "{result}"
    );
}

#[tokio::test]
async fn a_database_password_rotated_mid_run_is_fetched_again_and_calls_keep_working() {
    let cluster = TestCluster::start_with_passwords();
    let db = TestDb::with_demo_data_on(&cluster.url(), FEEDBACK_ROWS).await;
    let admin = db.client().await;
    admin
        .batch_execute(&format!(
            "CREATE ROLE {ROLE} LOGIN PASSWORD '{OLD_PASSWORD}' IN ROLE parley_readonly"
        ))
        .await
        .expect("create the login role");
    let moto = Moto::start();
    let db_secret = moto
        .create_secret(
            "parley/mcp/db",
            &rds_secret("127.0.0.1", cluster.port(), ROLE, OLD_PASSWORD, &db.name),
        )
        .await;
    let app_secret = moto
        .create_secret("parley/app", &json!({"MCP_AUTH_TOKEN": OLD_TOKEN}))
        .await;
    let app = spawn_with_secrets(
        db.clone(),
        secrets_env(&moto, &[&db_secret, &app_secret]),
        Some(OLD_TOKEN.to_owned()),
    )
    .await
    .expect("the function starts from its secrets");
    let (status, body) = lad(&app, OLD_TOKEN).await;
    assert_bristol(status, &body);

    // A rotation as Secrets Manager's single-user rotation leaves it: the role has the new
    // password, the secret holds it, and the connections made with the old one are gone.
    admin
        .batch_execute(&format!("ALTER ROLE {ROLE} PASSWORD '{NEW_PASSWORD}'"))
        .await
        .expect("change the password");
    moto.put_secret(
        &db_secret,
        &rds_secret("127.0.0.1", cluster.port(), ROLE, NEW_PASSWORD, &db.name),
    )
    .await;
    let terminated: i64 = admin
        .query_one(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE usename = $1) AS t",
            &[&ROLE],
        )
        .await
        .expect("terminate the role's connections")
        .get(0);
    assert!(terminated >= 1, "the function held a connection as {ROLE}");

    let (status, body) = lad(&app, OLD_TOKEN).await;
    assert_bristol(status, &body);
    let health = app.get("/health").await;
    assert_eq!(health.status(), 200);
}

/// The function over the shared test server, its database credentials from an RDS secret and
/// `MCP_AUTH_TOKEN` = [`OLD_TOKEN`] from an application secret (whose id is returned), with
/// `extra` settings in its environment.
async fn spawn_with_token_secret(extra: &[(&str, &str)]) -> (TestApp, Moto, String) {
    let db = TestDb::with_demo_data(FEEDBACK_ROWS).await;
    // The shared server trusts loopback, so the read-only role's URL is all the secret needs.
    let url = reqwest::Url::parse(&db.readonly_url).expect("readonly URL");
    let moto = Moto::start();
    let db_secret = moto
        .create_secret(
            "parley/mcp/db",
            &rds_secret(
                url.host_str().expect("host"),
                url.port().unwrap_or(5432),
                url.username(),
                url.password().unwrap_or("unused"),
                &db.name,
            ),
        )
        .await;
    let app_secret = moto
        .create_secret("parley/app", &json!({"MCP_AUTH_TOKEN": OLD_TOKEN}))
        .await;
    let mut env = secrets_env(&moto, &[&db_secret, &app_secret]);
    env.extend(
        extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    let app = spawn_with_secrets(db, env, Some(OLD_TOKEN.to_owned()))
        .await
        .expect("the function starts from its secrets");
    (app, moto, app_secret)
}

#[tokio::test]
async fn a_bearer_token_rotated_mid_run_is_accepted_and_the_old_one_refused() {
    // The secret wins over the environment: this token is never accepted.
    let (app, moto, app_secret) =
        spawn_with_token_secret(&[("MCP_AUTH_TOKEN", "token-from-the-environment")]).await;
    let (status, body) = lad(&app, OLD_TOKEN).await;
    assert_bristol(status, &body);
    let (status, _) = lad(&app, "token-from-the-environment").await;
    assert_eq!(status, 401);

    moto.put_secret(&app_secret, &json!({"MCP_AUTH_TOKEN": NEW_TOKEN}))
        .await;

    let (status, body) = lad(&app, NEW_TOKEN).await;
    assert_bristol(status, &body);
    let (status, body) = lad(&app, OLD_TOKEN).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["code"], "unauthorized", "{body}");
}

#[tokio::test]
async fn a_rotated_out_token_is_refused_within_the_secrets_ttl_without_any_other_trigger() {
    let (app, moto, app_secret) = spawn_with_token_secret(&[("SECRETS_TTL_MS", "1000")]).await;
    let (status, body) = lad(&app, OLD_TOKEN).await;
    assert_bristol(status, &body);

    moto.put_secret(&app_secret, &json!({"MCP_AUTH_TOKEN": NEW_TOKEN}))
        .await;

    // Only the old token is presented: nothing but the TTL can make the function look again.
    // Polled, with a bound well past the 1 s TTL.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (status, body) = lad(&app, OLD_TOKEN).await;
        if status == 401 {
            assert_eq!(body["error"]["code"], "unauthorized", "{body}");
            break;
        }
        assert_bristol(status, &body);
        assert!(
            std::time::Instant::now() < deadline,
            "the rotated-out token was still accepted 20 s after its rotation"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let (status, body) = lad(&app, NEW_TOKEN).await;
    assert_bristol(status, &body);
}
