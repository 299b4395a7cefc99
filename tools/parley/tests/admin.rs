//! The `parley-admin` function's handler against a real Postgres of its own (a TestCluster that
//! checks passwords, so a login role really logs in), secrets in a local Secrets Manager
//! (moto), and a local HTTP server in CloudFormation's place, receiving the answer's PUT.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use parley_cli::admin::Admin;
use parley_core::config::Env;
use parley_testkit::{Moto, TestCluster, connect};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_postgres::NoTls;

/// Plenty: the answer is PUT 12 s before the time left runs out.
const TIME_LEFT: Duration = Duration::from_secs(300);
/// Every character a URL or a SQL literal could trip over.
const MCP_PASSWORD: &str = "mcp p@ss'word/:?\"%";

/// One PUT as the receiver saw it.
#[derive(Debug, Clone)]
struct Put {
    content_type: Option<String>,
    /// The body's length as sent.
    bytes: usize,
    body: Value,
}

/// CloudFormation's side: answers each PUT with the next status of `statuses` (then 200) and
/// records it.
struct Receiver {
    url: String,
    puts: Arc<Mutex<Vec<Put>>>,
}

impl Receiver {
    async fn start(statuses: Vec<u16>) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!(
            "http://{}/cloudformation-response?X-Amz-Signature=secret-signature",
            listener.local_addr().unwrap()
        );
        let puts = Arc::new(Mutex::new(Vec::new()));
        let seen = puts.clone();
        tokio::spawn(async move {
            let mut statuses = statuses.into_iter();
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let mut raw = Vec::new();
                let mut buf = [0u8; 8192];
                // Head, then as much body as Content-Length says.
                let (head, body) = loop {
                    let n = stream.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        break (String::new(), Vec::new());
                    }
                    raw.extend_from_slice(&buf[..n]);
                    if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&raw[..end]).to_lowercase();
                        let length: usize = header(&head, "content-length")
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(0);
                        let mut body = raw[end + 4..].to_vec();
                        while body.len() < length {
                            let n = stream.read(&mut buf).await.unwrap_or(0);
                            if n == 0 {
                                break;
                            }
                            body.extend_from_slice(&buf[..n]);
                        }
                        break (head, body);
                    }
                };
                let status = statuses.next().unwrap_or(200);
                if head.starts_with("put ") {
                    seen.lock().unwrap().push(Put {
                        content_type: header(&head, "content-type").map(str::to_owned),
                        bytes: body.len(),
                        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
                    });
                }
                let answer = format!(
                    "HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                );
                let _ = stream.write_all(answer.as_bytes()).await;
            }
        });
        Receiver { url, puts }
    }

    fn puts(&self) -> Vec<Put> {
        self.puts.lock().unwrap().clone()
    }
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim() == name)
        .map(|(_, v)| v.trim())
}

/// A private server, moto, the secrets the template would make, and an empty database.
struct Stack {
    cluster: TestCluster,
    moto: Moto,
    db: String,
    suffix: String,
    master_secret: String,
    /// The mcp, chat, SQL, ingest and admin (routine) logins' secrets.
    secrets: [String; 5],
}

impl Stack {
    async fn new() -> Stack {
        let cluster = TestCluster::start_with_passwords();
        let db = "parley_admin".to_owned();
        connect(&cluster.url())
            .await
            .batch_execute(&format!("CREATE DATABASE {db}"))
            .await
            .unwrap();
        let moto = Moto::start();
        // Roles are cluster-wide, and this cluster is the test's own: fixed names are safe.
        let suffix = "test".to_owned();
        // An RDS-managed master secret: credentials only (trust auth for postgres here).
        let master_secret = moto
            .create_secret(
                "rds!cluster-parley",
                &json!({"username": "postgres", "password": "unused-under-trust"}),
            )
            .await;
        let role = |kind: &str, password: &str| {
            json!({"username": format!("parley_{kind}_{suffix}"), "password": password,
                   "engine": "postgres", "host": "127.0.0.1", "port": cluster.port(),
                   "dbname": db})
        };
        let mcp = moto
            .create_secret("parley/mcp", &role("mcp", MCP_PASSWORD))
            .await;
        let chat = moto
            .create_secret("parley/chat", &role("chat", "chat-pw"))
            .await;
        let sql = moto
            .create_secret("parley/sql", &role("sql", "sql-pw"))
            .await;
        let ingest = moto
            .create_secret("parley/ingest", &role("ingest", "ingest-pw"))
            .await;
        let admin = moto
            .create_secret("parley/admin", &role("admin", "admin-pw"))
            .await;
        Stack {
            cluster,
            moto,
            db,
            suffix,
            master_secret,
            secrets: [mcp, chat, sql, ingest, admin],
        }
    }

