//! A Postgres server whose migrating role is not a superuser but has CREATEROLE, as the
//! master user of RDS and Aurora is.
//!
//! [`ManagedDb`] is a fresh database on the test server (`DATABASE_URL`, or another server's
//! superuser URL) that
//! [`MASTER_USER`] (`LOGIN NOSUPERUSER CREATEROLE CREATEDB`, nothing else) creates, owns,
//! migrates and fills, as a deployment's master does with `parley migrate`, `parley
//! demo-data` and `parley logins`. The test server is shared and never reconfigured; three
//! things the superuser does stand in for what a managed server provides:
//! - **The parameter group.** The server-wide `temp_file_limit` that a DB cluster parameter
//!   group sets on Aurora is `ALTER DATABASE <db> SET temp_file_limit = '256MB'`
//!   ([`TEMP_FILE_LIMIT`]), a per-database setting the SQL role's sessions see as they would
//!   the cluster's (`pg_settings.source` says `database` rather than `configuration file`).
//! - **Allow-listed extensions.** `rds_superuser` may create the extensions RDS allows; here
//!   the superuser creates `vector` (migration 0004's) in the database first, and the
//!   migration's `CREATE EXTENSION IF NOT EXISTS` finds it.
//! - **Roles made by earlier runs.** Roles are cluster-wide: on a managed server the master
//!   makes Parley's groups (`parley_readonly`, `parley_sql_reader`...) and so administers them
//!   (Postgres 16 grants a CREATEROLE role `ADMIN OPTION` on each role it creates, `INHERIT
//!   FALSE, SET FALSE`). On the shared test server other tests' superuser migrations may have
//!   made them first, so the superuser grants the master exactly that on every existing
//!   `parley_*` group, and nothing more: no `pg_read_all_stats`, `pg_signal_backend` or other
//!   member roles of `rds_superuser`, which no migration needs.
//!
//! The logins are made by the master, as `parley logins` makes them on RDS: [`MCP_LOGIN`]
//! (in `parley_readonly`) and [`SQL_LOGIN`] (in `parley_sql_reader`, with a connection limit
//! but no `temp_file_limit` of its own, which the master cannot set).

use tokio_postgres::Client;
use url::Url;
use uuid::Uuid;

use parley_core::db::pg_message;

use crate::TestDb;
use crate::db::connect;

/// The master: no superuser, as on RDS, where its `rds_superuser` membership adds nothing the
/// migrations use.
pub const MASTER_USER: &str = "parley_master_test";
/// The mcp function's login in managed databases (`TestDb::readonly_url`), made by the master.
pub const MCP_LOGIN: &str = "parley_mcp_managed_test";
/// The SQL tools' login in managed databases, made by the master.
pub const SQL_LOGIN: &str = "parley_sql_managed_test";
/// What stands in for the parameter group's `temp_file_limit` (see the module docs).
pub const TEMP_FILE_LIMIT: &str = "256MB";

/// Serialises cluster-wide role DDL with `TestDb`'s (the same key: `db.rs`'s `ROLE_LOCK_KEY`,
/// ASCII "parleyro"), taken on a connection to the server's `DATABASE_URL` database.
const ROLE_LOCK_KEY: i64 = 0x7061_726c_6579_726f;

/// A database made and migrated by [`MASTER_USER`].
#[derive(Debug, Clone)]
pub struct ManagedDb {
    /// `url` is the superuser's URL of this database (for tests to look at it), `readonly_url`
    /// [`MCP_LOGIN`]'s.
    pub db: TestDb,
    /// This database as [`MASTER_USER`].
    pub master_url: String,
    /// The server's superuser URL it was made from.
    admin_url: String,
}

impl ManagedDb {
    /// A fresh database on the server at `DATABASE_URL`, created, owned and migrated by the
    /// master.
    pub async fn migrated() -> ManagedDb {
        ManagedDb::migrated_on(&admin_url()).await
    }

    /// [`ManagedDb::migrated`] on the server at `admin_url` (a superuser URL), e.g. a
    /// [`crate::TestCluster`]'s or a [`crate::pin_lint::StatementLog`]'s.
    pub async fn migrated_on(admin_url: &str) -> ManagedDb {
        let admin_url = admin_url.to_owned();
        let admin = connect(&admin_url).await;
        ensure_master(&admin).await;
        let name = format!("parley_test_{}", Uuid::new_v4().simple());
        let master_server = with_user(&admin_url, MASTER_USER);
        connect(&master_server)
            .await
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap_or_else(|e| panic!("the master's CREATE DATABASE failed: {}", pg_message(&e)));
        admin
            .batch_execute(&format!(
                "ALTER DATABASE {name} SET temp_file_limit = '{TEMP_FILE_LIMIT}'"
            ))
            .await
            .unwrap_or_else(|e| panic!("setting temp_file_limit failed: {}", pg_message(&e)));
        let url = with_database(&admin_url, &name);
        connect(&url)
            .await
            .batch_execute("CREATE EXTENSION IF NOT EXISTS vector")
            .await
            .unwrap_or_else(|e| panic!("creating extension vector failed: {}", pg_message(&e)));
        let master_url = with_database(&master_server, &name);
        migrate(&admin, &master_url).await;
        let master = connect(&master_url).await;
        ensure_login(&master, &admin, MCP_LOGIN, "parley_readonly", "").await;
        ManagedDb {
            db: TestDb::new(name, url.clone(), with_user(&url, MCP_LOGIN), &admin_url),
            master_url,
            admin_url,
        }
    }

    /// [`ManagedDb::migrated`] plus `parley demo-data` run by the master (every demo domain,
    /// `feedback` rows).
    pub async fn with_demo_data(feedback: u64) -> ManagedDb {
        ManagedDb::with_demo_data_on(&admin_url(), feedback).await
    }

