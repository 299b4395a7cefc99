//! `parley-bench mcp`: `tools/call` over loopback HTTP against the same SQL run directly on a
//! pooled connection (the floor), on a dedicated database loaded with demo feedback.
//!
//! Floors: `raw` is the bare prepared query, planned as the server plans it (per call for
//! tools with nullable filters, else Postgres' plan cache); `raw+tx` adds the server's
//! pipelined `BEGIN READ ONLY; SET LOCAL ...` / `COMMIT` / session reset, so `mcp − raw+tx` is
//! what HTTP, JSON-RPC, rmcp and rendering cost on their own; `raw/auto` is `raw` with
//! Postgres' default plan caching, to show what per-call planning costs (the same as `raw` for
//! tools the server does not plan per call).
//! The caller-bound scenarios ([`crate::tasks`]: `list_tasks`, `create_task` with an
//! idempotency key) run as bench users with their own tokens and add `raw+tx+caller`, exactly
//! what `tools::exec` sends for a user (its role and `parley.caller`), beside `raw+tx`, the same
//! statement without identity: their difference is what identity costs.
//! Last, the three-way comparison in [`crate::peers`] (Parley vs the Python SDK vs pgbench).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use deadpool_postgres::Pool;
use parley_tools::call::{self, Bound, Caller};
use parley_tools::catalog::Catalog;
use parley_tools::output::Limits;
use parley_tools::tools::params::SqlValue;
use parley_tools::tools::{ToolSpec, exec};
use serde_json::{Map, Value, json};
use tokio_postgres::types::{ToSql, Type};

use crate::mcp_client::{LAD_REFS, Mcp, feedback_ids, http_client, object, tools_file_setting};
use crate::measure::{self, Driver, Stats, ms};
use crate::peers;
use crate::server::{Server, free_port};
use crate::setup::{
    Machine, admin_url, command_line, connect, machine, now_nanos, prepare_database, write_json,
};
use crate::sql_audit;
use crate::tasks::{self, Keys, User};

/// The targets for the caller-bound scenarios: identity costs a read less than this at p50, and
/// a write's `mcp` costs over its own floor no more than this beyond what a read's does.
const IDENTITY_TARGET_US: f64 = 100.0;

/// What people write about; quoted phrases and exclusions exercise websearch syntax.
const SEARCHES: &[&str] = &[
    "pothole",
    "\"missed bin collection\"",
    "noise",
    "mould",
    "parking",
    "\"bus service\"",
    "fly tipping",
    "street lights",
    "council tax",
    "damp -mould",
    "recycling",
    "planning application",
];

#[derive(Debug, clap::Args)]
pub struct Args {
    /// How the server sends the tools' statements (its MCP_STATEMENTS): unnamed (its default)
    /// or cached (named, prepared once per connection), to measure what each costs.
    #[arg(long, default_value = "unnamed", value_parser = ["unnamed", "cached"])]
    statements: String,
    /// Where the server's audit records go (its AUDIT): postgres (its default), log or off, to
    /// see what the audit costs the paths and the three-way (sql-audit sets its own).
    #[arg(long, default_value = "postgres", value_parser = ["postgres", "log", "off"])]
    audit: String,
    /// Feedback rows in the bench database (loaded once; reruns with the same size skip it).
    #[arg(long, default_value_t = 1_000_000)]
    feedback: u64,
    /// Measured lad_by_ref, get_feedback, list_tasks and create_task calls per path, at each
    /// concurrency (and sql-audit's calls per tool and AUDIT setting, one at a time).
    #[arg(long, default_value_t = 2000)]
    requests: usize,
    /// Measured search_feedback calls per path, at each concurrency (each one ranks every
    /// matching row, so far slower than a lookup).
    #[arg(long, default_value_t = 200)]
    search_requests: usize,
    /// Concurrency of the throughput run (latency is measured one call at a time); also the
    /// size of the server's and the floor's connection pools.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Unmeasured calls per path first (fills the statement caches and Postgres' buffers).
    #[arg(long, default_value_t = 200)]
    warmup: usize,
    /// Database created (if missing) next to the one in DATABASE_URL.
    #[arg(long, default_value = "parley_bench")]
    database: String,
    /// The MCP server binary [default: `mcp` beside this executable, i.e. target/release/mcp].
    #[arg(long)]
    mcp_bin: Option<PathBuf>,
    /// Only these scenarios (comma-separated): lad_by_ref, search_feedback, get_feedback,
    /// list_tasks, create_task (caller-bound, as bench users), ping, peers (the three-way
    /// comparison with the Python SDK and pgbench), sql-audit (run_sql against the same
    /// declared tool, and the audit's cost per call and WAL, with AUDIT=off and postgres).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// sql-audit: blocks per AUDIT setting of the WAL measurement (they alternate off and
    /// postgres; the report takes each setting's median block).
    #[arg(long, default_value_t = 5)]
    wal_blocks: usize,
    /// sql-audit: get_feedback calls per WAL block.
    #[arg(long, default_value_t = 1000)]
    wal_block_calls: usize,
    /// Seconds each contender of the three-way comparison is measured (after 2 s of warm-up).
    #[arg(long, default_value_t = 10)]
    peer_seconds: u64,
    /// wrk threads in the three-way comparison (also pgbench's -j, at most --concurrency).
    #[arg(long, default_value_t = 2)]
    peer_threads: usize,
    /// wrk connections in the three-way comparison.
    #[arg(long, default_value_t = 8)]
    peer_connections: usize,
    /// The wrk binary.
    #[arg(long, default_value = "wrk")]
    wrk: PathBuf,
    /// The pgbench binary [default: $PARLEY_PG_BIN/pgbench if set, else pgbench].
    #[arg(long)]
    pgbench: Option<PathBuf>,
    /// The Python with the MCP SDK and psycopg (tools/bench/peer/requirements.txt).
    #[arg(long, default_value = ".parley/venv-bench/bin/python")]
    peer_python: PathBuf,
    /// RUST_LOG for the server (info adds a line per call, which costs time).
    #[arg(long, default_value = "warn")]
    server_log: String,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    Raw,
    RawTx,
    /// `raw+tx` as a user: the tool's role and `parley.caller`, pipelined as `tools::exec` does.
    RawTxCaller,
    Mcp,
    RawAuto,
}

