//! `TestCluster`: a private, throwaway Postgres server for tests that stop and restart the
//! database, so they never disturb the shared server at `DATABASE_URL`. Synchronous on
//! purpose: it must also work from `Drop`, and each step takes well under a second.

use std::ffi::OsString;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::net::TcpListener;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use uuid::Uuid;

/// initdb and postgres refuse to run as root; `scripts/pg` uses the same system user.
pub(crate) const PG_USER: &str = "parley-pg";
const READY_TIMEOUT: Duration = Duration::from_secs(30);
const PORT_ATTEMPTS: usize = 5;

/// A Postgres server of its own in a fresh directory under `$PARLEY_PG_HOME/clusters/`,
/// listening on a free port on 127.0.0.1 with trust auth for `postgres` (and, from
/// [`TestCluster::start_with_passwords`], password checks for every other role). Dropping it
/// stops the server (`-m immediate`) and deletes the directory.
#[derive(Debug)]
pub struct TestCluster {
    bin: PathBuf,
    dir: PathBuf,
    data: PathBuf,
    port: u16,
    run_as: Option<&'static str>,
    running: bool,
}

impl TestCluster {
    /// initdb + start. Panics with initdb's or the server's log when either fails.
    pub fn start() -> TestCluster {
        TestCluster::start_with(Auth::Trust)
    }

    /// Like [`TestCluster::start`], but every role except `postgres` must log in with its
    /// password (scram-sha-256): for tests of refused and rotated passwords, which the shared
    /// server (trust auth) cannot show.
    pub fn start_with_passwords() -> TestCluster {
        TestCluster::start_with(Auth::PasswordsExceptSuperuser)
    }

    /// Like [`TestCluster::start`], with `conf` (postgresql.conf lines) added before the first
    /// start: for settings only a restart takes, such as the logging collector.
    pub fn start_with_conf(conf: &str) -> TestCluster {
        TestCluster::start_with_and(Auth::Trust, conf)
    }

    fn start_with(auth: Auth) -> TestCluster {
        TestCluster::start_with_and(auth, "")
    }

