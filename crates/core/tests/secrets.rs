//! `secrets::load` against a real local Secrets Manager (moto, from `scripts/moto install`):
//! RDS and application secrets merged over the environment, and start-up errors that name the
//! secret and the key but never show a value. Each test starts its own moto server.

use std::str::FromStr;

use parley_core::config::Env;
use parley_core::secrets::{self, SecretsError};
use parley_testkit::Moto;
use serde_json::json;

/// Every character a URL could trip over, so the encoding is really exercised.
const DB_PASSWORD: &str = "p@ss/w:rd?#%& +x";
const LLM_KEY: &str = "sk-from-the-secret-0123";

fn env(moto: &Moto, pairs: &[(&str, &str)]) -> Env {
    let mut all = moto.env();
    all.extend(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    Env::from_pairs(all)
}

async fn load_err(env: &Env) -> SecretsError {
    match secrets::load(env).await {
        Ok(_) => panic!("expected load to fail"),
        Err(e) => e,
    }
}

#[tokio::test]
async fn an_rds_secret_and_an_app_secret_become_settings_over_the_environment() {
    let moto = Moto::start();
    let db = moto
        .create_secret(
            "parley/db",
            &json!({"engine": "postgres", "host": "db.internal", "port": 6543,
                    "username": "parley_mcp", "password": DB_PASSWORD, "dbname": "parley",
                    "dbInstanceIdentifier": "parley-db"}),
        )
        .await;
    let app = moto
        .create_secret(
            "parley/app",
            &json!({"MCP_AUTH_TOKEN": "token-from-the-secret", "LLM_API_KEY": LLM_KEY}),
        )
        .await;
    let ids = format!("{db}, parley/app");
    let base = env(
        &moto,
        &[
            ("SECRET_IDS", &ids),
            ("MCP_AUTH_TOKEN", "token-from-the-environment"),
            ("LLM_MODEL", "kept-from-the-environment"),
        ],
    );

    let (merged, handle) = secrets::load(&base).await.expect("secrets load");

    let url = merged.get("DATABASE_URL").expect("DATABASE_URL built");
    assert_eq!(
        url,
        "postgres://parley_mcp:p%40ss%2Fw%3Ard%3F%23%25%26%20%2Bx@db.internal:6543/parley?sslmode=verify-full"
    );
    // tokio-postgres knows no verify-full (parley_core::db handles sslmode itself): drop it.
    let without_query = url.split('?').next().unwrap_or(url);
    let pg = tokio_postgres::Config::from_str(without_query).expect("a URL tokio-postgres reads");
    assert_eq!(pg.get_password(), Some(DB_PASSWORD.as_bytes()));
    assert_eq!(pg.get_user(), Some("parley_mcp"));
    assert_eq!(merged.get("MCP_AUTH_TOKEN"), Some("token-from-the-secret"));
    assert_eq!(merged.get("LLM_API_KEY"), Some(LLM_KEY));
    assert_eq!(merged.get("LLM_MODEL"), Some("kept-from-the-environment"));
    assert!(
        handle.is_some(),
        "a handle for refreshes comes with secrets"
    );
    let _ = app;
}

#[tokio::test]
async fn a_refresh_picks_up_a_rotated_value() {
    let moto = Moto::start();
    moto.create_secret("parley/app", &json!({"MCP_AUTH_TOKEN": "first"}))
        .await;
    let base = env(
        &moto,
        &[
            ("SECRET_IDS", "parley/app"),
            ("SECRETS_MIN_REFRESH_MS", "0"),
        ],
    );
    let (_, handle) = secrets::load(&base).await.expect("secrets load");
    let handle = handle.expect("a refresh handle");

    moto.put_secret("parley/app", &json!({"MCP_AUTH_TOKEN": "second"}))
        .await;

    let env = handle.refresh().await.expect("refresh");
    assert_eq!(env.get("MCP_AUTH_TOKEN"), Some("second"));
    assert_eq!(handle.env().get("MCP_AUTH_TOKEN"), Some("second"));
}

#[tokio::test]
async fn without_secret_ids_the_environment_is_used_as_it_is() {
    let base = Env::from_pairs([("DATABASE_URL", "postgres://u@h/db")]);
    let (merged, handle) = secrets::load(&base).await.expect("no secrets to load");
    assert_eq!(merged.get("DATABASE_URL"), Some("postgres://u@h/db"));
    assert!(handle.is_none());
}

#[tokio::test]
async fn a_missing_secret_stops_start_up_with_an_error_naming_it() {
    let moto = Moto::start();
    moto.create_secret("parley/app", &json!({"LLM_API_KEY": LLM_KEY}))
        .await;
    let base = env(&moto, &[("SECRET_IDS", "parley/app,parley/nope")]);

    let message = load_err(&base).await.to_string();

    assert!(
        message.starts_with("cannot fetch secret parley/nope: ResourceNotFoundException"),
        "{message}"
    );
    assert!(!message.contains(LLM_KEY), "{message}");
}

#[tokio::test]
async fn an_rds_secret_without_a_password_is_named_with_the_missing_key() {
    let moto = Moto::start();
    let arn = moto
        .create_secret(
            "parley/db",
            &json!({"engine": "postgres", "host": "db.internal", "port": 5432,
                    "username": "parley_secret_user", "dbname": "parley"}),
        )
        .await;
    let base = env(&moto, &[("SECRET_IDS", &arn)]);

    let message = load_err(&base).await.to_string();

    assert_eq!(message, format!("secret {arn}: missing key `password`"));
}

#[tokio::test]
async fn errors_and_debug_output_never_show_secret_values() {
    let moto = Moto::start();
    // Not JSON: the parse error must not quote it.
    moto.create_secret("parley/broken", &json!(format!("{DB_PASSWORD} not json")))
        .await;
    let broken = env(&moto, &[("SECRET_IDS", "parley/broken")]);
    let message = load_err(&broken).await;
    for shown in [message.to_string(), format!("{message:?}")] {
        assert!(shown.contains("parley/broken"), "{shown}");
        assert!(!shown.contains("p@ss"), "{shown}");
    }

    moto.create_secret(
        "parley/good",
        &json!({"username": "u", "password": DB_PASSWORD, "host": "h", "LLM_API_KEY": LLM_KEY}),
    )
    .await;
    let good = env(&moto, &[("SECRET_IDS", "parley/good")]);
    let (merged, handle) = secrets::load(&good).await.expect("secrets load");
    let shown = format!("{merged:?} {handle:?}");
    assert!(shown.contains("parley/good"), "{shown}");
    for value in [DB_PASSWORD, "p%40ss", LLM_KEY] {
        assert!(!shown.contains(value), "{value} shown in {shown}");
    }
    let db = parley_core::db::DbConfig::from_env(&merged).expect("db config");
    let shown = format!("{db:?}");
    assert!(
        !shown.contains("p%40ss") && !shown.contains(DB_PASSWORD),
        "{shown}"
    );
}