    fn user(&self, kind: &str) -> String {
        format!("parley_{kind}_{}", self.suffix)
    }

    /// The function's environment as the template sets it, plus moto's endpoint.
    fn admin(&self) -> Admin {
        let mut env = self.moto.env();
        env.extend(
            [
                ("SECRET_IDS", self.master_secret.clone()),
                ("DATABASE_HOST", "127.0.0.1".to_owned()),
                ("DATABASE_PORT", self.cluster.port().to_string()),
                ("DATABASE_NAME", self.db.clone()),
                ("DB_SSLMODE", "disable".to_owned()),
            ]
            .map(|(k, v)| (k.to_owned(), v)),
        );
        Admin::new(Env::from_pairs(env)).unwrap()
    }

    fn event(&self, request_type: &str, receiver: &Receiver, demo: &str) -> Value {
        json!({
            "RequestType": request_type,
            "ServiceToken": "arn:aws:lambda:eu-west-2:123456789012:function:parley-admin",
            "ResponseURL": receiver.url,
            "StackId": "arn:aws:cloudformation:eu-west-2:123456789012:stack/parley/0a1b",
            "RequestId": format!("req-{request_type}"),
            "LogicalResourceId": "Database",
            "ResourceType": "Custom::ParleyDatabase",
            "ResourceProperties": {
                "ServiceToken": "arn:aws:lambda:eu-west-2:123456789012:function:parley-admin",
                "McpSecretArn": self.secrets[0],
                "ChatSecretArn": self.secrets[1],
                "SqlSecretArn": self.secrets[2],
                "IngestSecretArn": self.secrets[3],
                "AdminSecretArn": self.secrets[4],
                "DemoData": demo,
                "Version": "1",
            },
        })
    }

    fn url_as(&self, user: &str, password: &str) -> String {
        let mut url = url::Url::parse(&format!(
            "postgres://127.0.0.1:{}/{}",
            self.cluster.port(),
            self.db
        ))
        .unwrap();
        url.set_username(user).unwrap();
        url.set_password(Some(password)).unwrap();
        url.to_string()
    }

    /// A superuser connection to the database.
    async fn owner(&self) -> tokio_postgres::Client {
        connect(&self.url_as("postgres", "x")).await
    }

    /// The one value `sql` selects, read as the superuser.
    async fn one<T: for<'a> tokio_postgres::types::FromSql<'a>>(&self, sql: &str) -> T {
        self.owner().await.query_one(sql, &[]).await.unwrap().get(0)
    }

    /// Whether `parley migrate` has run at all (its bookkeeping table exists).
    async fn migrated(&self) -> bool {
        self.one("SELECT to_regclass('public.schema_migrations') IS NOT NULL")
            .await
    }

    async fn login(&self, user: &str, password: &str) -> Result<tokio_postgres::Client, String> {
        let (client, conn) = tokio_postgres::connect(&self.url_as(user, password), NoTls)
            .await
            .map_err(|e| parley_core::db::pg_message(&e))?;
        tokio::spawn(conn);
        Ok(client)
    }
}

