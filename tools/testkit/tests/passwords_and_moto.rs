//! The fixtures for secrets tests: a TestCluster that checks passwords (except the superuser's)
//! and a Moto server that stores and rotates secrets. Needs `scripts/pg install` and
//! `scripts/moto install` (both run by `scripts/test`).

use parley_testkit::{Moto, TestCluster, connect};
use serde_json::json;

#[tokio::test]
async fn a_password_cluster_trusts_postgres_but_checks_other_roles_passwords() {
    let cluster = TestCluster::start_with_passwords();
    let admin = connect(&cluster.url()).await;
    admin
        .batch_execute("CREATE ROLE checked LOGIN PASSWORD 'right'")
        .await
        .expect("create role");
    let url = |password: &str| {
        format!(
            "postgres://checked:{password}@127.0.0.1:{}/postgres",
            cluster.port()
        )
    };

    let refused = tokio_postgres::connect(&url("wrong"), tokio_postgres::NoTls)
        .await
        .map(|_| ())
        .expect_err("a wrong password is refused");
    assert_eq!(
        refused.code(),
        Some(&tokio_postgres::error::SqlState::INVALID_PASSWORD)
    );
    let right = connect(&url("right")).await;
    let who: String = right
        .query_one("SELECT current_user::text", &[])
        .await
        .expect("query")
        .get(0);
    assert_eq!(who, "checked");
}

#[tokio::test]
async fn moto_keeps_the_newest_value_of_a_secret() {
    let moto = Moto::start();
    let arn = moto.create_secret("app", &json!({"K": "first"})).await;
    assert!(
        arn.starts_with("arn:aws:secretsmanager:eu-west-2:"),
        "{arn}"
    );

    moto.put_secret("app", &json!({"K": "second"})).await;

    let current = moto
        .client()
        .get_secret_value()
        .secret_id(&arn)
        .send()
        .await
        .expect("get secret");
    assert_eq!(current.secret_string(), Some(r#"{"K":"second"}"#));
    assert!(
        moto.env()
            .contains(&("AWS_ENDPOINT_URL".to_owned(), moto.endpoint().to_owned()))
    );
}