impl Path {
    /// The service's tools.
    const ALL: [Path; 4] = [Path::Raw, Path::RawTx, Path::Mcp, Path::RawAuto];
    /// A caller-bound tool's: the floors without and with identity.
    const CALLER: [Path; 4] = [Path::Raw, Path::RawTx, Path::RawTxCaller, Path::Mcp];

    fn name(self) -> &'static str {
        match self {
            Path::Raw => "raw",
            Path::RawTx => "raw+tx",
            Path::RawTxCaller => "raw+tx+caller",
            Path::Mcp => "mcp",
            Path::RawAuto => "raw/auto",
        }
    }
}

struct Scenario {
    tool: &'static str,
    requests: usize,
    calls: Vec<Map<String, Value>>,
    /// Call `i` runs as bench user `callers[i]`; empty: as the service (its token).
    callers: Vec<usize>,
    /// Every call carries its own idempotency key (a write recorded exactly once).
    keyed: bool,
}

impl Scenario {
    fn paths(&self) -> &'static [Path] {
        if self.callers.is_empty() {
            &Path::ALL
        } else {
            &Path::CALLER
        }
    }
}

struct Measured {
    tool: &'static str,
    path: Path,
    serial: Stats,
    /// The one-at-a-time latencies in call order (call `i` had the same arguments on every path).
    samples: Vec<Duration>,
    concurrent: Stats,
}

/// `--only` names of sections that are not a scenario of the main table.
const SECTIONS: [&str; 3] = ["ping", "peers", sql_audit::SECTION];

pub async fn run(args: Args) -> anyhow::Result<()> {
    let command = command_line();
    let admin_url = admin_url()?;
    let (bench_url, pg_version) =
        prepare_database(&admin_url, &args.database, args.feedback).await?;
    let bin = mcp_bin(&args)?;
    let wants = |name: &str| args.only.is_empty() || args.only.iter().any(|o| o == name);
    // The main table, the ping and the three-way comparison: everything but the issue 12
    // section, which runs last (or alone with `--only sql-audit`).
    let mut json = if args.only.iter().all(|o| o == sql_audit::SECTION) && !args.only.is_empty() {
        json!({ "command": command, "postgres": pg_version, "feedback_rows": args.feedback })
    } else {
        run_main(&args, &command, &bench_url, &pg_version, &bin).await?
    };
    if wants(sql_audit::SECTION) {
        let settings = sql_audit::Settings {
            admin_url: &admin_url,
            bench_url: &bench_url,
            bin: &bin,
            requests: args.requests,
            warmup: args.warmup,
            blocks: args.wal_blocks.max(1),
            block_calls: args.wal_block_calls.max(1),
            pool: args.concurrency.max(1),
            server_log: &args.server_log,
        };
        let section = sql_audit::run(&settings).await?;
        print!(
            "{}",
            section.text(&command, &machine(), &pg_version, args.feedback)
        );
        json["sql_audit"] = section.json();
    }
    if let Some(path) = &args.json {
        write_json(path, &json)?;
    }
    Ok(())
}

/// The MCP server binary: `--mcp-bin`, else `mcp` beside this executable.
fn mcp_bin(args: &Args) -> anyhow::Result<PathBuf> {
    match &args.mcp_bin {
        Some(p) => Ok(p.clone()),
        None => Ok(std::env::current_exe()
            .context("locating this executable")?
            .with_file_name("mcp")),
    }
}

