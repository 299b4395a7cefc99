//! The concurrency curve: N function instances as separate processes with one database
//! connection each (`DB_POOL_MAX_SIZE=1`, as Lambda runs them), each serving one request at a
//! time in a loop, for N = 25, 50, 100, 200; once straight to Postgres and once through
//! PgBouncer in transaction mode with a server pool of 10. The mcp function under `tools/call`
//! (`lad_by_ref`), and with `--chat` the chat function with a model that takes 1 s a call (two
//! calls a turn, one tool call between them). Throughput, p50/p99, errors, and the Postgres
//! connections of the bench database (at most, sampled during the load).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use serde_json::{Value, json};

use crate::chat;
use crate::mcp_client::{http_client, tools_file_setting};
use crate::measure::{self, ms, percentile};
use crate::server::{Server, free_port};
use crate::setup::{
    admin_url, command_line, connect, machine, now_nanos, prepare_database, write_json,
};
use crate::stubs::Stubs;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Instances (separate processes) at each step, comma-separated.
    #[arg(long, default_value = "25,50,100,200", value_delimiter = ',')]
    instances: Vec<usize>,
    /// Seconds measured at each step, after one unmeasured second (for chat: after the first
    /// turn of every instance).
    #[arg(long, default_value_t = 8)]
    seconds: u64,
    /// Also the chat curve: N chat processes, each sending turns in a loop.
    #[arg(long)]
    chat: bool,
    /// How long the scripted model takes for each answer in the chat curve.
    #[arg(long, default_value_t = 1000)]
    model_delay_ms: u64,
    /// PgBouncer's server connections for the bench database (`default_pool_size`).
    #[arg(long, default_value_t = 10)]
    server_pool: u32,
    /// Feedback rows in the bench database (the lookup does not depend on it).
    #[arg(long, default_value_t = 20_000)]
    feedback: u64,
    /// Database created (if missing) next to the one in DATABASE_URL.
    #[arg(long, default_value = "parley_bench")]
    database: String,
    /// The MCP server binary [default: `mcp` beside this executable].
    #[arg(long)]
    mcp_bin: Option<PathBuf>,
    /// The chat binary [default: `chat` beside this executable].
    #[arg(long)]
    chat_bin: Option<PathBuf>,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One step of the curve.
struct Step {
    function: &'static str,
    path: &'static str,
    instances: usize,
    /// Instances whose health check never passed (the database refused their connection).
    not_ready: usize,
    load: Load,
}

/// What the clients saw and the sampler counted during one step.
struct Load {
    calls: usize,
    errors: usize,
    first_error: Option<String>,
    elapsed: Duration,
    p50: Duration,
    p99: Duration,
    /// Most backends of the bench database seen at once, and most of them running a query.
    connections: i64,
    active: i64,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let command = command_line();
    let admin = admin_url()?;
    let (bench_url, pg_version) = prepare_database(&admin, &args.database, args.feedback).await?;
    let beside = |given: &Option<PathBuf>, name: &str| -> anyhow::Result<PathBuf> {
        Ok(match given {
            Some(p) => p.clone(),
            None => std::env::current_exe()?.with_file_name(name),
        })
    };
    let (mcp_bin, chat_bin) = (
        beside(&args.mcp_bin, "mcp")?,
        beside(&args.chat_bin, "chat")?,
    );
    let tools = tools_file_setting(&[parley_domain_feedback::tools_path()]);
    let sampler = Rc::new(connect(&admin).await?);
    let (districts, _) = chat::districts(&bench_url).await?;
    let bouncer = parley_testkit::PgBouncer::start(&bench_url, args.server_pool);
    let paths = [
        ("direct", bench_url.clone()),
        ("pgbouncer", bouncer.url(&bench_url)),
    ];

