//! `parley-bench catalog`: the semantic catalog's tools at the size issue 35 names. A synthetic
//! schema of `--tables` tables with `--columns` columns each (10,500 catalog entries at the
//! defaults), `--value-columns` of them holding `--values-per-column` distinct names each (1M
//! values), drafted and indexed as `parley catalog init` / `index` do; then `search_catalog`
//! for generated questions (the question's embedding timed apart from the SQL) and
//! `find_values` for stored names typed loosely (lower case, a dropped accent, a typo), each
//! run as the mcp function runs it (bound by the engine, in a call's transaction).

use std::time::{Duration, Instant};

use anyhow::Context;
use parley_embed::{EmbedSettings, Embedder};
use parley_tools::semantic::index::{self, ValueBounds};
use parley_tools::semantic::{self, Bounds, introspect, served, write};
use serde_json::{Map, json};

use crate::measure::{ms, percentile};
use crate::setup::{admin_url, command_line, create_database, machine};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The bench database (created next to DATABASE_URL's; kept for reruns).
    #[arg(long, default_value = "parley_bench_catalog")]
    database: String,
    #[arg(long, default_value_t = 500)]
    tables: usize,
    #[arg(long, default_value_t = 20)]
    columns: usize,
    /// Text columns holding distinct names (one per table, the first tables).
    #[arg(long, default_value_t = 100)]
    value_columns: usize,
    #[arg(long, default_value_t = 10_000)]
    values_per_column: usize,
    /// Calls of each tool measured (after 10 unmeasured).
    #[arg(long, default_value_t = 200)]
    requests: usize,
    /// Rebuild the schema and the index even when they are there.
    #[arg(long)]
    rebuild: bool,
}

/// Words table and column names are made of: a generic business vocabulary.
const WORDS: [&str; 40] = [
    "account",
    "address",
    "amount",
    "balance",
    "branch",
    "budget",
    "campaign",
    "category",
    "channel",
    "city",
    "claim",
    "contract",
    "cost",
    "country",
    "customer",
    "delivery",
    "department",
    "discount",
    "employee",
    "invoice",
    "item",
    "ledger",
    "lead",
    "margin",
    "order",
    "partner",
    "payment",
    "plan",
    "price",
    "product",
    "project",
    "quota",
    "region",
    "refund",
    "revenue",
    "shipment",
    "store",
    "supplier",
    "ticket",
    "vendor",
];
/// Syllables names are made of (with accented ones, so folding has work to do).
const SYLLABLES: [&str; 24] = [
    "ba", "ço", "de", "fi", "gá", "ha", "jo", "ka", "lu", "mé", "no", "pa", "qui", "ro", "sa",
    "tö", "vi", "wa", "xe", "yu", "za", "bri", "sto", "lin",
];

fn word(i: usize) -> &'static str {
    WORDS[i % WORDS.len()]
}

fn table_name(t: usize) -> String {
    format!("{}_{}_{t:03}", word(t), word(t / 7 + 3))
}

fn column_name(t: usize, c: usize) -> String {
    format!("{}_{}", word(t + c * 3), word(c + 11))
}

/// A deterministic two-word name for value `i`.
fn name(i: usize) -> String {
    let part = |mut n: usize, len: usize| {
        let mut s = String::new();
        for _ in 0..len {
            s.push_str(SYLLABLES[n % SYLLABLES.len()]);
            n /= SYLLABLES.len();
        }
        let mut c = s.chars();
        c.next()
            .map(|f| f.to_uppercase().chain(c).collect::<String>())
            .unwrap_or_default()
    };
    format!(
        "{} {}",
        part(i, 3),
        part(i.wrapping_mul(2_654_435_761) >> 7, 3)
    )
}