/// The scenarios of the main table against their floors, the ping and the three-way
/// comparison, as `--only` selects them; prints their report and returns its JSON.
async fn run_main(
    args: &Args,
    command: &str,
    bench_url: &str,
    pg_version: &str,
    bin: &std::path::Path,
) -> anyhow::Result<Value> {
    let concurrency = args.concurrency.max(1);
    let bench_url = bench_url.to_owned();
    let scenarios = scenarios(&bench_url, args).await?;
    let caller_bound = scenarios.iter().any(|s| !s.callers.is_empty());
    let run_id = format!("{:x}-{}", std::process::id(), now_nanos());
    // User tokens are configured only for the caller-bound scenarios, so the others measure
    // the server as before.
    let jwt_secret = caller_bound.then(|| format!("bench-jwt-secret-{run_id}"));
    let keys = Keys::new(&run_id);
    let tools_files = [
        parley_domain_feedback::tools_path(),
        parley_domain_tasks::tools_path(),
    ];
    let catalog = Catalog::load(&tools_files, Limits::default())
        .context("loading the demo domains' tools")?;

    // The server sets `plan_cache_mode = force_custom_plan` in the transaction of a tool with
    // nullable filters; the floor sets it once per session, so it runs the same plans without
    // the extra statement.
    let mut custom_url = url::Url::parse(&bench_url)?;
    custom_url
        .query_pairs_mut()
        // No space after -c: parley_core::db re-encodes the URL's query with `+` for spaces,
        // which tokio-postgres does not decode back.
        .append_pair("options", "-cplan_cache_mode=force_custom_plan");
    let pool = floor_pool(custom_url.as_str(), concurrency)?;
    let auto_pool = floor_pool(&bench_url, concurrency)?;

    let token = format!("bench-{run_id}");
    let port = free_port()?;
    let mut env = vec![
        ("DATABASE_URL", bench_url.clone()),
        ("MCP_AUTH_TOKEN", token.clone()),
        ("TOOLS_FILE", tools_file_setting(&tools_files)),
        ("RUST_LOG", args.server_log.clone()),
        ("DB_POOL_MAX_SIZE", concurrency.to_string()),
        ("MCP_STATEMENTS", args.statements.clone()),
        ("AUDIT", args.audit.clone()),
    ];
    // Tokens as an identity provider issues them for this resource: its issuer, the MCP
    // endpoint as audience (RFC 8707), both checked by the server.
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let users = match &jwt_secret {
        Some(secret) => {
            env.extend([
                ("JWT_SECRET", secret.clone()),
                ("JWT_ISSUER", tasks::ISSUER.to_owned()),
                ("JWT_AUDIENCE", resource.clone()),
                ("MCP_RESOURCE_URL", resource.clone()),
            ]);
            tasks::users(secret, &resource)?
        }
        None => Vec::new(),
    };
    let server = Server::start_on(bin, port, &env).await?;
    let (idle_rss, _) = server.memory()?;
    eprintln!(
        "mcp server pid {} at {} ({} KiB resident)",
        server.pid(),
        server.base,
        idle_rss
    );
    let http = http_client(&token, concurrency)?;

    let mut results = Vec::new();
    for scenario in &scenarios {
        let spec = catalog
            .get(scenario.tool)
            .with_context(|| format!("the shipped tools have no {}", scenario.tool))?;
        let caller = |i: usize| scenario.callers.get(i).map(|&u| &users[u]);
        let floor_calls = scenario
            .calls
            .iter()
            .enumerate()
            .map(|(i, args)| bound_values(spec, args, caller(i)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        // `raw+tx` of a caller-bound tool is the statement without identity: no role (the
        // superuser bypasses row-level security), no `parley.caller`; `owner` is bound anyway.
        let anonymous = ToolSpec {
            role: None,
            ..spec.clone()
        };
        let keys = scenario.keyed.then_some(&keys);
        let paths = scenario.paths();
        let drivers: Vec<Paths> = paths
            .iter()
            .map(|&path| match path {
                Path::Raw | Path::RawTx | Path::RawTxCaller | Path::RawAuto => {
                    Paths::Floor(Floor {
                        pool: if path == Path::RawAuto || !spec.custom_plans {
                            &auto_pool
                        } else {
                            &pool
                        },
                        spec,
                        calls: &floor_calls,
                        // Exactly what `tools::exec` sends before each call.
                        begin: match path {
                            Path::RawTx => Some((
                                exec::begin_sql(anonymous.writes, None),
                                exec::CallSettings::new(&anonymous, None),
                            )),
                            Path::RawTxCaller => Some((
                                exec::begin_sql(spec.writes, None),
                                exec::CallSettings::new(spec, None),
                            )),
                            _ => None,
                        },
                        as_caller: path == Path::RawTxCaller,
                        keys,
                    })
                }
                Path::Mcp => Paths::Mcp(Mcp::new(
                    &http,
                    &server.base,
                    scenario.tool,
                    &scenario.calls,
                    scenario
                        .callers
                        .iter()
                        .map(|&u| users[u].authorization.clone())
                        .collect(),
                    keys,
                )),
            })
            .collect();
        let n = scenario.requests;
        let label = |path: Path| format!("{} {}", scenario.tool, path.name());
        // Warming at full concurrency prepares the statement on every pooled connection.
        for (&path, driver) in paths.iter().zip(&drivers) {
            measure::run(driver, args.warmup.min(n), concurrency, 0)
                .await
                .with_context(|| format!("{}: warm-up", label(path)))?;
        }
        let serial = measure::interleaved(&drivers, n)
            .await
            .with_context(|| format!("{}: one call at a time", scenario.tool))?;
        for ((&path, driver), (serial, samples)) in paths.iter().zip(&drivers).zip(serial) {
            let concurrent = measure::run(driver, n, concurrency, n)
                .await
                .with_context(|| format!("{}: concurrency {concurrency}", label(path)))?;
            eprintln!(
                "{:<27} p50 {:>8.3} ms  p99 {:>8.3} ms  {:>6.0} rps  | c={concurrency}: {:>6.0} rps",
                label(path),
                ms(serial.p50),
                ms(serial.p99),
                serial.rps,
                concurrent.rps
            );
            results.push(Measured {
                tool: scenario.tool,
                path,
                serial,
                samples,
                concurrent,
            });
        }
    }
    if scenarios.iter().any(|s| s.keyed) {
        tasks::check_writes(&connect(&bench_url).await?, &keys).await?;
    }
    if args.only.is_empty() || args.only.iter().any(|o| o == "ping") {
        results.push(measure_ping(&http, &server.base, args, concurrency).await?);
    }
    let wants = |name: &str| args.only.is_empty() || args.only.iter().any(|o| o == name);
    let peers = if wants("peers") {
        let spec = catalog
            .get("lad_by_ref")
            .context("the shipped tools have no lad_by_ref")?;
        let lad_ref: String = connect(&bench_url)
            .await?
            .query_one("SELECT code FROM lads ORDER BY md5(code) LIMIT 1", &[])
            .await
            .context("picking a district for the three-way comparison")?
            .get(0);
        let setup = peers::Setup {
            spec,
            lad_ref,
            bench_url: &bench_url,
            parley_base: &server.base,
            parley_token: &token,
            statements: &args.statements,
            pool: concurrency,
            threads: args.peer_threads.max(1),
            connections: args.peer_connections.max(1),
            seconds: args.peer_seconds.max(1),
            wrk: args.wrk.clone(),
            pgbench: args.pgbench.clone().unwrap_or_else(|| {
                std::env::var_os("PARLEY_PG_BIN").map_or_else(
                    || "pgbench".into(),
                    |bin| PathBuf::from(bin).join("pgbench"),
                )
            }),
            python: args.peer_python.clone(),
        };
        let outcomes = peers::run(&setup).await?;
        Some((
            peers::report(&setup, &outcomes),
            peers::to_json(&setup, &outcomes),
        ))
    } else {
        None
    };
    let (end_rss, peak_rss) = server.memory()?;
    drop(server);

    let memory = Memory {
        idle_kib: idle_rss,
        end_kib: end_rss,
        peak_kib: peak_rss,
    };
    let report = Report {
        command,
        machine: machine(),
        pg_version,
        feedback: args.feedback,
        users: if caller_bound { tasks::USERS } else { 0 },
        concurrency,
        results: &results,
        memory,
    };
    print!("{}", report.text());
    let mut json = report.json();
    if let Some((text, peers_json)) = peers {
        print!("{text}");
        json["three_way"] = peers_json;
    }
    Ok(json)
}

/// JSON-RPC `ping` through the same HTTP, auth and rmcp path as a tool call, with no tool and
/// no database: what the transport alone costs.
async fn measure_ping(
    http: &reqwest::Client,
    base: &str,
    args: &Args,
    concurrency: usize,
) -> anyhow::Result<Measured> {
    let driver = Ping {
        http,
        url: format!("{base}/mcp"),
    };
    let n = args.requests;
    measure::run(&driver, args.warmup.min(n), concurrency, 0)
        .await
        .context("ping: warm-up")?;
    let (serial, samples) = measure::interleaved(std::slice::from_ref(&driver), n)
        .await
        .context("ping: one call at a time")?
        .pop()
        .context("no ping results")?;
    let concurrent = measure::run(&driver, n, concurrency, n)
        .await
        .with_context(|| format!("ping: concurrency {concurrency}"))?;
    eprintln!(
        "{:<24} p50 {:>8.3} ms  p99 {:>8.3} ms  {:>6.0} rps  | c={concurrency}: {:>6.0} rps",
        "ping mcp",
        ms(serial.p50),
        ms(serial.p99),
        serial.rps,
        concurrent.rps
    );
    Ok(Measured {
        tool: "(ping)",
        path: Path::Mcp,
        serial,
        samples,
        concurrent,
    })
}

struct Ping<'a> {
    http: &'a reqwest::Client,
    url: String,
}

impl Driver for Ping<'_> {
    async fn call(&self, i: usize) -> anyhow::Result<(Duration, u64)> {
        let body = format!(r#"{{"jsonrpc":"2.0","id":{},"method":"ping"}}"#, i + 1);
        let started = Instant::now();
        let response = self.http.post(&self.url).body(body).send().await?;
        let status = response.status();
        let bytes = response.bytes().await?;
        let elapsed = started.elapsed();
        let v: Value = serde_json::from_slice(&bytes)
            .with_context(|| format!("HTTP {status}: {}", String::from_utf8_lossy(&bytes)))?;
        if !status.is_success() || v.get("result").is_none() {
            bail!("ping failed: HTTP {status}: {v}");
        }
        Ok((elapsed, 0))
    }
}

/// A pool built like the server's (`parley_core::db::pool`), `size` connections.
fn floor_pool(url: &str, size: usize) -> anyhow::Result<Pool> {
    let mut config = parley_core::db::DbConfig::from_url(url)?;
    config.pool_max_size = size;
    Ok(parley_core::db::pool(&config)?)
}

/// The calls each scenario rotates over: real districts (by code and by name) for the lookup,
/// realistic searches with and without a district filter, and the bench users' task calls
/// (their tasks seeded and earlier runs' writes deleted when a task scenario is selected).
async fn scenarios(bench_url: &str, args: &Args) -> anyhow::Result<Vec<Scenario>> {
    let client = connect(bench_url).await?;
    // md5 order: a fixed, spread-out sample rather than the first 50 alphabetically.
    let lads: Vec<(String, String)> = client
        .query(
            "SELECT code, name FROM lads ORDER BY md5(code) LIMIT $1",
            &[&LAD_REFS],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    if lads.is_empty() {
        bail!("the lads table is empty");
    }
    let lookups = lads
        .iter()
        .enumerate()
        .map(|(i, (code, name))| {
            let r = if i % 2 == 0 { code } else { name };
            object(json!({ "ref": r }))
        })
        .collect();
    let ids = feedback_ids(&client).await?;
    let gets = ids.iter().map(|id| object(json!({ "id": id }))).collect();
    let searches = SEARCHES
        .iter()
        .enumerate()
        .flat_map(|(i, q)| {
            [
                object(json!({ "query": q })),
                object(json!({ "query": q, "district": lads[i % lads.len()].1 })),
            ]
        })
        .collect();
    let service = |tool, requests, calls| Scenario {
        tool,
        requests,
        calls,
        callers: Vec::new(),
        keyed: false,
    };
    let as_users = |tool, calls: tasks::Calls, keyed| Scenario {
        tool,
        requests: args.requests,
        calls: calls.calls,
        callers: calls.callers,
        keyed,
    };
    let all = [
        service("lad_by_ref", args.requests, lookups),
        service("search_feedback", args.search_requests, searches),
        service("get_feedback", args.requests, gets),
        as_users("list_tasks", tasks::list_calls(), false),
        as_users("create_task", tasks::create_calls(), true),
    ];
    for name in &args.only {
        if !SECTIONS.contains(&name.as_str()) && !all.iter().any(|s| s.tool == name) {
            bail!("unknown scenario {name:?} in --only");
        }
    }
    let selected: Vec<Scenario> = all
        .into_iter()
        .filter(|s| args.only.is_empty() || args.only.iter().any(|o| o == s.tool))
        .collect();
    if selected.iter().any(|s| !s.callers.is_empty()) {
        tasks::prepare(&client).await?;
    }
    Ok(selected)
}

/// A call's checked arguments (the caller-bound ones from `user`), the row-limit placeholder
/// and the row limit, bound by the engine's own `call::bind`, as the server binds them.
pub(crate) fn bound_values(
    spec: &ToolSpec,
    args: &Map<String, Value>,
    user: Option<&User>,
) -> anyhow::Result<FloorCall> {
    let caller = match user {
        Some(u) => Caller::User(u.claims.clone()),
        None => Caller::Service,
    };
    let Bound { values, row_limit } = call::bind(spec, Some(args), &caller)
        .map_err(|e| anyhow::anyhow!("{}: arguments {args:?} refused: {e}", spec.name))?;
    Ok(FloorCall {
        values,
        fetch: i64::try_from(row_limit + 1)?,
        row_limit,
        claims_json: user.map(|u| u.claims_json.clone()),
    })
}

pub(crate) struct FloorCall {
    pub(crate) values: Vec<SqlValue>,
    pub(crate) fetch: i64,
    pub(crate) row_limit: u64,
    /// The user's claims for `parley.caller` (`raw+tx+caller`).
    claims_json: Option<String>,
}

/// The paths compared, as one type so one call can rotate over them.
enum Paths<'a> {
    Floor(Floor<'a>),
    Mcp(Mcp<'a>),
}

impl Driver for Paths<'_> {
    async fn call(&self, i: usize) -> anyhow::Result<(Duration, u64)> {
        match self {
            Paths::Floor(d) => d.call(i).await,
            Paths::Mcp(d) => d.call(i).await,
        }
    }
}

/// The same statement and values straight on a pooled connection: checkout, the unnamed
/// statement, and reading every row's JSON text, as the server does before rendering.
struct Floor<'a> {
    pool: &'a Pool,
    spec: &'a ToolSpec,
    calls: &'a [FloorCall],
    /// The server's transaction preamble, for the `raw+tx` floors.
    begin: Option<(String, exec::CallSettings)>,
    /// `raw+tx+caller`: also `parley.caller` with the call's user, pipelined as for a user.
    as_caller: bool,
    /// A keyed write: the statement `tools::exec` runs for a call with an idempotency key.
    keys: Option<&'a Keys>,
}

impl Driver for Floor<'_> {
    async fn call(&self, i: usize) -> anyhow::Result<(Duration, u64)> {
        let call = &self.calls[i % self.calls.len()];
        let key = self.keys.map(Keys::next);
        let tool_name = self.spec.name.as_str();
        let started = Instant::now();
        let client = self.pool.get().await?;
        // Unnamed statements, as `tools::exec` sends them (nothing kept on the connection).
        let (sql, types) = match (&key, &self.spec.keyed_sql) {
            (Some(_), Some(keyed)) => (keyed.as_str(), exec::keyed_types(self.spec)),
            _ => (
                self.spec.wrapped_sql.as_str(),
                self.spec.placeholder_types.clone(),
            ),
        };
        let claims = match (self.as_caller, &call.claims_json) {
            (true, Some(claims)) => Some(claims),
            _ => None,
        };
        let mut params: Vec<&(dyn ToSql + Sync)> = self
            .spec
            .placeholder_params
            .iter()
            .map(|&p| call.values[p].as_sql())
            .collect();
        params.push(&call.fetch);
        if let Some(key) = &key {
            params.push(&tool_name);
            params.push(key);
        }
        let typed: Vec<(&(dyn ToSql + Sync), Type)> = params.into_iter().zip(types).collect();
        let rows = match &self.begin {
            None => client.query_typed(sql, &typed).await?,
            Some((begin, settings)) => {
                let caller = claims.cloned();
                let params = settings.params(&caller);
                let (begun, identified, rows, reset, committed) = tokio::join!(
                    client.batch_execute(begin),
                    client.execute_typed(exec::BEGIN_CALL, &params),
                    client.query_typed(sql, &typed),
                    client.batch_execute(exec::END_CALL),
                    client.batch_execute("COMMIT"),
                );
                begun?;
                identified?;
                let rows = rows?;
                reset?;
                committed?;
                rows
            }
        };
        let bytes: usize = rows.iter().map(|r| r.get::<_, &str>(0).len()).sum();
        std::hint::black_box(bytes);
        let elapsed = started.elapsed();
        Ok((elapsed, (rows.len() as u64).min(call.row_limit)))
    }
}