/// Runs one event through the handler and returns the one PUT it made.
async fn answer(admin: &Admin, receiver: &Receiver, event: Value) -> Value {
    let before = receiver.puts().len();
    let returned = admin.handle(event, TIME_LEFT).await.expect("answered");
    let puts = receiver.puts();
    assert_eq!(puts.len(), before + 1, "one PUT per request");
    let put = puts.last().unwrap();
    assert_eq!(
        put.content_type, None,
        "the presigned URL is signed for no content type"
    );
    assert_eq!(returned, put.body, "the handler returns what it sent");
    put.body.clone()
}

#[tokio::test]
async fn create_migrates_loads_the_demo_and_makes_logins_that_log_in_with_their_grants() {
    let stack = Stack::new().await;
    let receiver = Receiver::start(vec![]).await;
    let admin = stack.admin();

    let response = answer(&admin, &receiver, stack.event("Create", &receiver, "demo")).await;

    assert_eq!(response["Status"], "SUCCESS", "{response}");
    assert_eq!(
        response["PhysicalResourceId"],
        "parley-db:127.0.0.1/parley_admin"
    );
    assert_eq!(response["RequestId"], "req-Create");
    assert_eq!(response["LogicalResourceId"], "Database");
    let migrations = parley_core::migrate::embedded().unwrap().len();
    assert_eq!(
        response["Data"]["MigrationsApplied"],
        migrations.to_string()
    );
    assert_eq!(response["Data"]["DemoDomains"], "feedback,tasks");
    let users = [
        stack.user("mcp"),
        stack.user("chat"),
        stack.user("sql"),
        stack.user("ingest"),
        stack.user("admin"),
    ];
    assert_eq!(response["Data"]["Logins"], users.join(","));
    assert_eq!(
        response["Data"]["Warnings"], "",
        "postgres is a superuser here"
    );
    let recorded: i64 = stack
        .one("SELECT count(*) FROM public.schema_migrations")
        .await;
    assert_eq!(recorded as usize, migrations);

    // Each login logs in with its secret's password, and holds what docs/deploy-reference.md says.
    let mcp = stack
        .login(&users[0], MCP_PASSWORD)
        .await
        .expect("mcp logs in");
    let row = mcp
        .query_one(
            "SELECT current_setting('default_transaction_read_only'),
                    (SELECT count(*) FROM public.feedback) > 0,
                    pg_has_role(current_user, 'parley_tasks_writer', 'SET'),
                    pg_has_role(current_user, 'parley_tasks_writer', 'USAGE')",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "on");
    assert!(row.get::<_, bool>(1), "reads the demo's feedback");
    assert!(row.get::<_, bool>(2), "may SET ROLE parley_tasks_writer");
    assert!(!row.get::<_, bool>(3), "but does not inherit its rights");
    let write = mcp
        .batch_execute("BEGIN READ WRITE; DELETE FROM public.tasks; ROLLBACK")
        .await;
    assert!(write.is_err(), "the mcp login itself cannot write");

    let chat = stack
        .login(&users[1], "chat-pw")
        .await
        .expect("chat logs in");
    let n: i64 = chat
        .query_one("SELECT count(*) FROM chat.conversations", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0);

    let sql = stack.login(&users[2], "sql-pw").await.expect("sql logs in");
    let row = sql
        .query_one(
            "SELECT rolconnlimit, current_setting('temp_file_limit'),
                    current_setting('default_transaction_read_only'),
                    (SELECT count(*) FROM pg_auth_members m WHERE m.member = r.oid)
               FROM pg_roles r WHERE rolname = current_user",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i32>(0), 40);
    assert_eq!(row.get::<_, String>(1), "256MB");
    assert_eq!(row.get::<_, String>(2), "on");
    assert_eq!(
        row.get::<_, i64>(3),
        1,
        "a member of parley_sql_reader and nothing else"
    );

    // The ingest and admin logins: each in its group (migration 0025) and nothing else.
    for (user, password, group) in [
        (&users[3], "ingest-pw", "parley_ingest_writer"),
        (&users[4], "admin-pw", "parley_admin_ops"),
    ] {
        let login = stack.login(user, password).await.expect("logs in");
        let groups: Vec<String> = login
            .query_one(
                "SELECT array_agg(m.roleid::regrole::text) FROM pg_auth_members m
                  WHERE m.member = current_user::regrole",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(groups, [group], "{user}");
    }
}

#[tokio::test]
async fn an_update_changes_nothing_but_a_rotated_password_and_the_old_one_stops_working() {
    let stack = Stack::new().await;
    let receiver = Receiver::start(vec![]).await;
    let admin = stack.admin();
    let created = answer(&admin, &receiver, stack.event("Create", &receiver, "demo")).await;
    assert_eq!(created["Status"], "SUCCESS", "{created}");
    let count =
        "SELECT (SELECT count(*) FROM public.feedback) + (SELECT count(*) FROM public.tasks)";
    let rows: i64 = stack.one(count).await;
    stack
        .moto
        .put_secret(
            &stack.secrets[1],
            &json!({"username": stack.user("chat"), "password": "rotated"}),
        )
        .await;

    let mut update = stack.event("Update", &receiver, "demo");
    update["PhysicalResourceId"] = created["PhysicalResourceId"].clone();
    let updated = answer(&admin, &receiver, update).await;

    assert_eq!(updated["Status"], "SUCCESS", "{updated}");
    assert_eq!(
        updated["PhysicalResourceId"], created["PhysicalResourceId"],
        "no replacement"
    );
    assert_eq!(updated["Data"]["MigrationsApplied"], "0");
    let after: i64 = stack.one(count).await;
    assert_eq!(after, rows, "the demo data is loaded once");
    assert!(stack.login(&stack.user("chat"), "rotated").await.is_ok());
    let old = stack
        .login(&stack.user("chat"), "chat-pw")
        .await
        .unwrap_err();
    assert!(old.contains("password authentication failed"), "{old}");
}

#[tokio::test]
async fn delete_answers_success_with_the_same_id_and_drops_nothing() {
    let stack = Stack::new().await;
    let receiver = Receiver::start(vec![]).await;
    let admin = stack.admin();
    let created = answer(&admin, &receiver, stack.event("Create", &receiver, "none")).await;
    assert_eq!(created["Data"]["DemoDomains"], "");

    let mut delete = stack.event("Delete", &receiver, "none");
    delete["PhysicalResourceId"] = created["PhysicalResourceId"].clone();
    // Delete needs no settings at all: it must succeed even when they are what broke.
    let bare = Admin::new(Env::default()).unwrap();
    let deleted = answer(&bare, &receiver, delete).await;

    assert_eq!(deleted["Status"], "SUCCESS");
    assert_eq!(
        deleted["PhysicalResourceId"],
        "parley-db:127.0.0.1/parley_admin"
    );
    assert!(
        stack.login(&stack.user("mcp"), MCP_PASSWORD).await.is_ok(),
        "the role stays"
    );
    let tables: i64 = stack
        .one("SELECT count(*) FROM pg_tables WHERE schemaname IN ('parley', 'chat')")
        .await;
    assert!(tables > 0, "the schema stays");
}

#[tokio::test]
async fn a_wrong_secret_arn_fails_naming_it_before_anything_is_migrated() {
    let stack = Stack::new().await;
    let receiver = Receiver::start(vec![]).await;
    let mut event = stack.event("Create", &receiver, "demo");
    event["ResourceProperties"]["McpSecretArn"] = json!("parley/no-such-secret");

    let response = answer(&stack.admin(), &receiver, event).await;

    assert_eq!(response["Status"], "FAILED");
    let reason = response["Reason"].as_str().unwrap();
    assert!(
        reason.starts_with("cannot fetch secret parley/no-such-secret: ResourceNotFoundException"),
        "{reason}"
    );
    let migrated: bool = stack.migrated().await;
    assert!(!migrated, "nothing was done");
}

#[tokio::test]
async fn a_postgres_failure_is_the_reason_and_no_password_is_in_it() {
    let stack = Stack::new().await;
    let receiver = Receiver::start(vec![]).await;
    // The chat login's user name is taken by the role that runs the set-up.
    stack
        .moto
        .put_secret(
            &stack.secrets[1],
            &json!({"username": "postgres", "password": "chat-pw"}),
        )
        .await;

    let response = answer(
        &stack.admin(),
        &receiver,
        stack.event("Create", &receiver, "none"),
    )
    .await;

    assert_eq!(response["Status"], "FAILED");
    assert_eq!(
        response["Reason"],
        "refusing to make postgres the chat login: it is the role running this set-up"
    );
    // And a database that does not exist: Postgres' own words.
    let mut env = stack.admin().base;
    env = env.overlay([("DATABASE_NAME", "parley_missing")]);
    let response = answer(
        &Admin::new(env).unwrap(),
        &receiver,
        stack.event("Update", &receiver, "none"),
    )
    .await;
    let reason = response["Reason"].as_str().unwrap();
    assert!(
        reason.contains("database \"parley_missing\" does not exist"),
        "{reason}"
    );
    assert!(
        !reason.contains(MCP_PASSWORD) && !reason.contains("chat-pw"),
        "{reason}"
    );
}

#[tokio::test]
async fn a_request_with_a_20_kb_stack_id_is_answered_within_cloudformations_4_kb() {
    let stack = Stack::new().await;
    let receiver = Receiver::start(vec![]).await;
    let admin = stack.admin();
    let mut event = stack.event("Create", &receiver, "none");
    let stack_id = format!(
        "arn:aws:cloudformation:eu-west-2:123456789012:stack/{}/0a1b",
        "p".repeat(20_000)
    );
    event["StackId"] = json!(stack_id);

    let response = answer(&admin, &receiver, event).await;

    let sent = receiver.puts().last().unwrap().bytes;
    assert!(sent <= 4096, "{sent} bytes sent");
    assert_eq!(response["Status"], "SUCCESS", "{response}");
    assert_eq!(
        response["PhysicalResourceId"], "parley-db:127.0.0.1/parley_admin",
        "the id an ordinary stack gets"
    );
    let echoed = response["StackId"].as_str().unwrap();
    assert!(
        stack_id.starts_with(echoed.trim_end_matches("...")),
        "{echoed}"
    );
    assert!(stack.migrated().await, "the work was done");
}

#[tokio::test]
async fn a_malformed_request_is_answered_failed_and_a_stranger_event_is_an_error() {
    let stack = Stack::new().await;
    let receiver = Receiver::start(vec![]).await;
    let admin = stack.admin();

    let response = answer(&admin, &receiver, stack.event("Replace", &receiver, "demo")).await;
    assert_eq!(response["Status"], "FAILED");
    assert_eq!(
        response["Reason"],
        "unknown RequestType `Replace`: expected Create, Update or Delete"
    );
    let response = answer(
        &admin,
        &receiver,
        stack.event("Create", &receiver, "everything"),
    )
    .await;
    assert_eq!(
        response["Reason"],
        "ResourceProperties.DemoData is `everything`: expected none, demo or all"
    );

    let e = admin
        .handle(json!({"hello": "world"}), TIME_LEFT)
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("not an event this function knows"),
        "{e}"
    );
}

#[tokio::test]
async fn the_answer_goes_out_before_the_timeout_and_a_failed_put_is_tried_again() {
    let stack = Stack::new().await;
    // The receiver refuses the first PUT with a 503, as S3 sometimes does.
    let receiver = Receiver::start(vec![503]).await;
    let admin = stack.admin();

    // 12 s left is only the answer's margin: the work is cut off at once, and answered.
    let returned = admin
        .handle(
            stack.event("Create", &receiver, "demo"),
            Duration::from_secs(12),
        )
        .await
        .expect("answered");

    assert_eq!(returned["Status"], "FAILED");
    assert!(
        returned["Reason"]
            .as_str()
            .unwrap()
            .starts_with("not done within the function's timeout")
    );
    let puts = receiver.puts();
    assert_eq!(puts.len(), 2, "the 503 was followed by a second PUT");
    assert_eq!(puts[1].body, returned);
    // And the work was stopped, not left to finish behind the answer: unstopped, this Create
    // migrates in about 2 s here. Absence can only be shown by waiting past that.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let migrated: bool = stack.migrated().await;
    assert!(!migrated, "the cut-off Create went on running");
}

#[tokio::test]
async fn direct_commands_run_on_the_allow_list_and_anything_else_is_refused() {
    let stack = Stack::new().await;
    let receiver = Receiver::start(vec![]).await;
    let admin = stack.admin();
    answer(&admin, &receiver, stack.event("Create", &receiver, "none")).await;

    let migrate = admin
        .handle(json!({"command": ["migrate"]}), TIME_LEFT)
        .await
        .unwrap();
    assert_eq!(
        migrate,
        json!({"ok": true, "output": "schema up to date\n", "error": ""})
    );
    let audit = admin
        .handle(json!({"command": ["audit"]}), TIME_LEFT)
        .await
        .unwrap();
    assert_eq!(
        audit,
        json!({"ok": true, "output": "no audit records match\n", "error": ""})
    );
    let enroll = admin
        .handle(
            json!({"command": ["enroll", "--collection", "handbook", "--group", "staff"]}),
            TIME_LEFT,
        )
        .await
        .unwrap();
    assert_eq!(enroll["ok"], false, "{enroll}");
    assert!(
        enroll["error"].as_str().unwrap().contains("handbook"),
        "{enroll}"
    );

    let ingest = admin
        .handle(
            json!({"command": ["ingest", "--collection", "c", "/etc"]}),
            TIME_LEFT,
        )
        .await
        .unwrap();
    assert_eq!(ingest["ok"], false);
    assert!(
        ingest["error"]
            .as_str()
            .unwrap()
            .starts_with("`ingest` cannot run in the function")
    );
    let bad = admin
        .handle(
            json!({"command": ["audit", "--since", "yesterday-ish"]}),
            TIME_LEFT,
        )
        .await
        .unwrap();
    assert_eq!(bad["ok"], false);
    assert!(bad["error"].as_str().unwrap().contains("--since"), "{bad}");
}

#[tokio::test]
async fn routine_commands_run_as_the_routine_login_and_migrations_as_the_owner() {
    let stack = Stack::new().await;
    let receiver = Receiver::start(vec![]).await;
    let created = answer(
        &stack.admin(),
        &receiver,
        stack.event("Create", &receiver, "none"),
    )
    .await;
    assert_eq!(created["Status"], "SUCCESS", "{created}");
    let routine = |secret: &str| {
        Admin::new(
            stack
                .admin()
                .base
                .overlay([("ADMIN_ROUTINE_SECRET_ID", secret)]),
        )
        .unwrap()
    };
    let admin = routine(&stack.secrets[4]);

    let audit = admin
        .handle(json!({"command": ["audit"]}), TIME_LEFT)
        .await
        .unwrap();
    assert_eq!(
        audit,
        json!({"ok": true, "output": "no audit records match\n", "error": ""})
    );
    // Who connects shows once the routine login's secret holds a password that no longer
    // works: every routine command fails naming that user, while migrations, the owner's, run.
    stack
        .moto
        .put_secret(
            &stack.secrets[4],
            &json!({"username": stack.user("admin"), "password": "not-its-password"}),
        )
        .await;
    for argv in [
        json!(["audit"]),
        json!(["collections"]),
        json!(["enroll", "--list"]),
    ] {
        let answer = admin
            .handle(json!({ "command": argv }), TIME_LEFT)
            .await
            .unwrap();
        assert_eq!(answer["ok"], false, "{argv}: {answer}");
        let error = answer["error"].as_str().unwrap();
        assert!(
            error.contains(&format!(
                "password authentication failed for user \"{}\"",
                stack.user("admin")
            )),
            "{argv}: {error}"
        );
    }
    let migrate = admin
        .handle(json!({"command": ["migrate"]}), TIME_LEFT)
        .await
        .unwrap();
    assert_eq!(
        migrate,
        json!({"ok": true, "output": "schema up to date\n", "error": ""})
    );

    // A routine secret that holds no login is refused, rather than the owner's URL kept.
    let settings = stack
        .moto
        .create_secret("parley/app", &json!({"LLM_API_KEY": "sk-test"}))
        .await;
    let answer = routine(&settings)
        .handle(json!({"command": ["audit"]}), TIME_LEFT)
        .await
        .unwrap();
    assert_eq!(answer["ok"], false);
    assert_eq!(
        answer["error"],
        format!(
            "secret {settings}: holds no database login (`username` and `password`, in RDS's \
             format), which ADMIN_ROUTINE_SECRET_ID names it for"
        )
    );
}

#[tokio::test]
async fn as_a_master_that_is_not_a_superuser_the_logins_are_made_and_what_it_cannot_set_is_named() {
    let stack = Stack::new().await;
    // As on RDS: the master may create roles and databases but is no superuser, and the
    // extensions are there (rds_superuser may create pgvector; here the superuser does).
    stack
        .owner()
        .await
        .batch_execute(
            "CREATE ROLE rds_master LOGIN CREATEROLE CREATEDB PASSWORD 'master-pw';
             ALTER DATABASE parley_admin OWNER TO rds_master;
             CREATE EXTENSION vector;",
        )
        .await
        .unwrap();
    stack
        .moto
        .put_secret(
            &stack.master_secret,
            &json!({"username": "rds_master", "password": "master-pw"}),
        )
        .await;
    let receiver = Receiver::start(vec![]).await;
    let admin = stack.admin();
    // Migrated first, then a domain's write role made by the master, as a domain's schema.sql
    // does.
    let migrated = answer(&admin, &receiver, stack.event("Create", &receiver, "none")).await;
    assert_eq!(migrated["Status"], "SUCCESS", "{migrated}");
    // On Postgres 16 a CREATEROLE master is a member (ADMIN, no INHERIT, no SET) of the roles
    // it creates, parley_sql_reader included; before migration 0011, parley.caller() took it
    // for an ad-hoc SQL session, and the tasks seed failed its row-level security check.
    let tasks = admin
        .handle(
            json!({"command": ["demo-data", "--domain", "tasks"]}),
            TIME_LEFT,
        )
        .await
        .unwrap();
    assert_eq!(tasks["ok"], true, "{tasks}");
    let master = stack.login("rds_master", "master-pw").await.unwrap();
    master
        .batch_execute(
            "CREATE TABLE notes (id int);
             CREATE ROLE notes_writer NOLOGIN IN ROLE parley_tool_writer;
             GRANT INSERT ON notes TO notes_writer;",
        )
        .await
        .unwrap();

    let mut update = stack.event("Update", &receiver, "none");
    update["PhysicalResourceId"] = migrated["PhysicalResourceId"].clone();
    let response = answer(&admin, &receiver, update).await;

    assert_eq!(response["Status"], "SUCCESS", "{response}");
    assert_eq!(
        response["Data"]["Warnings"],
        "parley_sql_test: temp_file_limit not set on the role, because the role running this \
         set-up is not a superuser (as on RDS and Aurora); the server's parameter group must set \
         it (the template's cluster parameter group sets 256MB), or as a superuser run: ALTER \
         ROLE \"parley_sql_test\" SET temp_file_limit = '256MB'"
    );
    assert_eq!(
        response["Data"]["Logins"],
        ["mcp", "chat", "sql", "ingest", "admin"]
            .map(|kind| stack.user(kind))
            .join(","),
        "the master made every login, the ingest and admin ones in groups 0025 made"
    );
    let mcp = stack
        .login(&stack.user("mcp"), MCP_PASSWORD)
        .await
        .expect("mcp logs in");
    let row = mcp
        .query_one(
            "SELECT pg_has_role(current_user, 'notes_writer', 'SET'),
                    pg_has_role(current_user, 'notes_writer', 'USAGE')",
            &[],
        )
        .await
        .unwrap();
    assert!(
        row.get::<_, bool>(0),
        "the master made the write role, so it may grant it"
    );
    assert!(!row.get::<_, bool>(1), "SET, not INHERIT");
    let sql = stack
        .login(&stack.user("sql"), "sql-pw")
        .await
        .expect("sql logs in");
    let limit: i32 = sql
        .query_one(
            "SELECT rolconnlimit FROM pg_roles WHERE rolname = current_user",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(limit, 40, "CONNECTION LIMIT needs only CREATEROLE");
}

/// The schedule's event exactly as the template writes it (CatalogIndexer's `Input`): the
/// catalog file is read from S3 and indexed as the owner, even when the routine login cannot
/// connect; a missing object is an answer naming the fix, not a crash.
#[tokio::test]
async fn the_scheduled_catalog_index_reads_its_file_from_s3_as_the_owner() {
    let stack = Stack::new().await;
    let receiver = Receiver::start(vec![]).await;
    let created = answer(
        &stack.admin(),
        &receiver,
        stack.event("Create", &receiver, "none"),
    )
    .await;
    assert_eq!(created["Status"], "SUCCESS", "{created}");
    stack
        .owner()
        .await
        .batch_execute(
            "CREATE SCHEMA shop; \
             CREATE TABLE shop.customer (customer_id int PRIMARY KEY, country text); \
             INSERT INTO shop.customer VALUES (1, 'Brazil'), (2, 'Canada')",
        )
        .await
        .unwrap();
    let bucket = stack.moto.versioned_bucket("team-config").await;
    bucket
        .put(
            "parley/catalog.toml",
            "schemas = [\"shop\"]\n\n[[table]]\nname = \"shop.customer\"\n\
             description = \"People who bought something.\"\n\n\
             [[table.column]]\nname = \"customer_id\"\n\n\
             [[table.column]]\nname = \"country\"\n\
             db = { type = \"text\", nullable = true, values = [\"Brazil\", \"Canada\"] }\n",
        )
        .await;
    // The routine login's password no longer works: the command succeeds only as the owner.
    stack
        .moto
        .put_secret(
            &stack.secrets[4],
            &json!({"username": stack.user("admin"), "password": "not-its-password"}),
        )
        .await;
    let model = parley_testkit::model_dir();
    let admin = Admin::new(stack.admin().base.overlay([
        ("ADMIN_ROUTINE_SECRET_ID", stack.secrets[4].as_str()),
        ("EMBEDDINGS_MODEL_DIR", model.to_str().unwrap()),
    ]))
    .unwrap();

    let scheduled: Value = serde_json::from_str(
        r#"{"command": ["catalog", "index", "s3://team-config/parley/catalog.toml"]}"#,
    )
    .unwrap();
    let indexed = admin.handle(scheduled, TIME_LEFT).await.unwrap();
    assert_eq!(indexed["ok"], true, "{indexed}");
    assert!(
        indexed["output"]
            .as_str()
            .unwrap()
            .starts_with("search index: 3 entries, 2 values of 1 text columns"),
        "{indexed}"
    );
    assert_eq!(
        stack
            .one::<i64>("SELECT count(*) FROM parley.catalog_values")
            .await,
        2
    );

    let missing = admin
        .handle(
            json!({"command": ["catalog", "index", "s3://team-config/parley/gone.toml"]}),
            TIME_LEFT,
        )
        .await
        .unwrap();
    assert_eq!(missing["ok"], false);
    let error = missing["error"].as_str().unwrap();
    assert!(
        error.starts_with("s3://team-config/parley/gone.toml: S3 has no such key"),
        "{error}"
    );
    assert!(error.contains("the template's CatalogFileS3Uri"), "{error}");
}
