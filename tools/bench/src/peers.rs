//! `parley-bench mcp`'s three-way comparison: Parley's mcp, the official MCP Python SDK's
//! server (`tools/bench/peer/peer_server.py`) running the same `lad_by_ref` SQL through a
//! psycopg pool, and pgbench running that SQL prepared (the floor) and unnamed (planned each
//! time, as Parley sends it by default). Both servers are driven by
//! wrk (`--peer-threads` × `--peer-connections`), each with a pool of `--concurrency`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use parley_tools::tools::ToolSpec;
use serde_json::{Value, json};

/// What the comparison runs and where its tools are.
pub struct Setup<'a> {
    pub spec: &'a ToolSpec,
    /// The district every request looks up (by code): one argument, so all three run the
    /// same statement with the same value.
    pub lad_ref: String,
    pub bench_url: &'a str,
    pub parley_base: &'a str,
    pub parley_token: &'a str,
    /// The server's `MCP_STATEMENTS` (`unnamed` or `cached`): which pgbench mode is its like.
    pub statements: &'a str,
    pub pool: usize,
    pub threads: usize,
    pub connections: usize,
    pub seconds: u64,
    pub wrk: PathBuf,
    pub pgbench: PathBuf,
    pub python: PathBuf,
}

/// One contender's figures.
pub struct Outcome {
    pub name: &'static str,
    pub rps: f64,
    pub p50: Duration,
    pub p99: Duration,
    pub requests: u64,
}

pub async fn run(setup: &Setup<'_>) -> anyhow::Result<Vec<Outcome>> {
    for (tool, flag) in [
        (&setup.wrk, "--wrk"),
        (&setup.pgbench, "--pgbench"),
        (&setup.python, "--peer-python"),
    ] {
        if Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_err()
        {
            bail!(
                "{} not found (set {flag}); scripts/bench mcp installs wrk, pgbench and the \
                 Python SDK when missing, or leave `peers` out of --only",
                tool.display()
            );
        }
    }
    let work = tempdir()?;
    let result = compare(setup, &work).await;
    let _ = std::fs::remove_dir_all(&work);
    result
}

async fn compare(setup: &Setup<'_>, work: &Path) -> anyhow::Result<Vec<Outcome>> {
    let params = json!({"name": "lad_by_ref", "arguments": {"ref": setup.lad_ref}});
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});

    let peer = Peer::start(setup).await?;
    let parley_url = format!("{}/mcp", setup.parley_base);
    let auth = format!("Bearer {}", setup.parley_token);
    let expected = check_call(&parley_url, &body, Some(&auth)).await?;
    let peer_rows = check_call(&peer.url, &body, None).await?;
    if peer_rows != expected {
        bail!("the Python peer returned {peer_rows} rows where Parley returned {expected}");
    }

    let mut outcomes = Vec::new();
    eprintln!("three-way: pgbench ({} s)...", setup.seconds);
    outcomes.push(pgbench(setup, work, Mode::Prepared)?);
    eprintln!(
        "three-way: pgbench, unnamed statements ({} s)...",
        setup.seconds
    );
    outcomes.push(pgbench(setup, work, Mode::Unnamed)?);
    eprintln!("three-way: parley mcp under wrk ({} s)...", setup.seconds);
    outcomes.push(wrk(
        setup,
        work,
        "parley mcp",
        &parley_url,
        &body,
        Some(&auth),
    )?);
    eprintln!("three-way: python sdk under wrk ({} s)...", setup.seconds);
    outcomes.push(wrk(setup, work, "python sdk", &peer.url, &body, None)?);
    drop(peer);
    Ok(outcomes)
}

/// One `tools/call` through a server, checked: the rows it found.
async fn check_call(url: &str, body: &Value, auth: Option<&str>) -> anyhow::Result<u64> {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .body(body.to_string());
    if let Some(auth) = auth {
        request = request.header("authorization", auth);
    }
    let response = request
        .send()
        .await
        .with_context(|| format!("POST {url}"))?;
    let status = response.status();
    let text = response.text().await?;
    let v: Value =
        serde_json::from_str(&text).with_context(|| format!("{url}: HTTP {status}: {text}"))?;
    let result = &v["result"];
    if !status.is_success() || result["isError"] != Value::Bool(false) {
        bail!("{url}: tools/call failed: HTTP {status}: {v}");
    }
    // The SDK sends a dict result as text only; Parley sends it both ways.
    let text_rows = result["content"][0]["text"]
        .as_str()
        .and_then(|t| serde_json::from_str::<Value>(t).ok())
        .and_then(|t| t["row_count"].as_u64());
    result["structuredContent"]["row_count"]
        .as_u64()
        .or(text_rows)
        .with_context(|| format!("{url}: no row_count in {v}"))
}