struct Memory {
    idle_kib: u64,
    end_kib: u64,
    peak_kib: u64,
}

/// MCP against the floors, in microseconds unless a ratio.
struct Overhead {
    /// p50 mcp / p50 raw: the issue's target (<= 1.2 for search_feedback).
    ratio: f64,
    /// p50 mcp − p50 raw: the issue's definition of the overhead.
    p50_over_raw: f64,
    p50_over_tx: f64,
    /// Median over calls of (mcp − raw) on the same call: steadier when the query's own time
    /// varies a lot more than the overhead.
    paired_over_raw: f64,
    paired_over_tx: f64,
}

struct Report<'a> {
    command: &'a str,
    machine: Machine,
    pg_version: &'a str,
    feedback: u64,
    /// Bench users of the caller-bound scenarios (0 when none ran).
    users: usize,
    concurrency: usize,
    results: &'a [Measured],
    memory: Memory,
}

impl Report<'_> {
    fn find(&self, tool: &str, path: Path) -> Option<&Measured> {
        self.results
            .iter()
            .find(|m| m.tool == tool && m.path == path)
    }

    /// How much `mcp` adds over the floors, for a scenario measured on all paths.
    fn overhead(&self, tool: &str) -> Option<Overhead> {
        let raw = self.find(tool, Path::Raw)?;
        let tx = self.find(tool, Path::RawTx)?;
        let mcp = self.find(tool, Path::Mcp)?;
        let us = |a: Duration, b: Duration| (a.as_secs_f64() - b.as_secs_f64()) * 1e6;
        Some(Overhead {
            ratio: mcp.serial.p50.as_secs_f64() / raw.serial.p50.as_secs_f64(),
            p50_over_raw: us(mcp.serial.p50, raw.serial.p50),
            p50_over_tx: us(mcp.serial.p50, tx.serial.p50),
            paired_over_raw: measure::paired_median_us(&mcp.samples, &raw.samples),
            paired_over_tx: measure::paired_median_us(&mcp.samples, &tx.samples),
        })
    }

    /// What identity costs a caller-bound tool: `raw+tx+caller` over `raw+tx`, in µs.
    fn identity(&self, tool: &str) -> Option<(f64, f64)> {
        let tx = self.find(tool, Path::RawTx)?;
        let caller = self.find(tool, Path::RawTxCaller)?;
        Some((
            (caller.serial.p50.as_secs_f64() - tx.serial.p50.as_secs_f64()) * 1e6,
            measure::paired_median_us(&caller.samples, &tx.samples),
        ))
    }

    /// What the server adds to a user's call over `raw+tx+caller`, in µs: the median of
    /// per-call differences (steadier than the p50 difference when the commit's WAL flush
    /// varies from call to call).
    fn over_caller_floor(&self, tool: &str) -> Option<f64> {
        let caller = self.find(tool, Path::RawTxCaller)?;
        let mcp = self.find(tool, Path::Mcp)?;
        Some(measure::paired_median_us(&mcp.samples, &caller.samples))
    }

    /// The caller-bound targets, as printed lines and as JSON.
    fn caller_targets(&self) -> (Vec<String>, Value) {
        let mut lines = Vec::new();
        let mut json = Map::new();
        if let Some((p50, paired)) = self.identity("list_tasks") {
            let met = p50 < IDENTITY_TARGET_US;
            lines.push(format!(
                "list_tasks: identity cost p50 = (raw+tx+caller) - (raw+tx) = {p50:.0} us (median \
                 per-call diff {paired:.0} us); target < {IDENTITY_TARGET_US:.0} us p50 and no \
                 round trip (role and parley.caller go in the call's one pipeline): {}",
                if met { "met" } else { "MISSED" }
            ));
            json.insert(
                "list_tasks".into(),
                json!({ "identity_p50_diff_us": p50, "identity_paired_median_diff_us": paired,
                        "target_us": IDENTITY_TARGET_US, "met": met }),
            );
        }
        let p50 = |tool, path| self.find(tool, path).map(|m| ms(m.serial.p50));
        let mut write = Map::new();
        if let Some((p50, paired)) = self.identity("create_task") {
            lines.push(format!(
                "create_task: identity cost p50 = {p50:.0} us (median per-call diff {paired:.0} us)"
            ));
            write.insert("identity_p50_diff_us".into(), json!(p50));
            write.insert("identity_paired_median_diff_us".into(), json!(paired));
        }
        if let (Some(mcp), Some(floor)) = (
            p50("create_task", Path::Mcp),
            p50("create_task", Path::RawTxCaller),
        ) {
            let mut line = format!(
                "create_task: mcp p50 {mcp:.3} ms; its floor (one pipelined round trip and the \
                 commit, raw+tx+caller) {floor:.3} ms"
            );
            write.insert("mcp_p50_ms".into(), json!(mcp));
            write.insert("floor_p50_ms".into(), json!(floor));
            if let (Some(read), Some(read_floor), Some(write_over), Some(read_over)) = (
                p50("list_tasks", Path::Mcp),
                p50("list_tasks", Path::RawTxCaller),
                self.over_caller_floor("create_task"),
                self.over_caller_floor("list_tasks"),
            ) {
                // The write's own extra is its commit (a WAL flush); the server must not add a
                // round trip on top, so it should add to a write what it adds to a read.
                let met = write_over <= read_over + IDENTITY_TARGET_US;
                let _ = write!(
                    line,
                    "\n  beside a read (list_tasks): mcp p50 {read:.3} ms, floor {read_floor:.3} ms; \
                     write - read: {:+.3} ms mcp, {:+.3} ms floors (the commit)\n  mcp over its \
                     floor (median per-call diff): write {write_over:.0} us, read \
                     {read_over:.0} us; target one round \
                     trip plus its commit (mcp adds to a write at most {IDENTITY_TARGET_US:.0} us \
                     more than to a read): {}",
                    mcp - read,
                    floor - read_floor,
                    if met { "met" } else { "MISSED" }
                );
                write.insert("read_mcp_p50_ms".into(), json!(read));
                write.insert("read_floor_p50_ms".into(), json!(read_floor));
                write.insert("mcp_over_floor_paired_median_us".into(), json!(write_over));
                write.insert(
                    "read_mcp_over_floor_paired_median_us".into(),
                    json!(read_over),
                );
                write.insert("met".into(), json!(met));
            }
            lines.push(line);
        }
        if !write.is_empty() {
            json.insert("create_task".into(), Value::Object(write));
        }
        (lines, Value::Object(json))
    }

    fn tools(&self) -> Vec<&'static str> {
        let mut tools: Vec<&'static str> = self.results.iter().map(|m| m.tool).collect();
        tools.dedup();
        tools
    }

    fn text(&self) -> String {
        let m = &self.machine;
        let c = self.concurrency;
        let mut out = String::new();
        let _ = write!(out, "\nparley-bench mcp: {} feedback rows", self.feedback);
        if self.users > 0 {
            let _ = write!(out, ", {} bench users' tasks", self.users);
        }
        let _ = writeln!(out, ", Postgres {}", self.pg_version);
        let _ = writeln!(out, "{}", m.line("server, Postgres and client"));
        let _ = writeln!(out, "command: {}\n", self.command);
        let _ = writeln!(
            out,
            "{:<16} {:<13} {:>5} {:>9} {:>9} {:>9} {:>8} {:>8} {:>9}",
            "scenario",
            "path",
            "rows",
            "p50 ms",
            "p99 ms",
            "mean ms",
            "rps c=1",
            format!("rps c={c}"),
            format!("p99 c={c}")
        );
        for r in self.results {
            let s = r.serial;
            let _ = writeln!(
                out,
                "{:<16} {:<13} {:>5.1} {:>9.3} {:>9.3} {:>9.3} {:>8.0} {:>8.0} {:>9.3}",
                r.tool,
                r.path.name(),
                s.rows_per_call,
                ms(s.p50),
                ms(s.p99),
                ms(s.mean),
                s.rps,
                r.concurrent.rps,
                ms(r.concurrent.p99)
            );
        }
        let _ = writeln!(
            out,
            "(c=1: calls interleaved across paths, rps = 1/mean; c={c}: {c} in flight per path, wall-clock rps)\n"
        );
        for tool in self.tools() {
            if let Some(o) = self.overhead(tool) {
                let verdict = match tool {
                    "search_feedback" if o.ratio <= 1.2 => "target <= 1.20x: met",
                    "search_feedback" => "target <= 1.20x: MISSED",
                    _ => "rmcp's published figure: ~300 us",
                };
                let _ = writeln!(
                    out,
                    "{tool}: p50 mcp/raw = {:.2}x ({verdict})\n  MCP overhead: p50 diff {:.0} us over raw, \
                     {:.0} us over raw+tx; median per-call diff {:.0} us over raw, {:.0} us over raw+tx",
                    o.ratio, o.p50_over_raw, o.p50_over_tx, o.paired_over_raw, o.paired_over_tx
                );
            }
        }
        for line in self.caller_targets().0 {
            let _ = writeln!(out, "{line}");
        }
        let mib = |kib: u64| kib as f64 / 1024.0;
        let _ = writeln!(
            out,
            "mcp process RSS: {:.1} MiB idle after start, {:.1} MiB at the end, peak (VmHWM) {:.1} MiB",
            mib(self.memory.idle_kib),
            mib(self.memory.end_kib),
            mib(self.memory.peak_kib)
        );
        out
    }

    fn json(&self) -> Value {
        let results: Vec<Value> = self
            .results
            .iter()
            .map(|r| {
                json!({
                    "scenario": r.tool,
                    "path": r.path.name(),
                    "serial": r.serial.to_json(),
                    "concurrent": r.concurrent.to_json(),
                })
            })
            .collect();
        let overhead: Map<String, Value> = self
            .tools()
            .into_iter()
            .filter_map(|t| {
                self.overhead(t).map(|o| {
                    (
                        t.to_owned(),
                        json!({
                            "p50_ratio_mcp_raw": o.ratio,
                            "p50_diff_us_raw": o.p50_over_raw,
                            "p50_diff_us_raw_tx": o.p50_over_tx,
                            "paired_median_diff_us_raw": o.paired_over_raw,
                            "paired_median_diff_us_raw_tx": o.paired_over_tx,
                        }),
                    )
                })
            })
            .collect();
        json!({
            "command": self.command,
            "machine": self.machine.to_json(),
            "postgres": self.pg_version,
            "feedback_rows": self.feedback,
            "bench_users": self.users,
            "concurrency": self.concurrency,
            "results": results,
            "overhead": overhead,
            "caller_bound": self.caller_targets().1,
            "mcp_rss_kib": { "idle": self.memory.idle_kib, "end": self.memory.end_kib, "peak": self.memory.peak_kib },
        })
    }
}
