//! `TestDb`: one uniquely named database per test, migrated, optionally with the demo domains
//! (feedback and tasks, or a slice of the manual), plus a LOGIN role in `parley_readonly` so
//! tests can connect exactly as the MCP function does (and, with the demo domains, may switch
//! to their write roles as the MCP function's does).
//! A database is dropped when the last clone of its `TestDb` goes (`PARLEY_KEEP_TEST_DBS=1`
//! keeps them for a post-mortem); `scripts/test` drops any a killed test left behind. A full
//! run makes about a thousand: kept, they would fill a small CI disk and take the server down.

use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::{Client, NoTls};
use url::Url;
use uuid::Uuid;

use parley_core::db::pg_message;
use parley_domain_documents::ManualOptions;

/// The LOGIN role `readonly_url` connects as. Roles are cluster-wide, so all test databases
/// share it; it is a member of `parley_readonly` (created by migration 0001), and once a test
/// loaded the demo domains it may also `SET ROLE parley_tasks_writer` (granted `WITH INHERIT
/// FALSE, SET TRUE`: it never writes with that role's rights unless it switches to it).
pub const READONLY_USER: &str = "parley_mcp_test";
/// Only matters when `DATABASE_URL` points at a server that checks passwords.
const READONLY_PASSWORD: &str = "parley_mcp_test";
/// The LOGIN role [`TestDb::sql_reader_url`] connects as: a member of
/// `parley_sql_reader` (migration 0007) and nothing else, as docs/sql.md tells a deployment.
pub const SQL_READER_USER: &str = "parley_sql_test";

/// Serialises the cluster-wide role DDL below across tests running in parallel. Advisory
/// locks are per database, so it is taken on the admin connection, which all tests share.
const ROLE_LOCK_KEY: i64 = 0x7061_726c_6579_726f; // ASCII "parleyro"

/// A fresh database named `parley_test_<uuid>`, migrated to the current schema.
#[derive(Debug, Clone)]
pub struct TestDb {
    pub name: String,
    /// Superuser URL for this database.
    pub url: String,
    /// URL for this database as [`READONLY_USER`], a member of `parley_readonly`.
    pub readonly_url: String,
    /// Shared by the clones; the last one to go drops the database.
    _dropper: Arc<Dropper>,
}

impl TestDb {
    /// A fresh, migrated database on the server at `DATABASE_URL` (a superuser URL).
    pub async fn migrated() -> TestDb {
        TestDb::migrated_on(&admin_url()).await
    }

    /// A fresh, migrated database on the server at `admin_url` (a superuser URL), e.g. a
    /// [`crate::TestCluster`]'s.
    pub async fn migrated_on(admin_url: &str) -> TestDb {
        let name = format!("parley_test_{}", Uuid::new_v4().simple());
        let admin = connect(admin_url).await;
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap_or_else(|e| panic!("CREATE DATABASE {name} failed: {}", pg_message(&e)));

        let url = replace_url(admin_url, |u| u.set_path(&format!("/{name}")));
        let readonly_url = url_as(&url, READONLY_USER, READONLY_PASSWORD);

        let mut client = connect(&url).await;
        parley_core::migrate::run(&mut client)
            .await
            .unwrap_or_else(|e| panic!("migrating test database {name} failed: {e}"));
        ensure_login(&admin, READONLY_USER, READONLY_PASSWORD, "parley_readonly").await;

        TestDb::new(name, url, readonly_url, admin_url)
    }

    /// A `TestDb` for the database `name` that `admin_url`'s server holds, dropped when the
    /// last clone goes.
    pub(crate) fn new(name: String, url: String, readonly_url: String, admin_url: &str) -> TestDb {
        TestDb {
            _dropper: Arc::new(Dropper {
                admin_url: admin_url.to_owned(),
                name: name.clone(),
            }),
            name,
            url,
            readonly_url,
        }
    }

    /// [`TestDb::migrated`] plus `parley demo-data`: every demo domain (feedback with
    /// `feedback` rows and the default seed, tasks with its seed).
    pub async fn with_demo_data(feedback: u64) -> TestDb {
        TestDb::with_demo_data_on(&admin_url(), feedback).await
    }

    /// [`TestDb::migrated_on`] plus `parley demo-data`, as [`TestDb::with_demo_data`].
    pub async fn with_demo_data_on(admin_url: &str, feedback: u64) -> TestDb {
        let db = TestDb::migrated_on(admin_url).await;
        let mut client = db.client().await;
        let opts = parley_cli::demo::DemoOptions {
            feedback,
            ..Default::default()
        };
        parley_cli::demo::load(&mut client, &opts)
            .await
            .unwrap_or_else(|e| panic!("loading demo data into {} failed: {e}", db.name));
        grant_to_login(&connect(admin_url).await, parley_domain_tasks::WRITER_ROLE).await;
        db
    }

