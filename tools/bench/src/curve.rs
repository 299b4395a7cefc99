//! The concurrency curve: N mcp functions as separate processes with one database connection
//! each (`DB_POOL_MAX_SIZE=1`, as Lambda runs them), each serving one `tools/call` at a time in
//! a loop, for N = 25, 50, 100, 200; once straight to Postgres and once through PgBouncer in
//! transaction mode with a server pool of 10. Throughput, p50/p99, errors, and the Postgres
//! connections of the bench database (at most, sampled during the load).

use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use serde_json::{Value, json};

use crate::mcp_client::{http_client, tools_file_setting};
use crate::measure::{self, ms, percentile};
use crate::server::{Server, free_port};
use crate::setup::{admin_url, command_line, connect, machine, prepare_database, write_json};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Instances (separate mcp processes) at each step, comma-separated.
    #[arg(long, default_value = "25,50,100,200", value_delimiter = ',')]
    instances: Vec<usize>,
    /// Seconds measured at each step, after one unmeasured second.
    #[arg(long, default_value_t = 8)]
    seconds: u64,
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
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One step of the curve.
struct Step {
    path: &'static str,
    instances: usize,
    /// Instances whose health check never passed (the database refused their connection).
    not_ready: usize,
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
    let bin = match &args.mcp_bin {
        Some(p) => p.clone(),
        None => std::env::current_exe()?.with_file_name("mcp"),
    };
    let tools = tools_file_setting(&[parley_domain_feedback::tools_path()]);
    let sampler = Rc::new(connect(&admin).await?);
    let refs: Vec<String> = connect(&bench_url)
        .await?
        .query("SELECT code FROM lads ORDER BY code LIMIT 50", &[])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    anyhow::ensure!(!refs.is_empty(), "the bench database has no districts");
    let bouncer = parley_testkit::PgBouncer::start(&bench_url, args.server_pool);

    let mut steps = Vec::new();
    for (path, url) in [
        ("direct", bench_url.clone()),
        ("pgbouncer", bouncer.url(&bench_url)),
    ] {
        for &n in &args.instances {
            let step = step(&args, (path, &url), (&bin, &tools), n, &refs, &sampler).await?;
            eprintln!(
                "{path:>9} {n:>4} instances ({} not ready): {:>6.0} calls/s, p50 {:>7.2} ms, \
                 p99 {:>8.2} ms, {} errors, {} connections ({} active)",
                step.not_ready,
                step.calls as f64 / step.elapsed.as_secs_f64(),
                ms(step.p50),
                ms(step.p99),
                step.errors,
                step.connections,
                step.active
            );
            steps.push(step);
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
            "steps": steps.iter().map(|s| json!({
                "path": s.path, "instances": s.instances, "not_ready": s.not_ready,
                "calls": s.calls,
                "errors": s.errors, "first_error": s.first_error,
                "calls_per_s": s.calls as f64 / s.elapsed.as_secs_f64(),
                "p50_ms": ms(s.p50), "p99_ms": ms(s.p99),
                "connections": s.connections, "active": s.active,
            })).collect::<Vec<Value>>(),
        });
        write_json(path, &value)?;
    }
    Ok(())
}

