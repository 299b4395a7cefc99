//! `parley usage`: turns, model calls, tokens, tool calls, errors and cost per user, model or
//! day, from `chat.turn_usage`, priced by `MODEL_PRICES`.
//!
//! The report is `parley_core::usage`'s, the same statement `GET /api/usage` runs, so the
//! command and the page agree; this module only reads the arguments and prints it: an aligned
//! table for a terminal, CSV (RFC 4180) for a spreadsheet, JSON for `jq`.

use chrono::Utc;
use parley_core::config::Env;
use parley_core::usage::{self, Grouping, PeriodError, Prices, Report, ReportError, Row, Since};
use parley_core::usage::{CURRENCY, Until};

use super::table::{aligned, one_line};
use super::{CmdError, Out};

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Counts every turn the chat stored (answered, failed, interrupted, waiting for approval) on the
UTC day it ended. Cost is each model's tokens at its MODEL_PRICES price (USD per million input
and output tokens); a row holding a model without a price shows its cost as unknown (null in
JSON, empty in CSV), never 0, and the table names the model under it.

Reading the ledger needs a role that may SELECT chat.turn_usage: the one that ran
`parley migrate` does.")]
pub struct Args {
    /// Where the period starts: days back, today included (7d: today and the 6 days before,
    /// in UTC), hours back (24h), a date (2026-11-01, from midnight UTC) or an RFC 3339 time.
    #[arg(long, value_name = "WHEN", default_value = "30d", value_parser = Since::parse)]
    pub since: Since,
    /// Where it ends: a date (2026-11-30, that whole day included) or an RFC 3339 time (not
    /// included). Default: now.
    #[arg(long, value_name = "WHEN", value_parser = Until::parse)]
    pub until: Option<Until>,
    /// One row per user (`sub`), model, or UTC day.
    #[arg(long, value_name = "GROUPING", default_value = "user", value_parser = parse_grouping)]
    pub by: Grouping,
    /// Only this user's turns, by subject (`sub` claim).
    #[arg(long, value_name = "SUB")]
    pub user: Option<String>,
    /// table (aligned, with totals), csv (RFC 4180, one line per row, no totals) or json
    /// (rows, totals, period and prices, for `jq`).
    #[arg(long, value_name = "FORMAT", default_value = "table", value_parser = ["table", "csv", "json"])]
    pub format: String,
}

fn parse_grouping(raw: &str) -> Result<Grouping, PeriodError> {
    raw.parse()
}

