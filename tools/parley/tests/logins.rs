//! `parley logins` as a self-managed server's operator runs it: on a server whose migrating
//! role may create roles but is no superuser (RDS's and Aurora's master), every login is made
//! and only the SQL login's temp_file_limit, a superuser setting, is left to the parameter group,
//! saying so; and the admin function's routine login (migration 0025's `parley_admin_ops`) does
//! its routine work and nothing else.

mod common;

use std::process::Output;

use common::{failure, stdout_of};
use parley_testkit::{TestCluster, TestDb, connect};
use tokio_postgres::Client;

/// The role that migrates and sets up the logins, as RDS makes its master user.
const MASTER: &str = "rds_master";

fn url_as(base: &str, user: &str, password: &str) -> String {
    let mut url = url::Url::parse(base).expect("a test URL");
    url.set_username(user).unwrap();
    url.set_password(Some(password)).unwrap();
    url.to_string()
}

/// `parley ARGS` on `database_url`, with `passwords` as the environment's login passwords.
fn parley(args: &[&str], database_url: &str, passwords: &[(&str, &str)]) -> Output {
    let mut command = common::command_with_model(args, database_url);
    command.envs(passwords.iter().copied());
    command.output().expect("parley runs")
}

async fn one<T: for<'a> tokio_postgres::types::FromSql<'a>>(db: &Client, sql: &str) -> T {
    db.query_one(sql, &[])
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .get(0)
}

/// A private server whose database `parley` belongs to [`MASTER`], a `NOSUPERUSER CREATEROLE
/// CREATEDB` role that migrated it (so it made, and may grant, the groups), with pgvector
/// created by the superuser (on RDS, `rds_superuser` may). Returns the server and the URLs of
/// the database as the master and as the superuser.
async fn managed_server() -> (TestCluster, String, String) {
    let cluster = TestCluster::start();
    let server = connect(&cluster.url()).await;
    // Apart: CREATE DATABASE cannot run in the transaction a batch of statements makes.
    for sql in [
        format!("CREATE ROLE {MASTER} LOGIN NOSUPERUSER CREATEROLE CREATEDB"),
        format!("CREATE DATABASE parley OWNER {MASTER}"),
    ] {
        server.batch_execute(&sql).await.expect(&sql);
    }
    let mut superuser = url::Url::parse(&cluster.url()).expect("the cluster's URL");
    superuser.set_path("/parley");
    let superuser = superuser.to_string();
    connect(&superuser)
        .await
        .batch_execute("CREATE EXTENSION vector")
        .await
        .expect("pgvector");
    let master = url_as(&superuser, MASTER, "unused-under-trust");
    let migrated = stdout_of(&parley(&["migrate"], &master, &[]));
    assert!(
        migrated.contains("0025_ingest_and_admin_roles.sql"),
        "{migrated}"
    );
    (cluster, master, superuser)
}