    let refs: Vec<&str> = districts.iter().map(|(code, _)| code.as_str()).collect();
    let mut steps = Vec::new();
    for (path, url) in &paths {
        for &n in &args.instances {
            let token = format!("curve-{}", now_nanos());
            let env = vec![
                ("DATABASE_URL", url.clone()),
                ("MCP_AUTH_TOKEN", token.clone()),
                ("TOOLS_FILE", tools.clone()),
                ("RUST_LOG", "warn".to_owned()),
                ("DB_POOL_MAX_SIZE", "1".to_owned()),
            ];
            let (servers, not_ready) = spawn_ready(&mcp_bin, &env, n).await?;
            let http = http_client(&token, n)?;
            let warmup = Instant::now() + Duration::from_secs(1);
            let load = measure_load(&args, &sampler, warmup, &servers, |i, base, call| {
                let body = json!({
                    "jsonrpc": "2.0", "id": call, "method": "tools/call",
                    "params": {"name": "lad_by_ref", "arguments": {"ref": refs[(i + call) % refs.len()]}},
                })
                .to_string();
                let (http, url) = (&http, format!("{base}/mcp"));
                async move {
                    match measure::post_json(http, &url, body).await {
                        Ok((_, v)) if v["result"]["isError"] == false => Ok(()),
                        Ok((_, v)) => Err(v.to_string()),
                        Err(e) => Err(e.to_string()),
                    }
                }
            })
            .await;
            drop(servers);
            steps.push(report_step("mcp", path, n, not_ready, load));
        }
    }
    if args.chat {
        for (path, url) in &paths {
            let token = format!("curve-{}", now_nanos());
            // One mcp function for the chats' tool calls, with connections enough for them.
            let mcp = Server::start(
                &mcp_bin,
                &[
                    ("DATABASE_URL", url.clone()),
                    ("MCP_AUTH_TOKEN", token.clone()),
                    ("TOOLS_FILE", tools.clone()),
                    ("RUST_LOG", "warn".to_owned()),
                    ("DB_POOL_MAX_SIZE", "4".to_owned()),
                ],
            )
            .await?;
            let stubs = Stubs::start(&mcp.base)?;
            stubs.set_delay(Duration::from_millis(args.model_delay_ms));
            let jwt_secret = format!("curve-jwt-{}", now_nanos());
            for &n in &args.instances {
                let mut env = vec![
                    ("DATABASE_URL", url.clone()),
                    ("JWT_SECRET", jwt_secret.clone()),
                    ("RUST_LOG", "warn".to_owned()),
                    ("DB_POOL_MAX_SIZE", "1".to_owned()),
                ];
                env.extend(stubs.chat_env(&token));
                let (servers, not_ready) = spawn_ready(&chat_bin, &env, n).await?;
                let clients = servers
                    .iter()
                    .map(|s| chat::Client::new(&s.base, &jwt_secret, districts.clone(), 1))
                    .collect::<anyhow::Result<Vec<_>>>()?;
                // Every instance's first turn (it connects to mcp and lists the tools) is
                // not measured: two model calls.
                let warmup = Instant::now() + Duration::from_millis(2 * args.model_delay_ms + 500);
                let load = measure_load(&args, &sampler, warmup, &servers, |i, _, call| {
                    let client = &clients[i];
                    async move {
                        client
                            .turn(i + call, None)
                            .await
                            .map(drop)
                            .map_err(|e| format!("{e:#}"))
                    }
                })
                .await;
                drop(servers);
                steps.push(report_step("chat", path, n, not_ready, load));
            }
            drop(mcp);
        }
    }

    let report = render(&steps, &args, &pg_version);
    println!(
        "{}\ncommand: {command}\n{report}",
        machine().line("server processes, PgBouncer, Postgres and client")
    );
    if let Some(path) = &args.json {
        let value = json!({
            "command": command,
            "machine": machine().to_json(),
            "postgres": pg_version,
            "server_pool": args.server_pool,
            "model_delay_ms": args.model_delay_ms,
            "steps": steps.iter().map(|s| json!({
                "function": s.function, "path": s.path, "instances": s.instances,
                "not_ready": s.not_ready, "calls": s.load.calls, "errors": s.load.errors,
                "first_error": s.load.first_error,
                "calls_per_s": s.load.calls as f64 / s.load.elapsed.as_secs_f64(),
                "p50_ms": ms(s.load.p50), "p99_ms": ms(s.load.p99),
                "connections": s.load.connections, "active": s.load.active,
            })).collect::<Vec<Value>>(),
        });
        write_json(path, &value)?;
    }
    Ok(())
}

fn report_step(
    function: &'static str,
    path: &'static str,
    instances: usize,
    not_ready: usize,
    load: Load,
) -> Step {
    eprintln!(
        "{function:>4} {path:>9} {instances:>4} instances ({not_ready} not ready): {:>7.1} /s, \
         p50 {:>8.2} ms, p99 {:>8.2} ms, {} errors, {} connections ({} active)",
        load.calls as f64 / load.elapsed.as_secs_f64(),
        ms(load.p50),
        ms(load.p99),
        load.errors,
        load.connections,
        load.active
    );
    Step {
        function,
        path,
        instances,
        not_ready,
        load,
    }
}

