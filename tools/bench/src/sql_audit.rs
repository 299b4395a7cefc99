//! `parley-bench mcp`'s section for issue 12 (`--only sql-audit`, also the end of every
//! default run): what the ad-hoc path costs against a declared tool doing the same lookup, and
//! what the audit trail costs a call, in latency and in WAL (a read must wait for no flush).
//!
//! Two mcp processes run side by side, identical but for `AUDIT` (`off`, `postgres`), both
//! serving the feedback tools and `run_sql` as a LOGIN role that is a member of
//! `parley_sql_reader` only. The ad-hoc path: `get_feedback` and `run_sql` of the same SELECT
//! on both, interleaved call by call so drift hits all four alike. The audit: blocks of
//! `get_feedback` calls on one process at a time, alternating, with `pg_stat_wal` read before
//! and after each block. Its latency cost comes from the blocks, not the interleaved run:
//! there the audited process's background INSERT overlaps whichever call comes next, audited
//! or not, which hides most of it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use parley_tools::adhoc::role::READER_GROUP;
use serde_json::{Map, Value, json};
use tokio_postgres::error::SqlState;

use crate::mcp_client::{Mcp, feedback_ids, http_client, object, tools_file_setting};
use crate::measure::{self, Stats, ms};
use crate::server::Server;
use crate::setup::{Machine, connect, now_nanos};

/// The `--only` name of this section.
pub const SECTION: &str = "sql-audit";

/// The LOGIN role `run_sql` connects as: created if missing, a member of `parley_sql_reader`
/// only (roles are cluster-wide, so every bench database shares it).
const ROLE: &str = "parley_sql_bench";

/// The declared read: one feedback item by primary key, joined to its district by primary key.
const TOOL: &str = "get_feedback";

/// The target: auditing adds under this much to a call at p50.
const AUDIT_TARGET_US: f64 = 100.0;

/// A backend reports its WAL counters to `pg_stat_wal` at most once a second, and one that
/// goes idle with counts still unreported does so within Postgres' `PGSTAT_IDLE_INTERVAL`
/// (10 s), or when it next works after a second. The first bench runs read each block 1.5 s
/// after its last call and saw the mcp backends' last counts land in the next audited block
/// (the first one read half its records), so a block's counters are read this long after.
const STATS_SETTLE: Duration = Duration::from_secs(11);

/// How long the audit's background writer may take to store a phase's records.
const AUDIT_WAIT: Duration = Duration::from_secs(30);

/// What the section needs from `parley-bench mcp`.
pub struct Settings<'a> {
    /// A superuser's URL (creates the role).
    pub admin_url: &'a str,
    pub bench_url: &'a str,
    pub bin: &'a Path,
    /// Calls per tool and `AUDIT` setting in the latency run.
    pub requests: usize,
    pub warmup: usize,
    /// WAL blocks per `AUDIT` setting, and calls per block.
    pub blocks: usize,
    pub block_calls: usize,
    /// Each process's `DB_POOL_MAX_SIZE`.
    pub pool: usize,
    pub server_log: &'a str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Audit {
    Off,
    Postgres,
}

impl Audit {
    fn name(self) -> &'static str {
        match self {
            Audit::Off => "off",
            Audit::Postgres => "postgres",
        }
    }
}

/// One tool on one process, one call at a time.
struct Latency {
    tool: &'static str,
    audit: Audit,
    stats: Stats,
    samples: Vec<Duration>,
}

/// `pg_stat_wal`'s counters (Postgres 14+).
#[derive(Debug, Clone, Copy, Default)]
struct Wal {
    records: i64,
    bytes: i64,
    write: i64,
    sync: i64,
}

impl Wal {
    fn since(self, before: Wal) -> Wal {
        Wal {
            records: self.records - before.records,
            bytes: self.bytes - before.bytes,
            write: self.write - before.write,
            sync: self.sync - before.sync,
        }
    }
}

/// One block of `get_feedback` calls on one process.
struct Block {
    audit: Audit,
    wal: Wal,
    /// `parley.audit` rows written for the block's calls.
    audit_rows: i64,
    samples: Vec<Duration>,
}