#[tokio::test]
async fn a_master_that_is_not_a_superuser_makes_every_login_and_leaves_temp_file_limit_to_the_parameter_group()
 {
    let (_cluster, master, superuser) = managed_server().await;
    let passwords = [
        ("PARLEY_MCP_PASSWORD", "mcp-pw"),
        ("PARLEY_CHAT_PASSWORD", "chat-pw"),
        ("PARLEY_SQL_PASSWORD", "sql-pw"),
        ("PARLEY_INGEST_PASSWORD", "ingest-pw"),
        ("PARLEY_ADMIN_PASSWORD", "admin-pw"),
    ];
    let args = [
        "logins",
        "--mcp-user",
        "parley_mcp",
        "--chat-user",
        "parley_chat",
        "--sql-user",
        "parley_sql",
        "--ingest-user",
        "parley_ingest",
        "--admin-user",
        "parley_admin",
    ];

    let out = stdout_of(&parley(&args, &master, &passwords));

    let notice = "warning: parley_sql: temp_file_limit not set on the role, because the role \
                  running this set-up is not a superuser (as on RDS and Aurora); the server's \
                  parameter group must set it (the template's cluster parameter group sets \
                  256MB), or as a superuser run: ALTER ROLE \"parley_sql\" SET temp_file_limit \
                  = '256MB'";
    assert_eq!(
        out,
        format!(
            "parley_mcp (mcp): created, in parley_readonly\n\
             parley_chat (chat): created, in parley_chat_writer\n\
             parley_sql (sql): created, in parley_sql_reader\n\
             {notice}\n\
             parley_ingest (ingest): created, in parley_ingest_writer\n\
             parley_admin (admin): created, in parley_admin_ops\n"
        )
    );
    let db = connect(&superuser).await;
    // The SQL login has everything but the setting only a superuser may put on a role.
    let (limit, settings): (i32, Vec<String>) = {
        let row = db
            .query_one(
                "SELECT r.rolconnlimit,
                        coalesce((SELECT s.setconfig FROM pg_db_role_setting s
                                   WHERE s.setrole = r.oid AND s.setdatabase = 0), '{}')
                   FROM pg_roles r WHERE r.rolname = 'parley_sql'",
                &[],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(limit, 40, "CONNECTION LIMIT needs only CREATEROLE");
    assert_eq!(settings, ["default_transaction_read_only=on"]);
    // Each new login is in its group and nothing else.
    for (user, group) in [
        ("parley_ingest", "parley_ingest_writer"),
        ("parley_admin", "parley_admin_ops"),
    ] {
        let groups: Vec<String> = one(
            &db,
            &format!(
                "SELECT array_agg(m.roleid::regrole::text) FROM pg_auth_members m
                  WHERE m.member = '{user}'::regrole"
            ),
        )
        .await;
        assert_eq!(groups, [group], "{user}");
    }

    // Run again (a rotation): the passwords change, the notice is the same, nothing fails.
    let again = stdout_of(&parley(&args, &master, &passwords));
    assert!(again.contains("parley_sql (sql): password set, in parley_sql_reader\n"));
    assert!(again.contains(notice), "{again}");
}

#[tokio::test]
async fn as_a_superuser_temp_file_limit_is_set_on_the_sql_login_without_a_warning() {
    let (_cluster, _master, superuser) = managed_server().await;

    let out = stdout_of(&parley(
        &["logins", "--sql-user", "parley_sql"],
        &superuser,
        &[("PARLEY_SQL_PASSWORD", "sql-pw")],
    ));

    assert_eq!(out, "parley_sql (sql): created, in parley_sql_reader\n");
    let settings: Vec<String> = one(
        &connect(&superuser).await,
        "SELECT s.setconfig FROM pg_db_role_setting s
          WHERE s.setrole = 'parley_sql'::regrole AND s.setdatabase = 0",
    )
    .await;
    assert_eq!(
        settings,
        ["default_transaction_read_only=on", "temp_file_limit=256MB"]
    );
}

#[tokio::test]
async fn the_admin_routine_login_runs_the_routine_commands_and_nothing_else() {
    let db = TestDb::migrated().await;
    common::ingest_files(
        &db.url,
        "handbook",
        &[(
            "leave.md",
            "# Leave\n\nAnnual leave is 25 days.\n\n## Carry-over\n\nFive days carry over.\n",
        )],
        &[],
    );
    db.client()
        .await
        .batch_execute(
            "INSERT INTO parley.audit (at, request_id, caller, tool, arguments, duration_ms, outcome)
             VALUES (now(), 'req-1', 'alice', 'search_documents', '{}', 3.5, 'ok')",
        )
        .await
        .unwrap();
    // Roles are cluster-wide: the login's name carries this database's.
    let user = format!("parley_admin_{}", &db.name["parley_test_".len()..]);
    stdout_of(&parley(
        &["logins", "--admin-user", &user],
        &db.url,
        &[("PARLEY_ADMIN_PASSWORD", "admin-pw")],
    ));
    let login = url_as(&db.url, &user, "admin-pw");

    let listed = stdout_of(&parley(&["collections", "--json"], &login, &[]));
    let listed: serde_json::Value = serde_json::from_str(listed.trim()).unwrap();
    assert_eq!(
        (listed["documents"].as_i64(), listed["public"].as_bool()),
        (Some(1), Some(false))
    );
    assert!(listed["chunks"].as_i64().unwrap() > 0, "{listed}");
    assert_eq!(
        stdout_of(&parley(
            &["enroll", "--collection", "handbook", "--group", "staff"],
            &login,
            &[]
        )),
        "handbook: 1 added, 0 were already members\n"
    );
    assert!(stdout_of(&parley(&["enroll", "--list"], &login, &[])).contains("group:staff"));
    assert!(
        stdout_of(&parley(
            &["collections", "set", "handbook", "--public"],
            &login,
            &[]
        ))
        .starts_with("handbook is now public")
    );
    let audit = stdout_of(&parley(&["audit", "--json"], &login, &[]));
    assert!(audit.contains("\"search_documents\""), "{audit}");
    let removed = stdout_of(&parley(
        &["collections", "remove", "handbook", "--yes"],
        &login,
        &[],
    ));
    assert!(removed.starts_with("removed handbook"), "{removed}");
    let left: i64 = one(
        &db.client().await,
        "SELECT (SELECT count(*) FROM parley.collections) + (SELECT count(*) FROM parley.chunk_terms)
              + (SELECT count(*) FROM parley.collection_terms)",
    )
    .await;
    assert_eq!(left, 0, "the collection went with its statistics");

    // Not migrations, roles, the chat's tables or the audit's rows.
    let migrate = failure(&parley(&["migrate"], &login, &[]), 1);
    assert!(migrate.contains("permission denied"), "{migrate}");
    let logins = failure(
        &parley(
            &["logins", "--chat-user", &format!("{user}_chat")],
            &login,
            &[("PARLEY_CHAT_PASSWORD", "chat-pw")],
        ),
        1,
    );
    assert!(logins.contains("permission denied"), "{logins}");
    let client = connect(&login).await;
    for sql in [
        "SELECT count(*) FROM chat.conversations",
        "DELETE FROM parley.audit",
        "CREATE TABLE parley.scratch (id int)",
        "DROP TABLE parley.documents",
    ] {
        let e = client.batch_execute(sql).await.expect_err(sql);
        assert_eq!(
            e.code(),
            Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE),
            "{sql}: {e}"
        );
    }
    drop(client);
    drop_login(&db, &user).await;
}

/// Roles outlive the test's database (`scripts/test` drops only databases): the login goes
/// once its test passed. It owns nothing and holds no grant but its group, so nothing stops it.
async fn drop_login(db: &TestDb, user: &str) {
    db.client()
        .await
        .batch_execute(&format!("DROP ROLE {user}"))
        .await
        .unwrap_or_else(|e| panic!("dropping {user}: {e}"));
}

#[tokio::test]
async fn sync_runs_as_the_admin_routine_login() {
    let (db, moto) = (TestDb::migrated().await, parley_testkit::Moto::start());
    let bucket = moto.versioned_bucket("team-docs").await;
    bucket
        .put("hr/leave.md", "# Leave\n\nTwenty-five days a year.\n")
        .await;
    bucket
        .put("hr/pay.txt", "Pay day is the last Friday.\n")
        .await;
    bucket
        .put(
            "hr/_collection.json",
            r#"{"title": "HR policies", "readers": {"groups": ["hr"]}}"#,
        )
        .await;
    let user = format!("parley_admin_{}", &db.name["parley_test_".len()..]);
    stdout_of(&parley(
        &["logins", "--admin-user", &user],
        &db.url,
        &[("PARLEY_ADMIN_PASSWORD", "admin-pw")],
    ));
    let login = url_as(&db.url, &user, "admin-pw");
    let moto_env = moto.env();
    let with_moto: Vec<(&str, &str)> = moto_env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();

    let first = stdout_of(&parley(&["sync", "s3://team-docs/"], &login, &with_moto));
    assert!(
        first.contains("hr (all-MiniLM-L6-v2@384): 2 added, 0 replaced, 0 unchanged, 0 deleted"),
        "{first}"
    );
    bucket.delete("hr/pay.txt").await;
    let again = stdout_of(&parley(&["sync", "s3://team-docs/"], &login, &with_moto));
    assert!(again.contains("1 deleted"), "{again}");
    let left: Vec<String> = one(
        &db.client().await,
        "SELECT array_agg(uri ORDER BY uri) FROM parley.documents",
    )
    .await;
    assert_eq!(left, ["leave.md"]);
    drop_login(&db, &user).await;
}
