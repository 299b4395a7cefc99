//! `parley catalog`: the semantic catalog of a team's database (docs/catalog.md).
//! `init --schema S...` drafts a catalog file from the live database with no model; `refresh
//! FILE` brings one up to date and keeps every human edit; `check FILE` says, entry by entry,
//! whether the file still fits the database: every table and column exists, every relationship
//! joins columns that exist, and every metric and verified query plans (`EXPLAIN`) as the role
//! the assistant's SQL runs as. `index FILE` rebuilds the search index, FILE a path or an
//! `s3://bucket/key` object (the admin function runs it on a schedule; [`source`]).

pub mod source;

use std::path::{Path, PathBuf};

use parley_core::config::Env;
use parley_core::db::pg_message;
use parley_embed::{EmbedSettings, Embedder};
use parley_tools::output::Limits;
use parley_tools::semantic::file::CatalogFile;
use parley_tools::semantic::index::{self, ValueBounds};
use parley_tools::semantic::{self, Bounds, Snapshot, introspect, verified, write};
use tokio_postgres::Client;

use self::source::Source;
use super::{CmdError, Out};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub action: Action,
}

#[derive(Debug, clap::Subcommand)]
pub enum Action {
    /// Draft a catalog file from the database: tables, columns, types, keys, foreign keys,
    /// comments, row counts, ranges and the values of low-cardinality text columns.
    Init(InitArgs),
    /// Update a catalog file from the database, keeping every description, synonym, flag,
    /// entry and comment a person wrote.
    Refresh(RefreshArgs),
    /// Check a catalog file against the database; exits 1 when something does not fit.
    Check(CheckArgs),
    /// Rebuild the search index (`search_catalog`, `find_values`) from a catalog file and the
    /// database's current values; `init` and `refresh` end with it.
    Index(IndexArgs),
}

#[derive(Debug, clap::Args)]
pub struct IndexArgs {
    /// The catalog file: a path, or s3://bucket/key (read with the AWS settings: AWS_REGION,
    /// credentials, AWS_ENDPOINT_URL_S3).
    #[arg(value_name = "FILE", value_parser = Source::parse)]
    pub file: Source,
    #[command(flatten)]
    pub values: ValueArgs,
}

/// How much of each text column the value index holds.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct ValueArgs {
    /// Distinct values indexed per text column.
    #[arg(long, value_name = "N", default_value_t = ValueBounds::default().per_column)]
    pub values_per_column: i64,
    /// Rows read per text column to find its values.
    #[arg(long, value_name = "N", default_value_t = ValueBounds::default().scan_rows)]
    pub value_scan_rows: i64,
    /// Write the catalog file only; leave the search index as it is (`init`, `refresh`).
    #[arg(long)]
    pub no_index: bool,
}