    /// [`ManagedDb::with_demo_data`] on the server at `admin_url` (a superuser URL).
    pub async fn with_demo_data_on(admin_url: &str, feedback: u64) -> ManagedDb {
        let db = ManagedDb::migrated_on(admin_url).await;
        let mut master = db.master_client().await;
        let opts = parley_cli::demo::DemoOptions {
            feedback,
            ..Default::default()
        };
        parley_cli::demo::load(&mut master, &opts)
            .await
            .unwrap_or_else(|e| panic!("the master's demo-data failed: {e}"));
        db
    }

    /// A connection to this database as the master.
    pub async fn master_client(&self) -> Client {
        connect(&self.master_url).await
    }

    /// Runs `grants` as the master (e.g. `GRANT SELECT ON t TO parley_sql_reader`) and returns
    /// this database's URL as [`SQL_LOGIN`], which the master makes once per server:
    /// `IN ROLE parley_sql_reader CONNECTION LIMIT 100` (generous: every test process shares
    /// it), no `temp_file_limit` of its own.
    pub async fn sql_reader_url(&self, grants: &str) -> String {
        let admin = connect(&self.admin_url).await;
        let master = self.master_client().await;
        ensure_login(
            &master,
            &admin,
            SQL_LOGIN,
            "parley_sql_reader",
            "CONNECTION LIMIT 100",
        )
        .await;
        master.batch_execute(grants).await.unwrap_or_else(|e| {
            panic!(
                "the master's grants to the SQL reader failed: {}",
                pg_message(&e)
            )
        });
        with_user(&self.db.url, SQL_LOGIN)
    }
}

/// Makes the master once per server and lets it administer the Parley groups other runs made.
async fn ensure_master(admin: &Client) {
    let sql = format!(
        "DO $$
        BEGIN
            IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = '{MASTER_USER}') THEN
                CREATE ROLE {MASTER_USER} LOGIN PASSWORD '{MASTER_USER}'
                    NOSUPERUSER CREATEROLE CREATEDB NOREPLICATION NOBYPASSRLS;
            END IF;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
        END $$;
        DO $$
        DECLARE
            r name;
        BEGIN
            FOR r IN SELECT g.rolname FROM pg_catalog.pg_roles g
                     WHERE g.rolname LIKE 'parley\\_%' AND NOT g.rolcanlogin
                       AND NOT EXISTS (SELECT FROM pg_catalog.pg_auth_members m
                                       WHERE m.roleid = g.oid AND m.admin_option
                                         AND m.member = '{MASTER_USER}'::regrole)
            LOOP
                EXECUTE format('GRANT %I TO {MASTER_USER} WITH ADMIN TRUE, INHERIT FALSE, SET FALSE', r);
            END LOOP;
        END $$;"
    );
    with_role_lock(admin, &sql, "making the master role").await;
}

/// Migrates as the master. A group another test's migration makes at the same moment is not
/// the master's to grant: then the master is given it as above and the migration (each file
/// is its own transaction) runs on from where it stopped.
async fn migrate(admin: &Client, master_url: &str) {
    let mut master = connect(master_url).await;
    let mut last = None;
    for _ in 0..3 {
        match parley_core::migrate::run(&mut master).await {
            Ok(_) => return,
            Err(e) => {
                last = Some(e.to_string());
                ensure_master(admin).await;
            }
        }
    }
    panic!(
        "migrating as the master failed: {}",
        last.unwrap_or_default()
    );
}

/// Makes `user` (LOGIN, in `group`, with `options`) as the master, once per server.
async fn ensure_login(master: &Client, admin: &Client, user: &str, group: &str, options: &str) {
    let sql = format!(
        "DO $$
        BEGIN
            IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = '{user}') THEN
                CREATE ROLE {user} LOGIN PASSWORD '{user}' IN ROLE {group} {options};
            END IF;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
        END $$;"
    );
    // The lock is held on the admin connection (it serialises everyone's role DDL); the DDL
    // itself runs as the master.
    lock(admin, true).await;
    let done = master.batch_execute(&sql).await;
    lock(admin, false).await;
    done.unwrap_or_else(|e| panic!("the master making {user} failed: {}", pg_message(&e)));
}

async fn with_role_lock(admin: &Client, sql: &str, what: &str) {
    lock(admin, true).await;
    let done = admin.batch_execute(sql).await;
    lock(admin, false).await;
    done.unwrap_or_else(|e| panic!("{what} failed: {}", pg_message(&e)));
}

async fn lock(admin: &Client, take: bool) {
    let sql = if take {
        "SELECT pg_advisory_lock($1)"
    } else {
        "SELECT pg_advisory_unlock($1)"
    };
    admin
        .execute(sql, &[&ROLE_LOCK_KEY])
        .await
        .unwrap_or_else(|e| panic!("the role advisory lock failed: {}", pg_message(&e)));
}

fn admin_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| {
        panic!("DATABASE_URL is not set: run the tests with `scripts/test` (a superuser URL)")
    })
}

/// `url` as `user`, whose password is its name (only matters on a server that checks).
fn with_user(url: &str, user: &str) -> String {
    let mut parsed = Url::parse(url).expect("DATABASE_URL is a postgres:// URL");
    parsed
        .set_username(user)
        .and_then(|()| parsed.set_password(Some(user)))
        .expect("a postgres:// URL with a host takes a username and password");
    parsed.into()
}

fn with_database(url: &str, database: &str) -> String {
    let mut parsed = Url::parse(url).expect("DATABASE_URL is a postgres:// URL");
    parsed.set_path(&format!("/{database}"));
    parsed.into()
}