/// The server settings the WAL figures depend on, as `SHOW` gives them.
struct WalSettings {
    fsync: String,
    sync_method: String,
    writer_delay: String,
    synchronous_commit: String,
}

pub struct Outcome {
    requests: usize,
    block_calls: usize,
    latency: Vec<Latency>,
    blocks: Vec<Block>,
    /// Calls made to the audited process, and the `parley.audit` rows they left.
    audited_calls: i64,
    audit_rows: i64,
    wal_settings: WalSettings,
}

pub async fn run(s: &Settings<'_>) -> anyhow::Result<Outcome> {
    let sql_url = reader_url(s.admin_url, s.bench_url).await?;
    let client = connect(s.bench_url).await?;
    let ids = feedback_ids(&client).await?;
    let select = declared_sql(&parley_domain_feedback::tools_path(), TOOL)?;
    let gets: Vec<Map<String, Value>> = ids.iter().map(|id| object(json!({ "id": id }))).collect();
    // The same SELECT with the id as a literal, as a model would write it; `limit` as the
    // declared tool's `max_rows`.
    let sqls: Vec<Map<String, Value>> = ids
        .iter()
        .map(|id| object(json!({ "sql": select.replace(":id", &id.to_string()), "limit": 1 })))
        .collect();

    let run_id = format!("{:x}-{}", std::process::id(), now_nanos());
    let sql_file = SqlFile::write(&run_id)?;
    let token = format!("bench-{run_id}");
    let tools_file =
        tools_file_setting(&[parley_domain_feedback::tools_path(), sql_file.0.clone()]);
    let env = |audit: Audit| {
        vec![
            ("DATABASE_URL", s.bench_url.to_owned()),
            ("SQL_DATABASE_URL", sql_url.clone()),
            ("MCP_AUTH_TOKEN", token.clone()),
            ("TOOLS_FILE", tools_file.clone()),
            ("AUDIT", audit.name().to_owned()),
            ("RUST_LOG", s.server_log.to_owned()),
            ("DB_POOL_MAX_SIZE", s.pool.to_string()),
        ]
    };
    let off = Server::start(s.bin, &env(Audit::Off)).await?;
    let on = Server::start(s.bin, &env(Audit::Postgres)).await?;
    eprintln!(
        "sql-audit: mcp AUDIT=off pid {} at {}, AUDIT=postgres pid {} at {}",
        off.pid(),
        off.base,
        on.pid(),
        on.base
    );
    let http = http_client(&token, 1)?;
    let paths = [
        (TOOL, Audit::Off, &off, &gets),
        (TOOL, Audit::Postgres, &on, &gets),
        ("run_sql", Audit::Off, &off, &sqls),
        ("run_sql", Audit::Postgres, &on, &sqls),
    ];
    let drivers: Vec<Mcp> = paths
        .iter()
        .map(|(tool, _, server, calls)| {
            Mcp::new(&http, &server.base, tool, calls, Vec::new(), None)
        })
        .collect();

    let first_id = last_audit_id(&client).await?;
    let mut audited_calls = 0i64;
    for ((tool, audit, _, _), driver) in paths.iter().zip(&drivers) {
        measure::run(driver, s.warmup, 1, 0)
            .await
            .with_context(|| format!("sql-audit: {tool} AUDIT={}: warm-up", audit.name()))?;
        if *audit == Audit::Postgres {
            audited_calls += s.warmup as i64;
        }
    }
    let serial = measure::interleaved(&drivers, s.requests)
        .await
        .context("sql-audit: one call at a time")?;
    let latency: Vec<Latency> = paths
        .iter()
        .zip(serial)
        .map(|((tool, audit, _, _), (stats, samples))| Latency {
            tool,
            audit: *audit,
            stats,
            samples,
        })
        .collect();
    for l in &latency {
        eprintln!(
            "{:<27} p50 {:>8.3} ms  p99 {:>8.3} ms  {:>6.0} rps",
            format!("{} AUDIT={}", l.tool, l.audit.name()),
            ms(l.stats.p50),
            ms(l.stats.p99),
            l.stats.rps
        );
    }
    if latency
        .iter()
        .any(|l| l.stats.rows_per_call != latency[0].stats.rows_per_call)
    {
        bail!("sql-audit: run_sql and {TOOL} returned different row counts");
    }
    audited_calls += 2 * s.requests as i64;
    wait_for_audit(&client, first_id, audited_calls).await?;

    // WAL: one process at a time, blocks alternating which goes first, so drift and other
    // sessions' WAL (pg_stat_wal is cluster-wide) fall on both settings alike.
    tokio::time::sleep(STATS_SETTLE).await;
    let mut blocks = Vec::new();
    for b in 0..s.blocks {
        let order = if b % 2 == 0 {
            [Audit::Off, Audit::Postgres]
        } else {
            [Audit::Postgres, Audit::Off]
        };
        for audit in order {
            let driver = &drivers[if audit == Audit::Off { 0 } else { 1 }];
            let from_id = last_audit_id(&client).await?;
            let before = wal(&client).await?;
            let (_, samples) = measure::interleaved(std::slice::from_ref(driver), s.block_calls)
                .await
                .with_context(|| format!("sql-audit: WAL block AUDIT={}", audit.name()))?
                .pop()
                .context("no block results")?;
            if audit == Audit::Postgres {
                wait_for_audit(&client, from_id, s.block_calls as i64).await?;
                audited_calls += s.block_calls as i64;
            }
            tokio::time::sleep(STATS_SETTLE).await;
            let wal = wal(&client).await?.since(before);
            let audit_rows = audit_rows_since(&client, from_id).await?;
            eprintln!(
                "sql-audit: WAL block {} AUDIT={:<8}: {} records, {} bytes, {} writes, {} syncs, {} audit rows",
                b + 1,
                audit.name(),
                wal.records,
                wal.bytes,
                wal.write,
                wal.sync,
                audit_rows
            );
            blocks.push(Block {
                audit,
                wal,
                audit_rows,
                samples,
            });
        }
    }
    let audit_rows = audit_rows_since(&client, first_id).await?;
    drop((off, on));

    let show = |name: &'static str| {
        let client = &client;
        async move {
            let row = client.query_one(&format!("SHOW {name}"), &[]).await?;
            anyhow::Ok(row.get::<_, String>(0))
        }
    };
    let wal_settings = WalSettings {
        fsync: show("fsync").await?,
        sync_method: show("wal_sync_method").await?,
        writer_delay: show("wal_writer_delay").await?,
        synchronous_commit: show("synchronous_commit").await?,
    };
    Ok(Outcome {
        requests: s.requests,
        block_calls: s.block_calls,
        latency,
        blocks,
        audited_calls,
        audit_rows,
        wal_settings,
    })
}