/// `n` instances against `url`, each called in a loop by its own client for `args.seconds`.
async fn step(
    args: &Args,
    (path, url): (&'static str, &str),
    (bin, tools): (&std::path::Path, &str),
    n: usize,
    refs: &[String],
    sampler: &Rc<tokio_postgres::Client>,
) -> anyhow::Result<Step> {
    let token = format!("curve-{}", crate::setup::now_nanos());
    let env = vec![
        ("DATABASE_URL", url.to_owned()),
        ("MCP_AUTH_TOKEN", token.clone()),
        ("TOOLS_FILE", tools.to_owned()),
        ("RUST_LOG", "warn".to_owned()),
        ("DB_POOL_MAX_SIZE", "1".to_owned()),
        ("DB_ACQUIRE_TIMEOUT_MS", "5000".to_owned()),
    ];
    // Ports are found free one at a time, so a later one can be taken in between (by another
    // instance or an outgoing connection): an instance that cannot listen starts again on
    // another port.
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
        servers.push(Server::spawn_on(bin, port()?, &env)?);
    }
    // An instance that never becomes ready (its health check says the database refused it)
    // stays: its calls are errors, as a Lambda instance's would be.
    let mut not_ready = 0;
    let ready = join_all(servers.iter_mut().map(|s| s.wait_until_ready())).await;
    for (i, outcome) in ready.into_iter().enumerate() {
        let mut outcome = outcome;
        let mut tries = 0;
        while outcome.is_err() && servers[i].exited()?.is_some() {
            tries += 1;
            anyhow::ensure!(tries < 3, "an instance could not start");
            servers[i] = Server::spawn_on(bin, port()?, &env)?;
            outcome = servers[i].wait_until_ready().await;
        }
        if outcome.is_err() {
            not_ready += 1;
        }
    }
    let http = http_client(&token, n)?;
    let bases: Vec<String> = servers.iter().map(|s| s.base.clone()).collect();

    let warmup = Instant::now() + Duration::from_secs(1);
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
    let clients = bases.iter().enumerate().map(|(i, base)| {
        let http = &http;
        async move {
            let mut latencies = Vec::new();
            let (mut errors, mut first_error) = (0usize, None);
            let mut call = i;
            while Instant::now() < end {
                call += 1;
                let body = json!({
                    "jsonrpc": "2.0", "id": call, "method": "tools/call",
                    "params": {"name": "lad_by_ref", "arguments": {"ref": refs[call % refs.len()]}},
                })
                .to_string();
                let started = Instant::now();
                let outcome = measure::post_json(http, &format!("{base}/mcp"), body).await;
                let ok = match &outcome {
                    Ok((_, v)) if v["result"]["isError"] == false => Ok(()),
                    Ok((_, v)) => Err(v.to_string()),
                    Err(e) => Err(e.to_string()),
                };
                if started < warmup {
                    continue;
                }
                match ok {
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
    let started = Instant::now();
    let (results, (connections, active)) = tokio::join!(join_all(clients), sampling);
    let elapsed = started.elapsed().saturating_sub(Duration::from_secs(1));
    drop(servers);

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
    Ok(Step {
        path,
        instances: n,
        not_ready,
        calls: latencies.len(),
        errors,
        first_error,
        elapsed,
        p50: percentile(&latencies, 50.0),
        p99: percentile(&latencies, 99.0),
        connections,
        active,
    })
}

fn render(steps: &[Step], args: &Args, pg_version: &str) -> String {
    use std::fmt::Write as _;
    let mut out = format!(
        "concurrency curve: lad_by_ref through N mcp processes (DB_POOL_MAX_SIZE=1), one call \
         in flight each, {} s a step; Postgres {pg_version}; PgBouncer transaction mode, server \
         pool {}\n\npath        N  not ready   calls/s   p50 ms   p99 ms  errors  connections (active)\n",
        args.seconds, args.server_pool
    );
    for s in steps {
        let _ = writeln!(
            out,
            "{:<9} {:>4} {:>10} {:>9.0} {:>8.2} {:>8.2} {:>7}  {:>5} ({})",
            s.path,
            s.instances,
            s.not_ready,
            s.calls as f64 / s.elapsed.as_secs_f64(),
            ms(s.p50),
            ms(s.p99),
            s.errors,
            s.connections,
            s.active
        );
    }
    if let Some(s) = steps.iter().find(|s| s.first_error.is_some()) {
        let _ = writeln!(
            out,
            "first error ({} {}): {}",
            s.path,
            s.instances,
            s.first_error.as_deref().unwrap_or_default()
        );
    }
    out
}