impl From<ValueArgs> for ValueBounds {
    fn from(a: ValueArgs) -> Self {
        ValueBounds {
            per_column: a.values_per_column,
            scan_rows: a.value_scan_rows,
            ..ValueBounds::default()
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct InitArgs {
    /// A schema to describe (repeat for more), in the order the catalog lists them.
    #[arg(long = "schema", value_name = "S", required = true)]
    pub schemas: Vec<String>,
    /// Where to write the draft.
    #[arg(long, value_name = "FILE", default_value = "catalog.toml")]
    pub out: PathBuf,
    /// Replace FILE if it exists (`refresh` updates one and keeps its edits).
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub bounds: BoundsArgs,
    #[command(flatten)]
    pub values: ValueArgs,
}

#[derive(Debug, clap::Args)]
pub struct RefreshArgs {
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    #[command(flatten)]
    pub bounds: BoundsArgs,
    #[command(flatten)]
    pub values: ValueArgs,
}

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// The role metrics and verified queries are planned as: the role the assistant's SQL
    /// runs as (a tools file's `[sql]` login). Without it they are planned as the login.
    #[arg(long, value_name = "ROLE")]
    pub role: Option<String>,
}

#[derive(Debug, Clone, Copy, clap::Args)]
pub struct BoundsArgs {
    /// A text column with at most this many distinct values has them listed.
    #[arg(long, value_name = "N", default_value_t = Bounds::default().max_values)]
    pub max_values: usize,
    /// Rows read per column for its values and range.
    #[arg(long, value_name = "N", default_value_t = Bounds::default().max_scan_rows)]
    pub max_scan_rows: i64,
}

impl From<BoundsArgs> for Bounds {
    fn from(a: BoundsArgs) -> Self {
        Bounds {
            max_values: a.max_values,
            max_scan_rows: a.max_scan_rows,
            ..Bounds::default()
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error(
        "{0} exists: `parley catalog refresh {0}` updates it and keeps its edits, --force replaces it"
    )]
    Exists(String),
    #[error("{path}: {error}")]
    Read { path: String, error: std::io::Error },
    /// An S3 catalog file that could not be read, with the fix.
    #[error("{uri}: {problem}")]
    S3 { uri: String, problem: String },
    #[error("{path}: {error}")]
    File {
        path: String,
        error: semantic::CatalogFileError,
    },
    #[error("{0} names no schemas: add `schemas = [\"...\"]` at its top")]
    NoSchemas(String),
    #[error("reading the database failed: {0}")]
    Database(String),
    #[error("embedding the catalog's entries failed: {0}")]
    Embed(#[from] parley_embed::EmbedError),
    /// `check` found entries that do not fit (each said why on its line).
    #[error("{0} of the catalog's entries do not fit the database")]
    Misfits(usize),
}

impl CatalogError {
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            CatalogError::Exists(_) | CatalogError::File { .. } | CatalogError::NoSchemas(_)
        )
    }
}

impl From<tokio_postgres::Error> for CatalogError {
    fn from(e: tokio_postgres::Error) -> Self {
        CatalogError::Database(pg_message(&e))
    }
}

pub async fn run(args: Args, env: &Env, out: &mut Out) -> Result<(), CmdError> {
    match args.action {
        Action::Init(init) => {
            if init.out.exists() && !init.force {
                return Err(CatalogError::Exists(init.out.display().to_string()).into());
            }
            let client = crate::db::connect(env).await?;
            let snapshot = snapshot(&client, &init.schemas, init.bounds.into()).await?;
            let text = write::draft(&snapshot, &init.schemas);
            write_file(&init.out, &text)?;
            writeln!(out, "{}: {}", init.out.display(), summary(&snapshot))?;
            if !init.values.no_index && may_index(&client, out).await? {
                let (_, file) = read(&init.out)?;
                index(env, &file, init.values.into(), out).await?;
            }
        }
        Action::Refresh(refresh) => {
            let (text, file) = read(&refresh.file)?;
            if file.schemas.is_empty() {
                return Err(CatalogError::NoSchemas(refresh.file.display().to_string()).into());
            }
            let client = crate::db::connect(env).await?;
            let snapshot = snapshot(&client, &file.schemas, refresh.bounds.into()).await?;
            let refreshed = write::refresh(&text, &snapshot).map_err(|e| CatalogError::File {
                path: refresh.file.display().to_string(),
                error: semantic::CatalogFileError::Toml(e.to_string()),
            })?;
            write_file(&refresh.file, &refreshed)?;
            writeln!(out, "{}: {}", refresh.file.display(), summary(&snapshot))?;
            if !refresh.values.no_index && may_index(&client, out).await? {
                let (_, file) = read(&refresh.file)?;
                index(env, &file, refresh.values.into(), out).await?;
            }
        }
        Action::Check(check) => {
            let (_, file) = read(&check.file)?;
            let client = crate::db::connect(env).await?;
            let snapshot = snapshot(&client, &file.schemas, Bounds::default()).await?;
            let mut misfits = misfits(&file, &snapshot);
            misfits.extend(unplannable(&client, &file, check.role.as_deref()).await?);
            for misfit in &misfits {
                writeln!(out, "{misfit}")?;
            }
            if !misfits.is_empty() {
                return Err(CatalogError::Misfits(misfits.len()).into());
            }
            writeln!(
                out,
                "{}: fits the database ({} tables, {} relationships, {} metrics, {} verified queries)",
                check.file.display(),
                file.tables.len(),
                file.relationships.len(),
                file.metrics.len(),
                file.verified_queries.len()
            )?;
        }
        Action::Index(args) => {
            let text = read_source(&args.file, env).await?;
            let file = parse(&args.file.to_string(), &text)?;
            index(env, &file, args.values.into(), out).await?;
        }
    }
    Ok(())
}

/// Whether this login may write the search index. `init` and `refresh` made as a reader role
/// (to draft only what it can read) leave the index to its owner, and say so.
async fn may_index(client: &Client, out: &mut Out) -> Result<bool, CmdError> {
    let may: bool = client
        .query_one(
            "SELECT coalesce(has_table_privilege(to_regclass('parley.catalog_entries'), \
                                                 'INSERT'), false)",
            &[],
        )
        .await
        .map_err(CatalogError::from)?
        .get(0);
    if !may {
        writeln!(
            out,
            "search index not rebuilt: this login may not write it; run `parley catalog index \
             FILE` as the database's owner (after `parley migrate`)"
        )?;
    }
    Ok(may)
}

/// Rebuilds the search index from `file`: its entries embedded with the configured model
/// (`EMBEDDINGS_*`, as the mcp function embeds questions), then written with the database's
/// values in one transaction.
async fn index(
    env: &Env,
    file: &CatalogFile,
    bounds: ValueBounds,
    out: &mut Out,
) -> Result<(), CmdError> {
    let started = std::time::Instant::now();
    let settings = EmbedSettings::from_env(env).map_err(CmdError::Settings)?;
    let embedder = Embedder::from_settings(&settings).map_err(CatalogError::from)?;
    let entries = index::entries(file);
    let bodies: Vec<String> = entries.iter().map(|e| e.body.clone()).collect();
    let embeddings = embedder.embed(&bodies).await.map_err(CatalogError::from)?;
    let mut client = crate::db::connect(env).await?;
    let tx = client.transaction().await.map_err(CatalogError::from)?;
    let indexed = index::write(
        &tx,
        file,
        &entries,
        &embeddings,
        embedder.model_id(),
        bounds,
    )
    .await
    .map_err(CatalogError::from)?;
    tx.commit().await.map_err(CatalogError::from)?;
    writeln!(
        out,
        "search index: {} entries, {} values of {} text columns ({} ms)",
        indexed.entries,
        indexed.values,
        indexed.value_columns,
        started.elapsed().as_millis()
    )?;
    Ok(())
}

async fn snapshot(
    client: &Client,
    schemas: &[String],
    bounds: Bounds,
) -> Result<Snapshot, CatalogError> {
    Ok(introspect::snapshot(client, schemas, bounds).await?)
}

fn summary(snapshot: &Snapshot) -> String {
    let columns: usize = snapshot.tables.iter().map(|t| t.columns.len()).sum();
    let listed = snapshot
        .tables
        .iter()
        .flat_map(|t| &t.columns)
        .filter(|c| !c.db.values.is_empty())
        .count();
    format!(
        "{} tables, {columns} columns ({listed} with their values listed), {} foreign keys",
        snapshot.tables.len(),
        snapshot.foreign_keys.len()
    )
}

fn read(path: &Path) -> Result<(String, CatalogFile), CatalogError> {
    let text = std::fs::read_to_string(path).map_err(|error| CatalogError::Read {
        path: path.display().to_string(),
        error,
    })?;
    let file = parse(&path.display().to_string(), &text)?;
    Ok((text, file))
}

/// The text of `source`, a local file or an S3 object.
async fn read_source(source: &Source, env: &Env) -> Result<String, CatalogError> {
    match source {
        Source::Path(path) => std::fs::read_to_string(path).map_err(|error| CatalogError::Read {
            path: path.display().to_string(),
            error,
        }),
        Source::S3 { bucket, key } => {
            source::read_object(env, bucket, key)
                .await
                .map_err(|problem| CatalogError::S3 {
                    uri: source.to_string(),
                    problem,
                })
        }
    }
}

fn parse(name: &str, text: &str) -> Result<CatalogFile, CatalogError> {
    semantic::file::parse(text).map_err(|error| CatalogError::File {
        path: name.to_owned(),
        error,
    })
}

fn write_file(path: &Path, text: &str) -> Result<(), CatalogError> {
    std::fs::write(path, text).map_err(|error| CatalogError::Read {
        path: path.display().to_string(),
        error,
    })
}

/// Entries naming tables or columns the database (as this login sees it) does not have.
fn misfits(file: &CatalogFile, snapshot: &Snapshot) -> Vec<String> {
    let column_exists = |table: &str, column: &str| {
        snapshot
            .tables
            .iter()
            .find(|t| t.name == table)
            .is_some_and(|t| t.columns.iter().any(|c| c.name == column))
    };
    let table_exists = |table: &str| snapshot.tables.iter().any(|t| t.name == table);
    let mut out = Vec::new();
    for table in &file.tables {
        if !table_exists(&table.name) {
            out.push(format!("table {}: not in the database", table.name));
            continue;
        }
        for column in &table.columns {
            if !column_exists(&table.name, &column.name) {
                out.push(format!(
                    "column {}.{}: not in the database",
                    table.name, column.name
                ));
            }
        }
    }
    for r in &file.relationships {
        for side in [&r.from, &r.to] {
            for column in &side.columns {
                if !column_exists(&side.table, column) {
                    out.push(format!(
                        "relationship {} -> {}: {}.{column} is not in the database",
                        r.from, r.to, side.table
                    ));
                }
            }
        }
    }
    for metric in &file.metrics {
        if !table_exists(&metric.table) {
            out.push(format!(
                "metric {}: table {} is not in the database",
                metric.name, metric.table
            ));
        }
    }
    out
}

/// Metrics and verified queries that do not plan as `role`: each is `EXPLAIN`ed (a verified
/// query's parameters as a generic plan's `$n`) in a read-only transaction rolled back.
async fn unplannable(
    client: &Client,
    file: &CatalogFile,
    role: Option<&str>,
) -> Result<Vec<String>, CatalogError> {
    let mut out = Vec::new();
    let mut statements = Vec::new();
    for metric in &file.metrics {
        statements.push((
            format!("metric {}", metric.name),
            format!("SELECT {} FROM {}", metric.sql, metric.table),
        ));
    }
    for query in &file.verified_queries {
        let name = format!("verified query {}", query.name);
        match verified::tool_spec(query, role, Limits::default()) {
            Ok(tool) => statements.push((name, tool.wrapped_sql)),
            Err(e) => out.push(format!("{name}: {}", e.problem)),
        }
    }
    for (name, sql) in statements {
        client.batch_execute("BEGIN READ ONLY").await?;
        if let Some(role) = role {
            let quoted = format!("\"{}\"", role.replace('"', "\"\""));
            if let Err(e) = client
                .batch_execute(&format!("SET LOCAL ROLE {quoted}"))
                .await
            {
                client.batch_execute("ROLLBACK").await?;
                return Err(CatalogError::Database(pg_message(&e)));
            }
        }
        let planned = client
            .batch_execute(&format!("EXPLAIN (GENERIC_PLAN) {sql}"))
            .await;
        client.batch_execute("ROLLBACK").await?;
        if let Err(e) = planned {
            out.push(format!("{name}: does not plan: {}", pg_message(&e)));
        }
    }
    Ok(out)
}