/// `n` instances of `bin` with `env`, each on its own port, and how many never became ready.
/// Ports are found free one at a time, so a later one can be taken in between (by another
/// instance or an outgoing connection): an instance that cannot listen starts again on another
/// port. One whose health check never passes (its database refused it) stays: its requests
/// are errors, as a Lambda instance's would be.
async fn spawn_ready(
    bin: &Path,
    env: &[(&str, String)],
    n: usize,
) -> anyhow::Result<(Vec<Server>, usize)> {
    let mut used = std::collections::HashSet::new();
    let mut port = || -> anyhow::Result<u16> {
        loop {
            let p = free_port()?;
            if used.insert(p) {
                return Ok(p);
            }
        }
    };
    let mut servers = Vec::with_capacity(n);
    for _ in 0..n {
        servers.push(Server::spawn_on(bin, port()?, env)?);
    }
    let mut not_ready = 0;
    let ready = join_all(servers.iter_mut().map(|s| s.wait_until_ready())).await;
    for (i, outcome) in ready.into_iter().enumerate() {
        let mut outcome = outcome;
        let mut tries = 0;
        while outcome.is_err() && servers[i].exited()?.is_some() {
            tries += 1;
            anyhow::ensure!(tries < 3, "an instance could not start");
            servers[i] = Server::spawn_on(bin, port()?, env)?;
            outcome = servers[i].wait_until_ready().await;
        }
        if outcome.is_err() {
            not_ready += 1;
        }
    }
    Ok((servers, not_ready))
}

/// One client per instance calling `call(instance, base, n)` in a loop until `args.seconds`
/// after `warmup` (calls that start before `warmup` are not counted), while the bench
/// database's connections are sampled every 200 ms.
async fn measure_load<F, Fut>(
    args: &Args,
    sampler: &Rc<tokio_postgres::Client>,
    warmup: Instant,
    servers: &[Server],
    call: F,
) -> Load
where
    F: Fn(usize, &str, usize) -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let end = warmup + Duration::from_secs(args.seconds);
    let sampling = async {
        let (mut most, mut active) = (0i64, 0i64);
        while Instant::now() < end {
            if let Ok(row) = sampler
                .query_one(
                    "SELECT count(*), count(*) FILTER (WHERE state = 'active') \
                     FROM pg_stat_activity WHERE datname = $1",
                    &[&args.database],
                )
                .await
            {
                most = most.max(row.get(0));
                active = active.max(row.get(1));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        (most, active)
    };
    let clients = servers.iter().enumerate().map(|(i, server)| {
        let call = &call;
        async move {
            let mut latencies = Vec::new();
            let (mut errors, mut first_error) = (0usize, None);
            let mut n = 0;
            while Instant::now() < end {
                n += 1;
                let started = Instant::now();
                let outcome = call(i, &server.base, n).await;
                if started < warmup {
                    continue;
                }
                match outcome {
                    Ok(()) => latencies.push(started.elapsed()),
                    Err(e) => {
                        errors += 1;
                        first_error.get_or_insert(e);
                    }
                }
            }
            (latencies, errors, first_error)
        }
    });
    let (results, (connections, active)) = tokio::join!(join_all(clients), sampling);
    let elapsed = end.saturating_duration_since(warmup);
    let mut latencies: Vec<Duration> = Vec::new();
    let (mut errors, mut first_error) = (0, None);
    for (l, e, first) in results {
        latencies.extend(l);
        errors += e;
        if first_error.is_none() {
            first_error = first;
        }
    }
    latencies.sort_unstable();
    Load {
        calls: latencies.len(),
        errors,
        first_error,
        elapsed,
        p50: percentile(&latencies, 50.0),
        p99: percentile(&latencies, 99.0),
        connections,
        active,
    }
}

fn render(steps: &[Step], args: &Args, pg_version: &str) -> String {
    use std::fmt::Write as _;
    let mut out = format!(
        "concurrency curve: N processes with DB_POOL_MAX_SIZE=1, one request in flight each, \
         {} s a step; mcp: lad_by_ref; chat: a turn of two model calls ({} ms each) and one \
         tool call; Postgres {pg_version}; PgBouncer transaction mode, server pool {}\n\n\
         function path        N  not ready    per s    p50 ms    p99 ms  errors  connections (active)\n",
        args.seconds, args.model_delay_ms, args.server_pool
    );
    for s in steps {
        let _ = writeln!(
            out,
            "{:<8} {:<9} {:>4} {:>10} {:>8.1} {:>9.2} {:>9.2} {:>7}  {:>5} ({})",
            s.function,
            s.path,
            s.instances,
            s.not_ready,
            s.load.calls as f64 / s.load.elapsed.as_secs_f64(),
            ms(s.load.p50),
            ms(s.load.p99),
            s.load.errors,
            s.load.connections,
            s.load.active
        );
    }
    for s in steps.iter().filter(|s| s.load.first_error.is_some()) {
        let _ = writeln!(
            out,
            "first error ({} {} {}): {}",
            s.function,
            s.path,
            s.instances,
            s.load.first_error.as_deref().unwrap_or_default()
        );
    }
    out
}
