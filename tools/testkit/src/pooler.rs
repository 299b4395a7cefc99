//! `PgBouncer`: Debian's PgBouncer in transaction mode in front of the test Postgres, as RDS
//! Proxy or PgBouncer sit in front of a deployment's database. Each (database, user) pair gets
//! `server_pool` server connections that every client's transactions take turns on, so with a
//! pool of one, anything a client leaves on its session (a named prepared statement, a setting,
//! an advisory lock) is met by the next client, and [`PgBouncer::leftovers`] can see it.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use url::Url;

use crate::cluster::{PG_USER, ensure_pg_user, free_port, is_root};
use crate::db::{READONLY_USER, SQL_READER_USER, connect};

/// Where Debian's package puts it; `PARLEY_PGBOUNCER` names another.
const DEFAULT_BINARY: &str = "/usr/sbin/pgbouncer";

/// A running PgBouncer, stopped when dropped.
pub struct PgBouncer {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl PgBouncer {
    /// PgBouncer in front of the server `server_url` (any URL of it: host and port are used),
    /// in transaction mode with `server_pool` server connections per database and user, trust
    /// authentication (the test server trusts loopback too) for the test roles and the server
    /// URL's user. Panics, naming the package, when PgBouncer is not installed.
    pub fn start(server_url: &str, server_pool: u32) -> PgBouncer {
        PgBouncer::start_with(server_url, server_pool, false)
    }

    /// Like [`PgBouncer::start`], but handing the pool's idle server connections out in turn
    /// (`server_round_robin`) instead of the last one freed. Once [`PgBouncer::open`] has
    /// opened two or more, a client's consecutive transactions land on different server
    /// connections, so a statement prepared by name in one and used in the next fails at once
    /// ("prepared statement ... does not exist"), as it would behind a busy pooler, where
    /// with a pool of one it fails only when another client comes between.
    pub fn start_rotating(server_url: &str, server_pool: u32) -> PgBouncer {
        PgBouncer::start_with(server_url, server_pool, true)
    }

    fn start_with(server_url: &str, server_pool: u32, round_robin: bool) -> PgBouncer {
        let binary = std::env::var("PARLEY_PGBOUNCER").unwrap_or_else(|_| DEFAULT_BINARY.into());
        assert!(
            std::path::Path::new(&binary).exists(),
            "{binary} is missing: apt-get install pgbouncer (scripts/test installs it)"
        );
        let server = Url::parse(server_url).expect("a postgres:// URL");
        let (host, server_port) = (
            server.host_str().unwrap_or("127.0.0.1").to_owned(),
            server.port().unwrap_or(5432),
        );
        let dir = tempfile::Builder::new()
            .prefix("parley-pgbouncer-")
            .tempdir()
            .expect("a temporary directory");
        // PgBouncer refuses to run as root: as root it runs as the server's user, which must
        // read its files and write its log there.
        let run_as = is_root().then(|| {
            ensure_pg_user();
            fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777))
                .expect("chmod the PgBouncer directory");
            PG_USER
        });
        let port = free_port();
        let users: Vec<String> = [
            server.username(),
            "postgres",
            READONLY_USER,
            SQL_READER_USER,
        ]
        .iter()
        .filter(|u| !u.is_empty())
        .map(|u| format!("\"{u}\" \"\"\n"))
        .collect();
        let path = |name: &str| -> PathBuf { dir.path().join(name) };
        fs::write(path("userlist.txt"), users.concat()).expect("writing userlist.txt");
        let config = format!(
            "[databases]\n\
             * = host={host} port={server_port}\n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {port}\n\
             unix_socket_dir =\n\
             auth_type = trust\n\
             auth_file = {users}\n\
             pool_mode = transaction\n\
             default_pool_size = {server_pool}\n\
             min_pool_size = 0\n\
             reserve_pool_size = 0\n\
             max_client_conn = 2000\n\
             max_db_connections = 0\n\
             ignore_startup_parameters = extra_float_digits\n\
             logfile = {log}\n\
             pidfile = {pid}\n\
             log_connections = 0\n\
             log_disconnections = 0\n\
             server_round_robin = {round_robin}\n",
            round_robin = u8::from(round_robin),
            users = path("userlist.txt").display(),
            log = path("pgbouncer.log").display(),
            pid = path("pgbouncer.pid").display(),
        );
        fs::write(path("pgbouncer.ini"), config).expect("writing pgbouncer.ini");
        let mut command = Command::new(&binary);
        if let Some(user) = run_as {
            command.args(["-u", user]);
        }
        let child = command
            .arg(path("pgbouncer.ini"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {binary}: {e}"));
        let bouncer = PgBouncer { child, port, dir };
        bouncer.wait_until_listening();
        bouncer
    }

    fn wait_until_listening(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "PgBouncer did not listen on port {} within 10 s; its log: {}",
                self.port,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Opens `n` server connections for `url`'s user and database: `n` clients each hold a
    /// transaction at once, then all end, leaving the connections idle in the pool.
    pub async fn open(&self, url: &str, n: usize) {
        let mut clients = Vec::with_capacity(n);
        for _ in 0..n {
            let client = connect(&self.url(url)).await;
            client
                .batch_execute("BEGIN; SELECT 1")
                .await
                .unwrap_or_else(|e| panic!("opening a server connection through PgBouncer: {e}"));
            clients.push(client);
        }
        for client in clients {
            client
                .batch_execute("COMMIT")
                .await
                .unwrap_or_else(|e| panic!("ending a transaction through PgBouncer: {e}"));
        }
    }

    /// `url` (a URL of the server behind it) going through PgBouncer instead.
    pub fn url(&self, url: &str) -> String {
        let mut parsed = Url::parse(url).expect("a postgres:// URL");
        parsed.set_host(Some("127.0.0.1")).expect("a host");
        parsed.set_port(Some(self.port)).expect("a port");
        parsed.into()
    }

    /// PgBouncer's log, for failure messages.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("pgbouncer.log")).unwrap_or_default()
    }

    /// What a session of `url`'s user and database (through PgBouncer: with a pool of one,
    /// *the* server connection every client of that user shared) holds past its transactions:
    /// named prepared statements, settings changed for the session, advisory locks and
    /// temporary tables in the database. Empty when the clients were pooler-safe.
    pub async fn leftovers(&self, url: &str) -> Vec<String> {
        let client = connect(&self.url(url)).await;
        let rows = client
            .simple_query(
                "SELECT 'prepared statement ' || name || ': ' || left(statement, 80) \
                   FROM pg_catalog.pg_prepared_statements \
                 UNION ALL \
                 SELECT 'session setting ' || name || ' = ' || setting \
                   FROM pg_catalog.pg_settings WHERE source = 'session' \
                    AND name NOT IN ('application_name', 'client_encoding', 'DateStyle', \
                                     'TimeZone', 'IntervalStyle', 'standard_conforming_strings') \
                 UNION ALL \
                 SELECT 'advisory lock ' || objid || ' of pid ' || pid \
                   FROM pg_catalog.pg_locks \
                  WHERE locktype = 'advisory' \
                    AND database = (SELECT oid FROM pg_catalog.pg_database \
                                     WHERE datname = current_database()) \
                 UNION ALL \
                 SELECT 'temporary table ' || relname FROM pg_catalog.pg_class \
                  WHERE relpersistence = 't' \
                 UNION ALL \
                 SELECT 'open cursor ' || name FROM pg_catalog.pg_cursors",
            )
            .await
            .unwrap_or_else(|e| panic!("checking the server session through PgBouncer: {e}"));
        rows.iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
                _ => None,
            })
            .collect()
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