    /// [`TestDb::migrated`] plus `parley demo-data --domain documents` on a slice of the manual:
    /// `pages_per_part` pages of each part, spread over it, embedded with the built-in model.
    /// Needs the manual (`apt-get install postgresql-doc-15`) and the model
    /// (`scripts/model install`); panics saying so. About 10 pages a part is a few seconds.
    pub async fn with_documents(pages_per_part: usize) -> TestDb {
        TestDb::with_manual(ManualOptions {
            pages_per_part: Some(pages_per_part),
            ..ManualOptions::default()
        })
        .await
    }

    /// [`TestDb::migrated`] plus the documents domain with these options (e.g. a slice that
    /// `include`s the pages a test asks about).
    pub async fn with_manual(manual: ManualOptions) -> TestDb {
        let db = TestDb::migrated().await;
        let mut client = db.client().await;
        let opts = parley_cli::demo::DemoOptions {
            domains: vec![parley_cli::demo::Domain::Documents],
            manual,
            embedder: Some(crate::embeddings::embedder()),
            ..Default::default()
        };
        parley_cli::demo::load(&mut client, &opts)
            .await
            .unwrap_or_else(|e| panic!("loading the manual into {} failed: {e}", db.name));
        db
    }

    /// Makes `role` a write role the MCP function's login may switch to, as a deployment does:
    /// `NOLOGIN IN ROLE parley_tool_writer`, granted to [`READONLY_USER`] `WITH INHERIT FALSE,
    /// SET TRUE`. Then runs `grants` (the test's own table grants) in this database as the
    /// superuser. The role is created on the server at `DATABASE_URL`, under the role lock.
    pub async fn writer_role(&self, role: &str, grants: &str) {
        let admin = connect(&self.server_url()).await;
        let sql = format!(
            "DO $$
            BEGIN
                IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = '{role}') THEN
                    CREATE ROLE {role} NOLOGIN IN ROLE parley_tool_writer;
                END IF;
            EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
            END $$;"
        );
        with_role_lock(&admin, &sql, &format!("creating role {role}")).await;
        grant_to_login(&admin, role).await;
        self.client()
            .await
            .batch_execute(grants)
            .await
            .unwrap_or_else(|e| panic!("granting {role} its rights failed: {}", pg_message(&e)));
    }

    /// The superuser URL of this database's server (its `postgres` database), where roles
    /// are made under the role lock: the server at `DATABASE_URL` or the one given to
    /// [`TestDb::migrated_on`].
    fn server_url(&self) -> String {
        replace_url(&self.url, |u| u.set_path("/postgres"))
    }

    /// A superuser connection to this database.
    pub async fn client(&self) -> Client {
        connect(&self.url).await
    }

    /// Runs `grants` as the owner (e.g. `GRANT SELECT ON t TO parley_sql_reader`) and returns
    /// this database's URL as [`SQL_READER_USER`], the role the SQL tools run as.
    pub async fn sql_reader_url(&self, grants: &str) -> String {
        let admin = connect(&self.server_url()).await;
        ensure_login(
            &admin,
            SQL_READER_USER,
            SQL_READER_USER,
            "parley_sql_reader",
        )
        .await;
        // What docs/sql.md's recipe sets and the start-up check requires. Generous: every test
        // process on the server shares the role, and each SQL test opens a pool of its own.
        let limits = format!(
            "DO $$
            BEGIN
                IF (SELECT rolconnlimit FROM pg_catalog.pg_roles WHERE rolname = '{SQL_READER_USER}') < 0 THEN
                    ALTER ROLE {SQL_READER_USER} CONNECTION LIMIT 100;
                END IF;
                IF NOT EXISTS (SELECT FROM pg_catalog.pg_db_role_setting s
                               JOIN pg_catalog.pg_roles r ON r.oid = s.setrole
                               WHERE r.rolname = '{SQL_READER_USER}' AND s.setdatabase = 0
                                 AND 'temp_file_limit=256MB' = ANY(s.setconfig)) THEN
                    ALTER ROLE {SQL_READER_USER} SET temp_file_limit = '256MB';
                END IF;
            END $$;"
        );
        with_role_lock(&admin, &limits, "limiting the SQL reader role").await;
        self.client()
            .await
            .batch_execute(grants)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "granting the SQL reader its rights failed: {}",
                    pg_message(&e)
                )
            });
        url_as(&self.url, SQL_READER_USER, SQL_READER_USER)
    }

    /// A connection to this database as [`READONLY_USER`].
    pub async fn readonly_client(&self) -> Client {
        connect(&self.readonly_url).await
    }
}

/// Drops its database on `Drop`: `WITH (FORCE)`, since a test's servers may still hold pooled
/// connections to it. Best effort and bounded: a server a test already stopped is skipped.
#[derive(Debug)]
struct Dropper {
    admin_url: String,
    name: String,
}

/// How long a drop may wait to connect; a stopped server refuses at once.
const DROP_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