/// Creates [`ROLE`] if missing, checks it belongs to `parley_sql_reader` and nothing else, and
/// returns the bench database's URL as that role.
async fn reader_url(admin_url: &str, bench_url: &str) -> anyhow::Result<String> {
    let admin = connect(admin_url)
        .await
        .context("connecting to DATABASE_URL")?;
    // Another run may create it at the same moment: losing that race is fine.
    let created = admin
        .batch_execute(&format!(
            "CREATE ROLE {ROLE} LOGIN PASSWORD '{ROLE}' IN ROLE {READER_GROUP}"
        ))
        .await;
    match created {
        Ok(()) => eprintln!("sql-audit: created role {ROLE} in {READER_GROUP}"),
        Err(e)
            if e.code() == Some(&SqlState::DUPLICATE_OBJECT)
                || e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {}
        Err(e) => {
            return Err(e).with_context(|| {
                format!("creating role {ROLE} (DATABASE_URL must be a superuser)")
            });
        }
    }
    // The limits docs/sql.md's recipe sets and start-up requires.
    admin
        .batch_execute(&format!(
            "ALTER ROLE {ROLE} CONNECTION LIMIT 10; ALTER ROLE {ROLE} SET temp_file_limit = '256MB'"
        ))
        .await
        .with_context(|| format!("limiting role {ROLE}"))?;
    let groups: Vec<String> = admin
        .query(
            "SELECT g.rolname::text FROM pg_catalog.pg_auth_members m
             JOIN pg_catalog.pg_roles r ON r.oid = m.member
             JOIN pg_catalog.pg_roles g ON g.oid = m.roleid
             WHERE r.rolname = $1 ORDER BY 1",
            &[&ROLE],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if groups != [READER_GROUP] {
        bail!(
            "role {ROLE} must be a member of {READER_GROUP} and nothing else; it is in {groups:?} \
             (DROP ROLE {ROLE} and rerun: the bench creates it)"
        );
    }
    let mut url = url::Url::parse(bench_url)?;
    url.set_username(ROLE)
        .and_then(|()| url.set_password(Some(ROLE)))
        .map_err(|()| anyhow::anyhow!("DATABASE_URL cannot take a user name"))?;
    Ok(url.to_string())
}

/// The SQL of tool `name` in the tools file at `path`, as its author wrote it.
fn declared_sql(path: &Path, name: &str) -> anyhow::Result<String> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let file: toml::Table = toml::from_str(&text)?;
    file.get("tool")
        .and_then(|t| t.as_array())
        .into_iter()
        .flatten()
        .find(|t| t.get("name").and_then(|n| n.as_str()) == Some(name))
        .and_then(|t| t.get("sql"))
        .and_then(|s| s.as_str())
        .map(|s| s.trim().to_owned())
        .with_context(|| format!("{} has no tool {name} with sql", path.display()))
}