    fn start_with_and(auth: Auth, conf: &str) -> TestCluster {
        let bin = bin_dir();
        let run_as = is_root().then(|| {
            ensure_pg_user();
            PG_USER
        });
        let home = std::env::var_os("PARLEY_PG_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(pg_home);
        let clusters = home.join("clusters");
        fs::create_dir_all(&clusters)
            .unwrap_or_else(|e| panic!("creating {}: {e}", clusters.display()));
        // The server user must be able to traverse into its own directory.
        for dir in [&home, &clusters] {
            if dir.metadata().is_ok_and(|m| m.uid() == current_uid()) {
                fs::set_permissions(dir, fs::Permissions::from_mode(0o755))
                    .unwrap_or_else(|e| panic!("chmod {}: {e}", dir.display()));
            }
        }
        let dir = clusters.join(Uuid::new_v4().simple().to_string());
        fs::create_dir(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        if let Some(user) = run_as {
            let (uid, gid) = (id(user, "-u"), id(user, "-g"));
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .unwrap_or_else(|e| panic!("chown {} to {user}: {e}", dir.display()));
        }

        let mut cluster = TestCluster {
            data: dir.join("data"),
            bin,
            dir,
            port: 0,
            run_as,
            running: false,
        };
        cluster.initdb();
        cluster.append_conf(conf);
        if auth == Auth::PasswordsExceptSuperuser {
            // Written before the first start, so no reload is needed. First match wins.
            cluster.write_hba(
                "host all postgres 127.0.0.1/32 trust\n\
                 host all all 127.0.0.1/32 scram-sha-256\n",
            );
        }
        cluster.start_on_free_port();
        cluster
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres` (superuser, trust auth).
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's data directory (its `log/` holds what the logging collector writes).
    pub fn data_dir(&self) -> &Path {
        &self.data
    }

    /// Stops the server (`pg_ctl stop -m fast`), keeping its data for [`TestCluster::restart`].
    pub fn stop(&mut self) {
        if !self.running {
            return;
        }
        let out = self.pg_ctl(&["stop", "-m", "fast", "-w", "-t", "60"]);
        if !out.status.success() {
            panic!(
                "pg_ctl stop failed: {}{}",
                String::from_utf8_lossy(&out.stderr),
                self.log_tail()
            );
        }
        self.running = false;
    }

    /// Stops the server if it is running and starts it again on the same port.
    pub fn restart(&mut self) {
        self.stop();
        if let Err(log) = self.start_server() {
            panic!("restarting postgres on port {} failed:\n{log}", self.port);
        }
    }

    fn initdb(&self) {
        let locale = if has_c_utf8_locale() { "C.UTF-8" } else { "C" };
        let args: Vec<OsString> = vec![
            "-D".into(),
            self.data.clone().into(),
            "--auth=trust".into(),
            "-U".into(),
            "postgres".into(),
            "--encoding=UTF8".into(),
            // Throwaway data: skipping the final fsync of the new cluster saves seconds.
            "--no-sync".into(),
            format!("--locale={locale}").into(),
        ];
        let out = self.as_pg(&self.bin.join("initdb"), &args);
        if !out.status.success() {
            panic!(
                "initdb into {} failed ({}):\n{}{}",
                self.data.display(),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // Only TCP (no unix socket to clean up); throwaway data, so no durability; small,
        // because several of these may run next to the shared server.
        self.append_conf(
            "listen_addresses = '127.0.0.1'\n\
             unix_socket_directories = ''\n\
             max_connections = 50\n\
             shared_buffers = 32MB\n\
             fsync = off\n\
             synchronous_commit = off\n\
             full_page_writes = off\n",
        );
    }

    /// A free port can be taken by someone else between our probe and postgres' bind; then
    /// try another one.
    fn start_on_free_port(&mut self) {
        let mut last_log = String::new();
        for _ in 0..PORT_ATTEMPTS {
            self.port = free_port();
            self.append_conf(&format!("port = {}\n", self.port));
            match self.start_server() {
                Ok(()) => return,
                Err(log) if log.contains("could not bind") || log.contains("already in use") => {
                    last_log = log;
                }
                Err(log) => panic!("starting postgres in {} failed:\n{log}", self.dir.display()),
            }
        }
        panic!("postgres found no free port in {PORT_ATTEMPTS} attempts:\n{last_log}");
    }

    /// pg_ctl start, then pg_isready until it answers; on failure returns the diagnostics.
    fn start_server(&mut self) -> Result<(), String> {
        let log = self.dir.join("postgres.log");
        let out = self.pg_ctl(&["start", "-w", "-t", "60", "-l", &log.to_string_lossy()]);
        if !out.status.success() {
            return Err(format!(
                "pg_ctl start: {}{}",
                String::from_utf8_lossy(&out.stderr),
                self.log_tail()
            ));
        }
        self.running = true;
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let ready = Command::new(self.bin.join("pg_isready"))
                .args(["-q", "-h", "127.0.0.1", "-U", "postgres", "-p"])
                .arg(self.port.to_string())
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "not ready after {READY_TIMEOUT:?}{}",
                    self.log_tail()
                ));
            }
            sleep(Duration::from_millis(100));
        }
    }

    fn pg_ctl(&self, args: &[&str]) -> Output {
        let mut all: Vec<OsString> = vec![args[0].into(), "-D".into(), self.data.clone().into()];
        all.extend(args[1..].iter().map(OsString::from));
        self.as_pg(&self.bin.join("pg_ctl"), &all)
    }

    /// Runs a Postgres binary as the server user (directly when not root), from our own
    /// directory so it never inherits an unreadable working directory.
    fn as_pg(&self, program: &Path, args: &[OsString]) -> Output {
        let mut cmd = match self.run_as {
            Some(user) => {
                let mut cmd = Command::new("runuser");
                cmd.args(["-u", user, "--"]).arg(program);
                cmd
            }
            None => Command::new(program),
        };
        cmd.args(args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", program.display()))
    }

    fn write_hba(&self, lines: &str) {
        let path = self.data.join("pg_hba.conf");
        // Truncating keeps the file's owner (the server user) and mode.
        OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&path)
            .and_then(|mut f| f.write_all(lines.as_bytes()))
            .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    }

    fn append_conf(&self, lines: &str) {
        let path = self.data.join("postgresql.conf");
        OpenOptions::new()
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(lines.as_bytes()))
            .unwrap_or_else(|e| panic!("appending to {}: {e}", path.display()));
    }

    fn log_tail(&self) -> String {
        let log = fs::read_to_string(self.dir.join("postgres.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(30)..].join("\n");
        format!("\n--- postgres.log (tail) ---\n{tail}")
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        if self.running {
            // Best effort: never panic in Drop, it would abort a test that is already failing.
            let _ = self.pg_ctl(&["stop", "-m", "immediate", "-w", "-t", "30"]);
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Auth {
    Trust,
    PasswordsExceptSuperuser,
}

/// The directory of `psql` and the other Postgres binaries: `$PARLEY_PG_BIN` (set by
/// `scripts/test`), else what `scripts/pg` installs.
/// `scripts/pg ARG`'s output, trimmed.
fn scripts_pg(arg: &str) -> std::process::Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/pg");
    Command::new(&script)
        .arg(arg)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("running {} {arg}: {e}", script.display()))
}

/// This clone's Postgres home as `scripts/pg home` names it (one per clone), where
/// `scripts/test` cleans up private servers left behind.
fn pg_home() -> PathBuf {
    let out = scripts_pg("home");
    if !out.status.success() {
        panic!("`scripts/pg home` failed; run `scripts/test` or set PARLEY_PG_HOME");
    }
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

pub fn bin_dir() -> PathBuf {
    let bin = match std::env::var_os("PARLEY_PG_BIN") {
        Some(bin) => PathBuf::from(bin),
        None => {
            // Installing is a no-op when already there, and scripts/pg locks against races.
            if !scripts_pg("install").status.success() {
                panic!("`scripts/pg install` failed; run `scripts/test` or set PARLEY_PG_BIN");
            }
            PathBuf::from(String::from_utf8_lossy(&scripts_pg("bin").stdout).trim())
        }
    };
    if !bin.join("initdb").is_file() {
        panic!(
            "no Postgres binaries in {} (PARLEY_PG_BIN): run `scripts/pg install` or `scripts/test`",
            bin.display()
        );
    }
    bin
}

fn current_uid() -> u32 {
    // /proc/self belongs to the effective user; avoids `unsafe` libc::geteuid.
    fs::metadata("/proc/self")
        .map(|m| m.uid())
        .expect("reading /proc/self (TestCluster needs Linux)")
}

pub(crate) fn is_root() -> bool {
    current_uid() == 0
}

/// Same user as `scripts/pg start` creates; tolerant of parallel tests creating it too.
pub(crate) fn ensure_pg_user() {
    let exists = || {
        Command::new("id")
            .args(["-u", PG_USER])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if exists() {
        return;
    }
    let _ = Command::new("useradd")
        .args(["--system", "--no-create-home", "--home-dir", "/nonexistent"])
        .args(["--shell", "/usr/sbin/nologin", PG_USER])
        .status();
    if !exists() {
        panic!("could not create system user {PG_USER} (useradd) to run Postgres as");
    }
}

fn id(user: &str, flag: &str) -> u32 {
    let out = Command::new("id")
        .args([flag, user])
        .output()
        .unwrap_or_else(|e| panic!("running id {flag} {user}: {e}"));
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("id {flag} {user} gave no number ({e})"))
}

fn has_c_utf8_locale() -> bool {
    Command::new("locale")
        .arg("-a")
        .output()
        .map(|out| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .any(|l| l.eq_ignore_ascii_case("C.UTF-8") || l.eq_ignore_ascii_case("C.utf8"))
        })
        .unwrap_or(false)
}

pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("binding 127.0.0.1:0 to find a free port")
}