impl Drop for Dropper {
    fn drop(&mut self) {
        if std::env::var_os("PARLEY_KEEP_TEST_DBS").is_some_and(|v| v == "1") {
            return;
        }
        let (url, name) = (self.admin_url.clone(), self.name.clone());
        // A thread with a runtime of its own: this may run on the test's runtime thread, which
        // cannot block on a future. Joined, so the test process never exits mid-drop.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(async {
                let (client, connection) = tokio::time::timeout(
                    DROP_CONNECT_TIMEOUT,
                    tokio_postgres::connect(&url, NoTls),
                )
                .await
                .map_err(|_| "timed out connecting".to_owned())?
                .map_err(|e| e.to_string())?;
                tokio::spawn(connection);
                client
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .await
                    .map_err(|e| pg_message(&e))
            })
        })
        .join();
        if let Ok(Err(e)) = dropped {
            // Not a failure of the test: scripts/test drops what is left at the end.
            eprintln!("testkit: could not drop test database {}: {e}", self.name);
        }
    }
}

/// Connects without TLS and drives the connection on the current Tokio runtime.
pub async fn connect(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|e| panic!("connecting to {} failed: {e}", redact(url)));
    tokio::spawn(async move {
        // Expected when a test stops the server under an open connection; just note it.
        if let Err(e) = connection.await {
            eprintln!("testkit: postgres connection closed: {e}");
        }
    });
    client
}

/// `DATABASE_URL`, the superuser URL every test database is created from.
fn admin_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| {
        panic!(
            "DATABASE_URL is not set: run the tests with `scripts/test` (it starts a local \
             Postgres), or set DATABASE_URL to a superuser URL of a disposable server"
        )
    })
}

/// Creates the LOGIN role `user`, a member of `group`, once per cluster (and makes it a member
/// again if it lost the membership).
async fn ensure_login(admin: &Client, user: &str, password: &str, group: &str) {
    let sql = format!(
        "DO $$
        BEGIN
            IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = '{user}') THEN
                CREATE ROLE {user} LOGIN PASSWORD '{password}' IN ROLE {group};
            END IF;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
        END $$;
        DO $$
        BEGIN
            IF NOT pg_has_role('{user}', '{group}', 'MEMBER') THEN
                GRANT {group} TO {user};
            END IF;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
        END $$;"
    );
    with_role_lock(admin, &sql, &format!("creating role {user}")).await;
}

/// Lets the LOGIN role switch to the write role `role`, as scripts/dev lets parley_mcp: `SET`
/// but not `INHERIT`, so outside a write tool's `SET LOCAL ROLE` it stays read-only.
async fn grant_to_login(admin: &Client, role: &str) {
    let sql = format!(
        "DO $$
        BEGIN
            IF NOT EXISTS (SELECT FROM pg_catalog.pg_auth_members
                            WHERE roleid = '{role}'::regrole AND member = '{READONLY_USER}'::regrole) THEN
                GRANT {role} TO {READONLY_USER} WITH INHERIT FALSE, SET TRUE;
            END IF;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
        END $$;"
    );
    with_role_lock(admin, &sql, &format!("granting {role} to {READONLY_USER}")).await;
}

/// Runs cluster-wide role DDL once at a time. Parallel tests race to run it: the advisory lock
/// serialises them, and the statements' exception handlers cover anyone running it without.
async fn with_role_lock(admin: &Client, sql: &str, what: &str) {
    admin
        .execute("SELECT pg_advisory_lock($1)", &[&ROLE_LOCK_KEY])
        .await
        .unwrap_or_else(|e| panic!("taking the role advisory lock failed: {}", pg_message(&e)));
    let done = admin.batch_execute(sql).await;
    // Unlock before panicking so one failure does not stall every other test's setup.
    let unlocked = admin
        .execute("SELECT pg_advisory_unlock($1)", &[&ROLE_LOCK_KEY])
        .await;
    done.unwrap_or_else(|e| panic!("{what} failed: {}", pg_message(&e)));
    unlocked.unwrap_or_else(|e| panic!("releasing the role advisory lock failed: {e}"));
}

/// `url` with `user` and `password` as its credentials.
fn url_as(url: &str, user: &str, password: &str) -> String {
    replace_url(url, |u| {
        u.set_username(user)
            .and_then(|()| u.set_password(Some(password)))
            .expect("a postgres:// URL with a host takes a username and password");
    })
}

fn replace_url(url: &str, edit: impl FnOnce(&mut Url)) -> String {
    let mut parsed = Url::parse(url).unwrap_or_else(|e| {
        panic!(
            "DATABASE_URL must be a postgres://user@host:port/db URL ({e}): {}",
            redact(url)
        )
    });
    edit(&mut parsed);
    parsed.into()
}

/// Keeps passwords out of panic messages.
fn redact(url: &str) -> String {
    match Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.into()
        }
        Ok(parsed) => parsed.into(),
        Err(_) => "<unparsable URL>".to_owned(),
    }
}