/// The temporary tools file that turns `run_sql` on over the feedback tables (`public`);
/// removed when dropped.
struct SqlFile(PathBuf);

impl SqlFile {
    fn write(run_id: &str) -> anyhow::Result<Self> {
        let path = std::env::temp_dir().join(format!("parley-bench-sql-{run_id}.toml"));
        std::fs::write(
            &path,
            "# parley-bench mcp --only sql-audit: run_sql over the feedback domain's tables.\n\
             [sql]\nschemas = [\"public\"]\ntools = [\"run_sql\"]\n",
        )
        .with_context(|| format!("writing {}", path.display()))?;
        Ok(Self(path))
    }
}

impl Drop for SqlFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

async fn wal(client: &tokio_postgres::Client) -> anyhow::Result<Wal> {
    let row = client
        .query_one(
            "SELECT wal_records, wal_bytes::bigint, wal_write, wal_sync FROM pg_catalog.pg_stat_wal",
            &[],
        )
        .await
        .context("reading pg_stat_wal")?;
    Ok(Wal {
        records: row.get(0),
        bytes: row.get(1),
        write: row.get(2),
        sync: row.get(3),
    })
}

async fn last_audit_id(client: &tokio_postgres::Client) -> anyhow::Result<i64> {
    Ok(client
        .query_one("SELECT coalesce(max(id), 0) FROM parley.audit", &[])
        .await
        .context("reading parley.audit")?
        .get(0))
}

async fn audit_rows_since(client: &tokio_postgres::Client, id: i64) -> anyhow::Result<i64> {
    Ok(client
        .query_one("SELECT count(*) FROM parley.audit WHERE id > $1", &[&id])
        .await
        .context("counting parley.audit rows")?
        .get(0))
}

