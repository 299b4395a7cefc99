//! The function under test as a child process on a free loopback port, killed by pid when the
//! guard drops (normal end, error or panic), plus its memory figures from `/proc`.

use std::net::{Ipv4Addr, TcpListener};
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

pub struct Server {
    child: Child,
    pub base: String,
}

impl Server {
    /// Starts `bin` with `env` on a free port and waits until `GET /health` answers 200.
    pub async fn start(bin: &Path, env: &[(&str, String)]) -> anyhow::Result<Self> {
        Self::start_on(bin, free_port()?, env).await
    }

    /// [`Server::start`] on `port` (from [`free_port`]), for a server whose settings name its
    /// own URL.
    pub async fn start_on(bin: &Path, port: u16, env: &[(&str, String)]) -> anyhow::Result<Self> {
        let mut server = Self::spawn_on(bin, port, env)?;
        server.wait_until_ready().await?;
        Ok(server)
    }

    /// Starts `bin` with `env` on `port` without waiting for it: for timing start-up itself.
    pub fn spawn_on(bin: &Path, port: u16, env: &[(&str, String)]) -> anyhow::Result<Self> {
        if !bin.is_file() {
            bail!(
                "{} not found; build it with `cargo build --release -p parley-mcp -p parley-chat` \
                 or pass its path (--mcp-bin / --chat-bin)",
                bin.display()
            );
        }
        let mut command = Command::new(bin);
        // Settings from the caller's shell (TOOLS_FILE, HISTORY_LIMIT, SECRET_IDS,
        // AWS_LAMBDA_RUNTIME_API, ...) must not change what is measured: the server gets only
        // the settings given here.
        command.env_clear();
        if let Some(path) = std::env::var_os("PATH") {
            command.env("PATH", path);
        }
        command.env("LISTEN_ADDR", format!("127.0.0.1:{port}"));
        for (k, v) in env {
            command.env(k, v);
        }
        let child = command
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok(Server {
            child,
            base: format!("http://127.0.0.1:{port}"),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until `GET /health` answers 200 (30 s at most).
    pub async fn wait_until_ready(&mut self) -> anyhow::Result<()> {
        let http = reqwest::Client::new();
        let url = format!("{}/health", self.base);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self
                .child
                .try_wait()
                .context("checking the server process")?
            {
                bail!("the server exited during start-up ({status})");
            }
            if let Ok(r) = http.get(&url).send().await
                && r.status().is_success()
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the server did not answer {url} with 200 within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// (VmRSS, VmHWM) in KiB: resident memory now and its peak over the process's life.
    pub fn memory(&self) -> anyhow::Result<(u64, u64)> {
        memory(&format!("/proc/{}/status", self.pid()))
    }

    /// Whether the process has exited (with its status), without waiting.
    pub fn exited(&mut self) -> anyhow::Result<Option<std::process::ExitStatus>> {
        self.child.try_wait().context("checking the server process")
    }

    /// CPU time its threads alive now have used so far, to the nanosecond: the scheduler's own
    /// count (`/proc/<pid>/task/*/schedstat`). A thread that has ended no longer counts, so this
    /// is for a stretch of work on threads that stay (a chat's runtime thread).
    pub fn thread_cpu_time(&self) -> anyhow::Result<Duration> {
        let tasks = format!("/proc/{}/task", self.pid());
        let mut total = 0u64;
        for task in std::fs::read_dir(&tasks).with_context(|| format!("reading {tasks}"))? {
            // A thread ending meanwhile leaves no file to read: it no longer counts.
            let Ok(stat) = std::fs::read_to_string(task?.path().join("schedstat")) else {
                continue;
            };
            total += stat
                .split_whitespace()
                .next()
                .and_then(|ns| ns.parse::<u64>().ok())
                .with_context(|| format!("no run time in a schedstat of {tasks}: {stat}"))?;
        }
        Ok(Duration::from_nanos(total))
    }

    /// CPU time (user + system) the process has used so far, at clock-tick resolution (10 ms).
    pub fn cpu_time(&self) -> anyhow::Result<Duration> {
        let path = format!("/proc/{}/stat", self.pid());
        let stat = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        // Fields after the command name, which is in parentheses and may contain spaces:
        // state is field 3, utime 14, stime 15.
        let rest = stat
            .rsplit_once(')')
            .map(|(_, r)| r)
            .with_context(|| format!("no command name in {path}"))?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks = |i: usize| -> anyhow::Result<u64> {
            fields
                .get(i - 3)
                .and_then(|f| f.parse().ok())
                .with_context(|| format!("no field {i} in {path}"))
        };
        // USER_HZ is 100 on Linux.
        Ok(Duration::from_millis((ticks(14)? + ticks(15)?) * 10))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Child::kill signals this child's pid only (SIGKILL): nothing else is touched.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port the kernel just handed out; released for the child to bind (a tiny race, fine for a
/// bench on one machine).
pub fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("finding a free port")?;
    Ok(listener.local_addr()?.port())
}

/// (VmRSS, VmHWM) in KiB from a `/proc/<pid>/status` file (`/proc/self/status` for the bench).
pub fn memory(path: &str) -> anyhow::Result<(u64, u64)> {
    let status = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| {
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .with_context(|| format!("no {name} in {path}"))
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}