/// Why a usage report could not be made.
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    #[error("{0}")]
    Period(#[from] PeriodError),
    #[error(transparent)]
    Report(#[from] ReportError),
}

impl UsageError {
    /// A mistake in the arguments or settings (exit code 2), not a failure.
    pub fn is_usage(&self) -> bool {
        matches!(self, UsageError::Period(_))
    }
}

pub async fn run(args: Args, env: &Env, out: &mut Out) -> Result<(), CmdError> {
    // Before connecting: a bad price is a settings mistake, whatever the database says.
    let prices = Prices::from_env(env).map_err(CmdError::Settings)?;
    let query = usage::Query::new(args.since, args.until, args.by, args.user, Utc::now())
        .map_err(UsageError::from)?;
    let client = crate::db::connect(env).await?;
    let report = usage::report(&client, &query, &prices)
        .await
        .map_err(UsageError::from)?;
    let text = match args.format.as_str() {
        "json" => json(&report, &prices),
        "csv" => csv(&report),
        _ => table(&report),
    };
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// The API's document, plus the prices it was priced at.
fn json(report: &Report, prices: &Prices) -> String {
    let mut doc = report.to_json();
    doc["prices"] = prices.to_json();
    format!("{doc:#}\n")
}

const COLUMNS: [&str; 8] = [
    "turns",
    "model_calls",
    "input_tokens",
    "output_tokens",
    "tool_calls",
    "tool_errors",
    "errors",
    "cost_usd",
];

fn numbers(row: &Row) -> [i64; 7] {
    [
        row.turns,
        row.model_calls,
        row.input_tokens,
        row.output_tokens,
        row.tool_calls,
        row.tool_errors,
        row.errors,
    ]
}

/// An aligned table with a totals line, then which models had no price.
fn table(report: &Report) -> String {
    if report.rows.is_empty() {
        return format!("no turns {}\n", period(report));
    }
    let mut header = vec![report.query.by.as_str().to_owned()];
    header.extend(
        [
            "turns",
            "model calls",
            "tokens in",
            "tokens out",
            "tool calls",
            "tool errors",
            "errors",
        ]
        .map(str::to_owned),
    );
    header.push(format!("cost ({CURRENCY})"));
    let line = |row: &Row| {
        let mut cells = vec![one_line(&row.key)];
        cells.extend(numbers(row).map(|n| n.to_string()));
        cells.push(row.cost.clone().unwrap_or_else(|| "unknown".to_owned()));
        cells
    };
    let mut lines = vec![header];
    lines.extend(report.rows.iter().map(line));
    lines.push(line(&report.totals));
    let mut text = aligned(
        &lines,
        &[false, true, true, true, true, true, true, true, true],
    );
    text.push_str(&format!("{}\n", period(report)));
    if !report.totals.unpriced.is_empty() {
        let models: Vec<String> = report.totals.unpriced.iter().map(|m| one_line(m)).collect();
        text.push_str(&format!(
            "cost unknown: no price in MODEL_PRICES for {}\n",
            models.join(", ")
        ));
    }
    text
}

/// The period in words, as resolved (UTC).
fn period(report: &Report) -> String {
    let q = &report.query;
    let since = q.since.format("%Y-%m-%d %H:%M UTC");
    match q.until {
        Some(until) => format!("from {since} to {}", until.format("%Y-%m-%d %H:%M UTC")),
        None => format!("from {since} to now"),
    }
}

/// RFC 4180: a header, one record per row (no totals: every line is data), CRLF after each.
fn csv(report: &Report) -> String {
    let mut text = String::new();
    let header: Vec<&str> = std::iter::once(report.query.by.as_str())
        .chain(COLUMNS)
        .collect();
    text.push_str(&header.join(","));
    text.push_str("\r\n");
    for row in &report.rows {
        let mut fields = vec![csv_field(&row.key)];
        fields.extend(numbers(row).map(|n| n.to_string()));
        fields.push(row.cost.clone().unwrap_or_default());
        text.push_str(&fields.join(","));
        text.push_str("\r\n");
    }
    text
}

/// A field quoted when it holds a comma, quote, CR or LF (quotes doubled); text a spreadsheet
/// would run as a formula (`=`, `+`, `-`, `@`, tab, CR first) gets a leading `'`, as the
/// page's CSV does.
fn csv_field(text: &str) -> String {
    let text = if text.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{text}")
    } else {
        text.to_owned()
    };
    if text.contains([',', '"', '\r', '\n']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::DateTime;

    fn row(key: &str, cost: Option<&str>, unpriced: &[&str]) -> Row {
        Row {
            key: key.to_owned(),
            turns: 3,
            model_calls: 5,
            input_tokens: 1200,
            output_tokens: 80,
            tool_calls: 2,
            tool_errors: 1,
            errors: 1,
            cost: cost.map(str::to_owned),
            unpriced: unpriced.iter().map(|m| (*m).to_owned()).collect(),
        }
    }

    fn report(rows: Vec<Row>, totals: Row) -> Report {
        Report {
            query: usage::Query {
                since: DateTime::parse_from_rfc3339("2026-11-01T00:00:00Z")
                    .unwrap()
                    .to_utc(),
                until: None,
                by: Grouping::User,
                owner: None,
            },
            rows,
            totals,
        }
    }

    #[test]
    fn the_table_aligns_numbers_ends_with_totals_and_names_unpriced_models() {
        let text = table(&report(
            vec![
                row("alice", Some("0.0042"), &[]),
                row("bob", None, &["local-llama"]),
            ],
            row("total", None, &["local-llama"]),
        ));
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("user   turns  model calls"), "{text}");
        assert!(lines[0].ends_with("cost (USD)"), "{text}");
        assert!(
            lines[1].starts_with("alice") && lines[1].ends_with("0.0042"),
            "{text}"
        );
        assert!(lines[2].ends_with("unknown"), "{text}");
        assert!(lines[3].starts_with("total"), "{text}");
        assert_eq!(lines[4], "from 2026-11-01 00:00 UTC to now");
        assert_eq!(
            lines[5],
            "cost unknown: no price in MODEL_PRICES for local-llama"
        );
        // Columns line up: numbers and costs end where their headers do.
        assert!(
            lines[..4].iter().all(|l| l.len() == lines[0].len()),
            "{text}"
        );
    }

    #[test]
    fn csv_is_rfc_4180_with_quoted_fields_and_empty_unknown_costs() {
        let text = csv(&report(
            vec![
                row("a,\"b\"", Some("0.5"), &[]),
                row("=cmd()", None, &["m"]),
            ],
            row("total", None, &["m"]),
        ));
        assert_eq!(
            text,
            "user,turns,model_calls,input_tokens,output_tokens,tool_calls,tool_errors,errors,cost_usd\r\n\
             \"a,\"\"b\"\"\",3,5,1200,80,2,1,1,0.5\r\n\
             '=cmd(),3,5,1200,80,2,1,1,\r\n"
        );
    }

    #[test]
    fn an_empty_period_says_so() {
        let text = table(&report(vec![], row("total", Some("0"), &[])));
        assert_eq!(text, "no turns from 2026-11-01 00:00 UTC to now\n");
    }
}