/// `value` as a person might type it: lower case, accents dropped, one letter doubled.
fn loosely(value: &str, i: usize) -> String {
    let plain: String = value
        .to_lowercase()
        .chars()
        .map(|c| match c {
            'ç' => 'c',
            'á' => 'a',
            'é' => 'e',
            'ö' => 'o',
            c => c,
        })
        .collect();
    let chars: Vec<char> = plain.chars().collect();
    let at = 1 + i % (chars.len() - 2);
    chars[..at]
        .iter()
        .chain(std::iter::once(&chars[at]))
        .chain(&chars[at..])
        .collect()
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    println!("{}", command_line());
    let (url, mut client) = create_database(&admin_url()?, &args.database).await?;
    let ready: bool = client
        .query_one(
            "SELECT to_regnamespace('bench') IS NOT NULL \
                    AND (SELECT count(*) FROM parley.catalog_entries) > 0",
            &[],
        )
        .await?
        .get(0);
    let schemas = vec!["bench".to_owned()];
    if args.rebuild || !ready {
        eprintln!(
            "building {} tables of {} columns, {} x {} values...",
            args.tables, args.columns, args.value_columns, args.values_per_column
        );
        client
            .batch_execute("DROP SCHEMA IF EXISTS bench CASCADE; CREATE SCHEMA bench")
            .await?;
        for t in 0..args.tables {
            let mut cols: Vec<String> = (1..args.columns)
                .map(|c| format!("{} integer", column_name(t, c)))
                .collect();
            cols.insert(0, "label text".into());
            client
                .batch_execute(&format!(
                    "CREATE TABLE bench.{} (id integer PRIMARY KEY, {}{})",
                    table_name(t),
                    cols.join(", "),
                    if t > 0 {
                        format!(
                            ", {}_id integer REFERENCES bench.{}",
                            word(t - 1),
                            table_name(t - 1)
                        )
                    } else {
                        String::new()
                    }
                ))
                .await?;
        }
        for t in 0..args.value_columns.min(args.tables) {
            let names: Vec<String> = (0..args.values_per_column)
                .map(|i| name(t * args.values_per_column + i))
                .collect();
            client
                .execute(
                    &format!(
                        "INSERT INTO bench.{} (id, label) \
                         SELECT row_number() OVER (), n FROM unnest($1::text[]) AS n",
                        table_name(t)
                    ),
                    &[&names],
                )
                .await?;
        }
        client.batch_execute("ANALYZE").await?;
        let started = Instant::now();
        let snapshot = introspect::snapshot(&client, &schemas, Bounds::default()).await?;
        let text = write::draft(&snapshot, &schemas);
        let file = semantic::file::parse(&text)?;
        let entries = index::entries(&file);
        let drafted = started.elapsed();
        let embedder =
            Embedder::from_settings(&EmbedSettings::built_in(parley_embed::default_model_dir()))?;
        let bodies: Vec<String> = entries.iter().map(|e| e.body.clone()).collect();
        let embedding = Instant::now();
        let vectors = embedder.embed(&bodies).await?;
        let embedded = embedding.elapsed();
        let writing = Instant::now();
        let tx = client.transaction().await?;
        let bounds = ValueBounds {
            per_column: args.values_per_column as i64,
            ..ValueBounds::default()
        };
        let indexed =
            index::write(&tx, &file, &entries, &vectors, embedder.model_id(), bounds).await?;
        tx.commit().await?;
        println!(
            "index: {} entries ({} ms to draft, {} ms to embed), {} values of {} columns \
             ({} ms to write)",
            indexed.entries,
            drafted.as_millis(),
            embedded.as_millis(),
            indexed.values,
            indexed.value_columns,
            writing.elapsed().as_millis()
        );
        client.batch_execute("ANALYZE").await?;
    }
    let counts = client
        .query_one(
            "SELECT (SELECT count(*) FROM parley.catalog_entries), \
                    (SELECT count(*) FROM parley.catalog_values)",
            &[],
        )
        .await?;
    let (entries, values): (i64, i64) = (counts.get(0), counts.get(1));
    let version: String = client.query_one("SHOW server_version", &[]).await?.get(0);
    println!("{}", machine().line("Postgres and the bench"));
    println!("PostgreSQL {version}; catalog: {entries} entries, {values} values");

    let spec = served::CatalogSpec {
        file: "bench.toml".into(),
        reader: served::DEFAULT_READER.into(),
    };
    let tools = served::tool_specs(&spec, &Default::default(), Default::default())?;
    let (search, find) = (&tools[0], &tools[1]);
    client
        .batch_execute(
            "GRANT USAGE ON SCHEMA bench TO parley_sql_reader; \
             GRANT SELECT ON ALL TABLES IN SCHEMA bench TO parley_sql_reader",
        )
        .await?;
    let embedder =
        Embedder::from_settings(&EmbedSettings::built_in(parley_embed::default_model_dir()))?;
    let model = embedder.model_id().to_owned();
    let db = crate::setup::connect(&url).await?;

    // search_catalog: questions made of the schema's words.
    let mut embed_times = Vec::new();
    let mut sql_times = Vec::new();
    let mut found_rows = 0;
    for i in 0..args.requests + 10 {
        let question = format!(
            "What is the total {} per {} for each {} last year?",
            word(i),
            word(i * 3 + 1),
            word(i * 7 + 2)
        );
        let arguments = Map::from_iter([("question".to_owned(), json!(question))]);
        let started = Instant::now();
        let embeddings = parley_cli::eval::search::embeddings(search, &arguments, &embedder)
            .await
            .context("embedding a question")?;
        let embedded = started.elapsed();
        let started = Instant::now();
        let rows = parley_cli::eval::search::rows(
            &db,
            search,
            &search.wrapped_sql,
            &arguments,
            &embeddings,
            &model,
            None,
        )
        .await
        .context("search_catalog")?;
        if i >= 10 {
            embed_times.push(embedded);
            sql_times.push(started.elapsed());
            found_rows += rows.len();
        }
    }
    // find_values: stored names typed loosely.
    let mut value_times = Vec::new();
    let mut hits = 0;
    for i in 0..args.requests + 10 {
        let t = i % args.value_columns.min(args.tables);
        let n = (i * 7_919) % args.values_per_column;
        let stored = name(t * args.values_per_column + n);
        let arguments = Map::from_iter([
            ("text".to_owned(), json!(loosely(&stored, i))),
            ("limit".to_owned(), json!(5)),
        ]);
        let started = Instant::now();
        let rows = parley_cli::eval::search::rows(
            &db,
            find,
            &find.wrapped_sql,
            &arguments,
            &Default::default(),
            &model,
            None,
        )
        .await
        .context("find_values")?;
        if i >= 10 {
            value_times.push(started.elapsed());
            hits += usize::from(rows.iter().any(|r| r["value"] == json!(stored)));
        }
    }
    let report = |label: &str, times: &mut Vec<Duration>| {
        times.sort();
        println!(
            "{label:<28} p50 {:>7.2} ms  p99 {:>7.2} ms  ({} calls)",
            ms(percentile(times, 0.50)),
            ms(percentile(times, 0.99)),
            times.len()
        );
    };
    report("question embedding", &mut embed_times);
    report("search_catalog (SQL)", &mut sql_times);
    let mut whole: Vec<Duration> = embed_times
        .iter()
        .zip(&sql_times)
        .map(|(a, b)| *a + *b)
        .collect();
    report("search_catalog (whole call)", &mut whole);
    report("find_values", &mut value_times);
    println!(
        "search_catalog rows per call: {:.1}; find_values found the stored name in its first 5: \
         {hits}/{}",
        found_rows as f64 / args.requests as f64,
        args.requests
    );
    Ok(())
}