/// Waits until `expected` rows past `id` are in `parley.audit` (the writer stores them after
/// the calls answered); fails with the count if they do not all arrive.
async fn wait_for_audit(
    client: &tokio_postgres::Client,
    id: i64,
    expected: i64,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + AUDIT_WAIT;
    loop {
        let rows = audit_rows_since(client, id).await?;
        if rows >= expected {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "sql-audit: {rows} of {expected} audit records reached parley.audit within {} s",
                AUDIT_WAIT.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The median of `values`.
fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_unstable_by(f64::total_cmp);
    values[(values.len() - 1) / 2]
}

/// One `AUDIT` setting's blocks: the median block per counter, per 1000 calls, and the
/// latencies of all its blocks together.
struct WalSummary {
    records: f64,
    bytes: f64,
    write: f64,
    sync: f64,
    audit_rows: i64,
    p50: Duration,
    p99: Duration,
}

/// What auditing adds to a `get_feedback` call, in µs (see [`Outcome::audit_cost`]).
struct AuditCost {
    p50: f64,
    p99: f64,
    block_pairs: f64,
    lowest: f64,
    highest: f64,
}

impl AuditCost {
    fn met(&self) -> bool {
        self.p50 < AUDIT_TARGET_US
    }
}

impl Outcome {
    fn find(&self, tool: &str, audit: Audit) -> &Latency {
        self.latency
            .iter()
            .find(|l| l.tool == tool && l.audit == audit)
            .expect("every tool runs with both settings")
    }

    /// `a − b` at p50 and as the median of per-call differences, in µs.
    fn diff(&self, a: (&str, Audit), b: (&str, Audit)) -> (f64, f64) {
        let (a, b) = (self.find(a.0, a.1), self.find(b.0, b.1));
        (
            (a.stats.p50.as_secs_f64() - b.stats.p50.as_secs_f64()) * 1e6,
            measure::paired_median_us(&a.samples, &b.samples),
        )
    }

    fn wal_summary(&self, audit: Audit) -> WalSummary {
        let blocks: Vec<&Block> = self.blocks.iter().filter(|b| b.audit == audit).collect();
        let per_1000 = |f: fn(&Wal) -> i64| {
            median(
                blocks
                    .iter()
                    .map(|b| f(&b.wal) as f64 * 1000.0 / self.block_calls as f64)
                    .collect(),
            )
        };
        let mut samples: Vec<Duration> = blocks.iter().flat_map(|b| b.samples.clone()).collect();
        samples.sort_unstable();
        WalSummary {
            records: per_1000(|w| w.records),
            bytes: per_1000(|w| w.bytes),
            write: per_1000(|w| w.write),
            sync: per_1000(|w| w.sync),
            audit_rows: blocks.iter().map(|b| b.audit_rows).sum(),
            p50: measure::percentile(&samples, 50.0),
            p99: measure::percentile(&samples, 99.0),
        }
    }

    /// The audit's cost on the declared read, from the blocks (the target's measure): the
    /// pooled p50 and p99 differences, and the median and range of the per-block-pair p50
    /// differences (block `b` with the audit against block `b` without), in µs.
    fn audit_cost(&self) -> AuditCost {
        let (off, on) = (
            self.wal_summary(Audit::Off),
            self.wal_summary(Audit::Postgres),
        );
        let us = |a: Duration, b: Duration| (a.as_secs_f64() - b.as_secs_f64()) * 1e6;
        let block_p50 = |audit| -> Vec<Duration> {
            self.blocks
                .iter()
                .filter(|b| b.audit == audit)
                .map(|b| {
                    let mut samples = b.samples.clone();
                    samples.sort_unstable();
                    measure::percentile(&samples, 50.0)
                })
                .collect()
        };
        let pairs: Vec<f64> = block_p50(Audit::Postgres)
            .into_iter()
            .zip(block_p50(Audit::Off))
            .map(|(on, off)| us(on, off))
            .collect();
        let lowest = pairs.iter().copied().fold(f64::INFINITY, f64::min);
        let highest = pairs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        AuditCost {
            p50: us(on.p50, off.p50),
            p99: us(on.p99, off.p99),
            block_pairs: median(pairs),
            lowest,
            highest,
        }
    }

    /// No WAL flush per read: the audited blocks sync less than once per 10 calls more than
    /// the unaudited ones (a flush per call would add 1000 per 1000 calls).
    fn no_flush_per_read(&self) -> bool {
        self.wal_summary(Audit::Postgres).sync - self.wal_summary(Audit::Off).sync < 100.0
    }

    pub fn text(
        &self,
        command: &str,
        machine: &Machine,
        pg_version: &str,
        feedback: u64,
    ) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "\nparley-bench mcp, ad-hoc SQL and the audit: {feedback} feedback rows, Postgres {pg_version}"
        );
        let _ = writeln!(
            out,
            "{}",
            machine.line("two mcp processes, Postgres and client")
        );
        let _ = writeln!(out, "command: {command}");
        let _ = writeln!(
            out,
            "{TOOL} (declared: a feedback item by primary key, joined to its district by primary key) \
             vs run_sql of the same SELECT with the id as a literal (as {ROLE}, a member of \
             parley_sql_reader only), on two mcp processes identical but for AUDIT\n"
        );
        let _ = writeln!(
            out,
            "{:<14} {:<9} {:>5} {:>9} {:>9} {:>9} {:>8}",
            "tool", "audit", "rows", "p50 ms", "p99 ms", "mean ms", "rps c=1"
        );
        for l in &self.latency {
            let s = l.stats;
            let _ = writeln!(
                out,
                "{:<14} {:<9} {:>5.1} {:>9.3} {:>9.3} {:>9.3} {:>8.0}",
                l.tool,
                l.audit.name(),
                s.rows_per_call,
                ms(s.p50),
                ms(s.p99),
                ms(s.mean),
                s.rps
            );
        }
        let _ = writeln!(
            out,
            "(c=1: the four interleaved call by call, {} calls each, rps = 1/mean)",
            self.requests
        );
        for audit in [Audit::Off, Audit::Postgres] {
            let (p50, paired) = self.diff(("run_sql", audit), (TOOL, audit));
            let _ = writeln!(
                out,
                "ad-hoc path, AUDIT={}: run_sql - {TOOL} p50 {p50:+.0} us (median per-call diff {paired:+.0} us)",
                audit.name()
            );
        }
        let (p50, paired) = self.diff((TOOL, Audit::Postgres), (TOOL, Audit::Off));
        let (sql_p50, sql_paired) =
            self.diff(("run_sql", Audit::Postgres), ("run_sql", Audit::Off));
        let _ = writeln!(
            out,
            "postgres - off in this table: {TOOL} p50 {p50:+.0} us (median per-call diff \
             {paired:+.0} us), run_sql p50 {sql_p50:+.0} us ({sql_paired:+.0} us): understated, \
             as the audited process's background INSERT runs during whichever call comes next, \
             so its cost spreads over all four rows; the blocks below measure it"
        );

        let blocks = self.blocks.len() / 2;
        let _ = writeln!(
            out,
            "\n{TOOL} in blocks of {} calls on one process at a time, {blocks} blocks per \
             setting, alternating; WAL per 1000 calls from pg_stat_wal (cluster-wide), median \
             block, read {:.1} s after each block's last call; latency of all blocks together:",
            self.block_calls,
            STATS_SETTLE.as_secs_f64()
        );
        let _ = writeln!(
            out,
            "{:<14} {:>11} {:>11} {:>9} {:>9} {:>9} {:>9}",
            "audit", "wal_records", "wal_bytes", "wal_write", "wal_sync", "p50 ms", "p99 ms"
        );
        let (off, on) = (
            self.wal_summary(Audit::Off),
            self.wal_summary(Audit::Postgres),
        );
        for (name, w) in [("off", &off), ("postgres", &on)] {
            let _ = writeln!(
                out,
                "{:<14} {:>11.0} {:>11.0} {:>9.0} {:>9.0} {:>9.3} {:>9.3}",
                name,
                w.records,
                w.bytes,
                w.write,
                w.sync,
                ms(w.p50),
                ms(w.p99)
            );
        }
        let _ = writeln!(
            out,
            "{:<14} {:>+11.0} {:>+11.0} {:>+9.0} {:>+9.0} {:>+9.3} {:>+9.3}",
            "postgres - off",
            on.records - off.records,
            on.bytes - off.bytes,
            on.write - off.write,
            on.sync - off.sync,
            ms(on.p50) - ms(off.p50),
            ms(on.p99) - ms(off.p99)
        );
        let cost = self.audit_cost();
        let _ = writeln!(
            out,
            "audit cost per call, postgres - off: p50 {:+.0} us, p99 {:+.0} us (p50 diffs of the \
             {blocks} block pairs: median {:+.0} us, {:+.0} to {:+.0} us); target < \
             {AUDIT_TARGET_US:.0} us p50: {}",
            cost.p50,
            cost.p99,
            cost.block_pairs,
            cost.lowest,
            cost.highest,
            if cost.met() { "met" } else { "MISSED" }
        );
        let audited_blocks = (self.block_calls * blocks) as i64;
        let _ = writeln!(
            out,
            "audit rows: {} of {audited_blocks} audited block calls, {} with AUDIT=off; {} of {} calls \
             to the audited process in all (warm-up included): {}",
            on.audit_rows,
            off.audit_rows,
            self.audit_rows,
            self.audited_calls,
            if self.audit_rows == self.audited_calls && off.audit_rows == 0 {
                "all written"
            } else {
                "MISMATCH"
            }
        );
        let w = &self.wal_settings;
        let sync_added = on.sync - off.sync;
        let verdict = if self.no_flush_per_read() {
            "met"
        } else {
            "MISSED"
        };
        let _ = write!(
            out,
            "no WAL flush to a read: {sync_added:+.0} wal_sync per 1000 audited calls (a flush per \
             call would be +1000): {verdict}"
        );
        // Why, only when the figures show it: the audit's rows are in the WAL, its flushes are not.
        if self.no_flush_per_read() && on.records - off.records >= 1000.0 {
            let _ = write!(
                out,
                "\n  the audit writes {:+.0} WAL records per 1000 calls but they are flushed in the \
                 background: its INSERTs commit with synchronous_commit = off, so no call waits for \
                 an fsync, and the WAL writer flushes what has accumulated every wal_writer_delay \
                 ({}) or per wal_writer_flush_after",
                on.records - off.records,
                w.writer_delay
            );
        }
        let _ = writeln!(
            out,
            "\n(server: fsync {}, wal_sync_method {}, synchronous_commit {} for other sessions)",
            w.fsync, w.sync_method, w.synchronous_commit
        );
        out
    }

    pub fn json(&self) -> Value {
        let latency: Vec<Value> = self
            .latency
            .iter()
            .map(
                |l| json!({ "tool": l.tool, "audit": l.audit.name(), "serial": l.stats.to_json() }),
            )
            .collect();
        let wal = |audit| {
            let w: WalSummary = self.wal_summary(audit);
            json!({
                "wal_records_per_1000": w.records,
                "wal_bytes_per_1000": w.bytes,
                "wal_write_per_1000": w.write,
                "wal_sync_per_1000": w.sync,
                "audit_rows": w.audit_rows,
                "p50_us": measure::micros(w.p50),
                "p99_us": measure::micros(w.p99),
            })
        };
        let blocks: Vec<Value> = self
            .blocks
            .iter()
            .map(|b| {
                json!({
                    "audit": b.audit.name(),
                    "wal_records": b.wal.records,
                    "wal_bytes": b.wal.bytes,
                    "wal_write": b.wal.write,
                    "wal_sync": b.wal.sync,
                    "audit_rows": b.audit_rows,
                })
            })
            .collect();
        let cost = self.audit_cost();
        json!({
            "latency": latency,
            "audit_cost_us": { "p50_diff": cost.p50, "p99_diff": cost.p99,
                               "block_pairs_p50_diff_median": cost.block_pairs,
                               "block_pairs_p50_diff_min": cost.lowest,
                               "block_pairs_p50_diff_max": cost.highest,
                               "target": AUDIT_TARGET_US, "met": cost.met() },
            "wal": { "off": wal(Audit::Off), "postgres": wal(Audit::Postgres),
                     "calls_per_block": self.block_calls, "blocks": blocks,
                     "no_flush_per_read": self.no_flush_per_read(),
                     "wal_writer_delay": self.wal_settings.writer_delay,
                     "wal_sync_method": self.wal_settings.sync_method,
                     "fsync": self.wal_settings.fsync },
            "audit_rows": { "written": self.audit_rows, "audited_calls": self.audited_calls },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_sql_sends_the_declared_select_with_the_id_as_a_literal() {
        let select = declared_sql(&parley_domain_feedback::tools_path(), TOOL).unwrap();
        assert_eq!(select.matches(":id").count(), 1, "{select}");
        let sql = select.replace(":id", "42");
        assert!(
            sql.starts_with("SELECT") && sql.ends_with("WHERE f.id = 42"),
            "{sql}"
        );
        assert!(declared_sql(&parley_domain_feedback::tools_path(), "no_such_tool").is_err());
    }

    #[test]
    fn the_median_is_the_middle_value_or_the_lower_of_two() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0]), 1.0);
        assert_eq!(median(Vec::new()), 0.0);
    }
}