/// wrk with a Lua script that POSTs the JSON-RPC body with an MCP client's headers.
fn wrk(
    setup: &Setup<'_>,
    work: &Path,
    name: &'static str,
    url: &str,
    body: &Value,
    auth: Option<&str>,
) -> anyhow::Result<Outcome> {
    let mut script = String::from("wrk.method = \"POST\"\n");
    let _ = writeln!(script, "wrk.body = {}", lua_string(&body.to_string()));
    for (header, value) in [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2025-06-18"),
    ]
    .into_iter()
    .chain(auth.map(|a| ("Authorization", a)))
    {
        let _ = writeln!(script, "wrk.headers[\"{header}\"] = {}", lua_string(value));
    }
    let path = work.join(format!("{}.lua", name.replace(' ', "-")));
    std::fs::write(&path, script).with_context(|| format!("writing {}", path.display()))?;
    let run = |seconds: u64| -> anyhow::Result<String> {
        let output = Command::new(&setup.wrk)
            .arg(format!("-t{}", setup.threads))
            .arg(format!("-c{}", setup.connections))
            .arg(format!("-d{seconds}s"))
            .arg("--latency")
            .arg("-s")
            .arg(&path)
            .arg(url)
            .output()
            .context("running wrk")?;
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        if !output.status.success() {
            bail!(
                "wrk failed ({}): {text}{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(text)
    };
    // Fills both sides' connection pools and caches.
    run(2)?;
    let text = run(setup.seconds)?;
    parse_wrk(name, &text)
}

/// A Lua string literal.
fn lua_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

fn parse_wrk(name: &'static str, text: &str) -> anyhow::Result<Outcome> {
    let context = || format!("unexpected wrk output:\n{text}");
    if let Some(line) = text
        .lines()
        .find(|l| l.contains("Non-2xx or 3xx responses"))
    {
        bail!("{name}: {}\n{text}", line.trim());
    }
    let percentile = |p: &str| -> anyhow::Result<Duration> {
        text.lines()
            .map(str::trim)
            .find_map(|l| l.strip_prefix(p))
            .and_then(|rest| parse_wrk_duration(rest.trim()))
            .with_context(context)
    };
    let rps = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .with_context(context)?;
    let requests = text
        .lines()
        .find_map(|l| l.trim().split_once(" requests in "))
        .and_then(|(n, _)| n.trim().parse::<u64>().ok())
        .with_context(context)?;
    Ok(Outcome {
        name,
        rps,
        p50: percentile("50%")?,
        p99: percentile("99%")?,
        requests,
    })
}

/// wrk's `980.00us`, `1.23ms`, `1.01s`, `2.00m`.
fn parse_wrk_duration(text: &str) -> Option<Duration> {
    let split = text.find(|c: char| c.is_ascii_alphabetic())?;
    let (number, unit) = text.split_at(split);
    let n: f64 = number.parse().ok()?;
    let seconds = match unit {
        "us" => n / 1e6,
        "ms" => n / 1e3,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return None,
    };
    Some(Duration::from_secs_f64(seconds))
}

/// How pgbench sends the statement.
#[derive(Clone, Copy)]
enum Mode {
    /// `-M prepared`: parsed and planned once per client, the floor.
    Prepared,
    /// `-M extended`: an unnamed statement each time, planned each time, as Parley's mcp sends
    /// its statements by default (`MCP_STATEMENTS=unnamed`).
    Unnamed,
}

impl Mode {
    fn flag(self) -> &'static str {
        match self {
            Mode::Prepared => "prepared",
            Mode::Unnamed => "extended",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mode::Prepared => "pgbench",
            Mode::Unnamed => "pgbench unnamed",
        }
    }
}

/// pgbench running the tool's statement (`mode`), `--concurrency` clients on the bench's
/// threads, with per-transaction logs for the percentiles.
fn pgbench(setup: &Setup<'_>, work: &Path, mode: Mode) -> anyhow::Result<Outcome> {
    let script = work.join("lad_by_ref.sql");
    std::fs::write(&script, pgbench_sql(setup.spec)? + ";\n")?;
    let fetch = (setup.spec.max_rows + 1).to_string();
    let run = |seconds: u64, log: Option<&Path>| -> anyhow::Result<String> {
        let mut command = Command::new(&setup.pgbench);
        command
            .args(["-n", "-M", mode.flag()])
            .arg(format!("-c{}", setup.pool))
            .arg(format!("-j{}", setup.threads.min(setup.pool)))
            .arg(format!("-T{seconds}"))
            .arg("-f")
            .arg(&script)
            .arg("-D")
            .arg(format!("p1={}", setup.lad_ref))
            .arg("-D")
            .arg(format!("p2={fetch}"));
        if let Some(prefix) = log {
            command
                .arg("-l")
                .arg(format!("--log-prefix={}", prefix.display()));
        }
        let output = command
            .arg(setup.bench_url)
            .output()
            .context("running pgbench")?;
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        if !output.status.success() {
            bail!(
                "pgbench failed ({}): {text}{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(text)
    };
    run(2, None)?;
    let log_name = format!("pgbench-log-{}", mode.flag());
    let prefix = work.join(&log_name);
    let text = run(setup.seconds, Some(&prefix))?;
    let tps = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("tps = "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .with_context(|| format!("no tps in pgbench's output:\n{text}"))?;
    // Log lines: client_id transaction_no time_us script_no epoch_s epoch_us.
    let mut latencies = Vec::new();
    for entry in std::fs::read_dir(work)? {
        let entry = entry?;
        if !entry.file_name().to_string_lossy().starts_with(&log_name) {
            continue;
        }
        for line in std::fs::read_to_string(entry.path())?.lines() {
            if let Some(us) = line
                .split_whitespace()
                .nth(2)
                .and_then(|v| v.parse::<u64>().ok())
            {
                latencies.push(Duration::from_micros(us));
            }
        }
    }
    if latencies.is_empty() {
        bail!("pgbench wrote no transaction log");
    }
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
    Ok(Outcome {
        name: mode.name(),
        rps: tps,
        p50: at(0.50),
        p99: at(0.99),
        requests: latencies.len() as u64,
    })
}

/// The tool's statement with pgbench variables (`:p1`, ...) for its placeholders.
fn pgbench_sql(spec: &ToolSpec) -> anyhow::Result<String> {
    replace_placeholders(spec, |i| format!(":p{i}"))
}

/// The tool's statement with psycopg's named placeholders (`%(p1)s`, ...).
fn psycopg_sql(spec: &ToolSpec) -> anyhow::Result<String> {
    let escaped = spec.wrapped_sql.replace('%', "%%");
    replace_in(&escaped, spec.placeholder_types.len(), |i| {
        format!("%(p{i})s")
    })
}

fn replace_placeholders(spec: &ToolSpec, name: impl Fn(usize) -> String) -> anyhow::Result<String> {
    replace_in(&spec.wrapped_sql, spec.placeholder_types.len(), name)
}

/// Replaces `$1..$n` (highest first, so `$1` never eats `$10`'s prefix). The peer's tool takes
/// exactly the lookup text and the row limit.
fn replace_in(sql: &str, n: usize, name: impl Fn(usize) -> String) -> anyhow::Result<String> {
    if n != 2 {
        bail!("the comparison expects lad_by_ref's two placeholders (ref, row limit), not {n}");
    }
    let mut out = sql.to_owned();
    for i in (1..=n).rev() {
        out = out.replace(&format!("${i}"), &name(i));
    }
    Ok(out)
}

/// The Python SDK server as a child process, killed by pid on drop.
struct Peer {
    child: Child,
    url: String,
}

impl Peer {
    async fn start(setup: &Setup<'_>) -> anyhow::Result<Self> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("peer/peer_server.py");
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let child = Command::new(&setup.python)
            .arg(&script)
            .env("PEER_PORT", port.to_string())
            .env("PEER_DSN", setup.bench_url)
            .env("PEER_SQL", psycopg_sql(setup.spec)?)
            .env("PEER_POOL", setup.pool.to_string())
            .env("PEER_MAX_ROWS", setup.spec.max_rows.to_string())
            .stdout(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", script.display()))?;
        let mut peer = Peer {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = peer.child.try_wait()? {
                bail!("the Python peer exited during start-up ({status})");
            }
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return Ok(peer);
            }
            if Instant::now() > deadline {
                bail!("the Python peer did not listen on port {port} within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        // Signals this child's pid only.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tempdir() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "parley-bench-peers-{}-{}",
        std::process::id(),
        crate::setup::now_nanos()
    ));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// The comparison's table, with Parley's share of the pgbench floor.
pub fn report(setup: &Setup<'_>, outcomes: &[Outcome]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nthree-way, lad_by_ref('{}'): wrk -t{} -c{} -d{}s against each server, pool {}; \
         pgbench -M prepared and -M extended (unnamed) -c{} -j{}; MCP_STATEMENTS={}",
        setup.lad_ref,
        setup.threads,
        setup.connections,
        setup.seconds,
        setup.pool,
        setup.pool,
        setup.threads.min(setup.pool),
        setup.statements
    );
    let _ = writeln!(
        out,
        "{:<16} {:>10} {:>9} {:>9} {:>10}",
        "contender", "req/s", "p50 ms", "p99 ms", "requests"
    );
    for o in outcomes {
        let _ = writeln!(
            out,
            "{:<16} {:>10.0} {:>9.3} {:>9.3} {:>10}",
            o.name,
            o.rps,
            crate::measure::ms(o.p50),
            crate::measure::ms(o.p99),
            o.requests
        );
    }
    let find = |name: &str| outcomes.iter().find(|o| o.name == name);
    if let (Some(floor), Some(parley)) = (find("pgbench"), find("parley mcp")) {
        let share = parley.rps / floor.rps * 100.0;
        let _ = writeln!(
            out,
            "parley mcp: {share:.0}% of the pgbench floor (target >= 60%: {}), p99 {:.3} ms \
             (target <= 5 ms on a quiet host: {})",
            if share >= 60.0 { "met" } else { "not met" },
            crate::measure::ms(parley.p99),
            if parley.p99 <= Duration::from_millis(5) {
                "met"
            } else {
                "not met"
            }
        );
        if let Some(unnamed) = find("pgbench unnamed")
            && setup.statements == "unnamed"
        {
            let _ = writeln!(
                out,
                "parley mcp: {:.0}% of pgbench sending the statement unnamed, planned each time \
                 (as MCP_STATEMENTS=unnamed does)",
                parley.rps / unnamed.rps * 100.0
            );
        }
        if let Some(python) = find("python sdk") {
            let _ = writeln!(
                out,
                "parley mcp / python sdk: {:.1}x the requests/s",
                parley.rps / python.rps
            );
        }
    }
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        let _ = writeln!(
            out,
            "load average at the end (1/5/15 min): {}",
            load.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    out
}

pub fn to_json(setup: &Setup<'_>, outcomes: &[Outcome]) -> Value {
    json!({
        "lad_ref": setup.lad_ref,
        "wrk_threads": setup.threads,
        "wrk_connections": setup.connections,
        "seconds": setup.seconds,
        "pool": setup.pool,
        "statements": setup.statements,
        "contenders": outcomes.iter().map(|o| json!({
            "name": o.name,
            "rps": o.rps,
            "p50_us": o.p50.as_micros() as u64,
            "p99_us": o.p99.as_micros() as u64,
            "requests": o.requests,
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrk_output_is_read() {
        let text = "Running 10s test @ http://127.0.0.1:1/mcp
  2 threads and 8 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.61ms  502.08us  12.40ms   81.06%
  Latency Distribution
     50%    1.54ms
     75%    1.80ms
     90%    2.11ms
     99%  980.00us
  49510 requests in 10.00s, 40.23MB read
Requests/sec:   4950.12
Transfer/sec:      4.02MB
";
        let o = parse_wrk("x", text).unwrap();
        assert_eq!(o.requests, 49510);
        assert!((o.rps - 4950.12).abs() < 1e-9);
        assert_eq!(o.p50, Duration::from_micros(1540));
        assert_eq!(o.p99, Duration::from_micros(980));
        let failed = format!("{text}  Non-2xx or 3xx responses: 3\n");
        assert!(parse_wrk("x", &failed).is_err());
    }
}
