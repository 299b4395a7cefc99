//! Usage and cost: the `chat.turn_usage` ledger summed per user, model or day, priced by
//! `MODEL_PRICES`; what `GET /api/usage` (the chat) and `parley usage` (the command) both report.
//!
//! Raw input becomes typed values here, once, for both callers: [`Prices`] from the setting,
//! [`Since`] and [`Until`] from what a person types, [`Grouping`] from `user|model|day`. The
//! report is one statement ([`report`]): Postgres sums each (key, model) pair, prices it at its
//! own model's price (passed as parameters, never spliced in) and sums again per key, with the
//! totals as the `ROLLUP` row. It is sent unnamed with its types (`query_typed`) and sets
//! nothing on the session, so a transaction pooler or RDS Proxy may share the connection.
//!
//! A model without a price (and no `"*"` default) has an unknown cost: a row or total holding
//! any of its tokens reports `cost: null` and names the model in `unpriced`, never 0.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Duration, NaiveDate, NaiveTime, SecondsFormat, Utc};
use serde_json::{Value, json};
use tokio_postgres::Client;
use tokio_postgres::types::{ToSql, Type};

use crate::config::{ConfigError, Env};

/// The currency of every price and cost.
pub const CURRENCY: &str = "USD";

/// The key of `MODEL_PRICES` that prices every model not named.
pub const DEFAULT_PRICE_KEY: &str = "*";

/// The highest price taken, per million tokens: far above any model's, low enough that a
/// typo of a few extra digits is refused rather than reported as a fortune.
pub const MAX_PRICE: f64 = 100_000.0;

/// The longest period `Nd`/`Nh` may reach back (and the same for a date), as `parley audit`.
pub const MAX_DAYS_BACK: u32 = 36_500;

/// One model's price, USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    pub input: f64,
    pub output: f64,
}

/// `MODEL_PRICES`: a price per model name, and optionally `"*"` for any other.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prices {
    models: BTreeMap<String, Price>,
    default: Option<Price>,
}

impl Prices {
    /// `MODEL_PRICES`; unset (or blank) prices nothing, so every cost is unknown.
    pub fn from_env(env: &Env) -> Result<Prices, ConfigError> {
        match env.get("MODEL_PRICES") {
            None => Ok(Prices::default()),
            Some(raw) => Prices::parse(raw).map_err(|why| ConfigError::new("MODEL_PRICES", why)),
        }
    }

    /// `{"model": {"input": usd_per_million, "output": usd_per_million}, "*": {...}}`.
    pub fn parse(raw: &str) -> Result<Prices, String> {
        const SHAPE: &str = "must be a JSON object of model name -> {\"input\": USD per million \
             input tokens, \"output\": USD per million output tokens} (\"*\" for any other model)";
        let value: Value = serde_json::from_str(raw).map_err(|e| format!("{SHAPE}: {e}"))?;
        let Value::Object(entries) = value else {
            return Err(SHAPE.to_owned());
        };
        let mut prices = Prices::default();
        for (model, price) in entries {
            if model.trim() != model || model.is_empty() || model.chars().count() > 200 {
                return Err(format!(
                    "model names are 1 to 200 characters without surrounding blanks; \
                     {:?} is not",
                    model.chars().take(40).collect::<String>()
                ));
            }
            let price = parse_price(&model, &price)?;
            if model == DEFAULT_PRICE_KEY {
                prices.default = Some(price);
            } else {
                prices.models.insert(model, price);
            }
        }
        Ok(prices)
    }

    /// The price of `model`: its own, else the `"*"` default.
    pub fn of(&self, model: &str) -> Option<Price> {
        self.models.get(model).copied().or(self.default)
    }

    /// Whether no model has a price.
    pub fn is_empty(&self) -> bool {
        self.models.is_empty() && self.default.is_none()
    }

    /// The models priced by name, and the default, as three parallel lists for the statement
    /// (prices as exact decimal text: Postgres computes in `numeric`).
    fn columns(&self) -> (Vec<String>, Vec<String>, Vec<String>) {
        let named = self.models.iter().map(|(m, p)| (m.as_str(), p));
        let default = self.default.as_ref().map(|p| (DEFAULT_PRICE_KEY, p));
        let mut columns = (Vec::new(), Vec::new(), Vec::new());
        for (model, price) in named.chain(default) {
            columns.0.push(model.to_owned());
            columns.1.push(decimal(price.input));
            columns.2.push(decimal(price.output));
        }
        columns
    }

    /// The prices as JSON, for a report's reader (`"*"` included when set).
    pub fn to_json(&self) -> Value {
        let mut map = serde_json::Map::new();
        for (model, price) in self
            .models
            .iter()
            .map(|(m, p)| (m.as_str(), p))
            .chain(self.default.as_ref().map(|p| (DEFAULT_PRICE_KEY, p)))
        {
            map.insert(
                model.to_owned(),
                json!({"input": price.input, "output": price.output}),
            );
        }
        Value::Object(map)
    }
}

fn parse_price(model: &str, price: &Value) -> Result<Price, String> {
    let bad = || {
        format!(
            "the price of {model:?} must be {{\"input\": n, \"output\": n}}, USD per million \
             tokens, each between 0 and {MAX_PRICE}"
        )
    };
    let Value::Object(fields) = price else {
        return Err(bad());
    };
    if fields.len() != 2 {
        return Err(bad());
    }
    let field = |name: &str| {
        fields
            .get(name)
            .and_then(Value::as_f64)
            .filter(|n| n.is_finite() && (0.0..=MAX_PRICE).contains(n))
            .ok_or_else(bad)
    };
    Ok(Price {
        input: field("input")?,
        output: field("output")?,
    })
}

/// `n` as decimal text Postgres reads as exactly the number written (Rust's shortest
/// round-trip form never uses an exponent).
fn decimal(n: f64) -> String {
    format!("{n}")
}

/// What a report's rows are per.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grouping {
    /// Per user (`sub`).
    User,
    /// Per model (`LLM_MODEL` of the instance that ran the turn).
    Model,
    /// Per UTC day the turn ended, `YYYY-MM-DD`.
    Day,
}

impl Grouping {
    pub const ALL: [Grouping; 3] = [Grouping::User, Grouping::Model, Grouping::Day];

    pub fn as_str(self) -> &'static str {
        match self {
            Grouping::User => "user",
            Grouping::Model => "model",
            Grouping::Day => "day",
        }
    }

    /// The key's SQL: fixed text chosen here, never from input.
    fn key_sql(self) -> &'static str {
        match self {
            Grouping::User => "u.owner",
            Grouping::Model => "u.model",
            // The UTC date whatever the session's TimeZone (none is set: no session state).
            Grouping::Day => "to_char(u.at AT TIME ZONE 'UTC', 'YYYY-MM-DD')",
        }
    }
}

impl fmt::Display for Grouping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Grouping {
    type Err = PeriodError;
    fn from_str(raw: &str) -> Result<Grouping, PeriodError> {
        Grouping::ALL
            .into_iter()
            .find(|g| g.as_str() == raw)
            .ok_or(PeriodError::Grouping)
    }
}

/// A value of the report's query that is not one it takes, in words naming the forms it does.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeriodError {
    #[error(
        "expected a number of days back (7d: today and the 6 days before, in UTC), hours back \
         (24h), a date (2026-11-01, from midnight UTC) or an RFC 3339 time \
         (2026-11-01T09:00:00Z)"
    )]
    Since,
    #[error(
        "expected a date (2026-11-30: up to the end of that day, UTC) or an RFC 3339 time \
         (2026-11-30T18:00:00Z, up to but not including it)"
    )]
    Until,
    #[error("at most {MAX_DAYS_BACK} days back")]
    TooFarBack,
    #[error("the period ends before it starts: `until` must be after `since`")]
    Empty,
    #[error("expected user, model or day")]
    Grouping,
}

/// Where a report's period starts, as typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    /// Whole UTC days, today included: `1d` is today, `7d` today and the six days before, so a
    /// report by day has no part-day at its start.
    Days(u32),
    /// This many hours before now.
    Hours(u32),
    /// From this instant (a date means its midnight UTC).
    At(DateTime<Utc>),
}

impl Since {
    /// The default period: the last 30 days, today included.
    pub const DEFAULT: Since = Since::Days(30);

    pub fn parse(raw: &str) -> Result<Since, PeriodError> {
        let raw = raw.trim();
        if let Some((n, unit)) = count_and_unit(raw) {
            let n: u32 = n.parse().map_err(|_| PeriodError::TooFarBack)?;
            return match unit {
                'd' if n == 0 => Err(PeriodError::Since),
                'd' if n > MAX_DAYS_BACK => Err(PeriodError::TooFarBack),
                'd' => Ok(Since::Days(n)),
                'h' if n == 0 => Err(PeriodError::Since),
                'h' if n > MAX_DAYS_BACK * 24 => Err(PeriodError::TooFarBack),
                _ => Ok(Since::Hours(n)),
            };
        }
        if let Some(at) = instant(raw) {
            return Ok(Since::At(at));
        }
        if let Some(day) = date(raw) {
            return Ok(Since::At(day.and_time(NaiveTime::MIN).and_utc()));
        }
        Err(PeriodError::Since)
    }

    /// The first instant of the period, given the time now.
    pub fn start(self, now: DateTime<Utc>) -> DateTime<Utc> {
        match self {
            Since::Days(n) => {
                let today = now.date_naive().and_time(NaiveTime::MIN).and_utc();
                today - Duration::days(i64::from(n) - 1)
            }
            Since::Hours(n) => now - Duration::hours(i64::from(n)),
            Since::At(at) => at,
        }
    }
}

/// Where a report's period ends (not included), as typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Until(pub DateTime<Utc>);

impl Until {
    /// A date takes in the whole of that day (up to the next midnight UTC); an RFC 3339 time
    /// is the first instant not taken in.
    pub fn parse(raw: &str) -> Result<Until, PeriodError> {
        let raw = raw.trim();
        if let Some(at) = instant(raw) {
            return Ok(Until(at));
        }
        if let Some(day) = date(raw).and_then(|d| d.succ_opt()) {
            return Ok(Until(day.and_time(NaiveTime::MIN).and_utc()));
        }
        Err(PeriodError::Until)
    }
}

/// `<digits><d|h>` split, or `None` when `raw` is not of that shape (ASCII digits only).
fn count_and_unit(raw: &str) -> Option<(&str, char)> {
    let unit = raw.chars().last()?;
    let digits = &raw[..raw.len() - unit.len_utf8()];
    (matches!(unit, 'd' | 'h') && !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
        .then_some((digits, unit))
}

fn instant(raw: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(raw)
        .ok()
        .map(|at| at.with_timezone(&Utc))
}

fn date(raw: &str) -> Option<NaiveDate> {
    // Exactly YYYY-MM-DD: chrono alone would take `2026-1-5` too.
    (raw.len() == 10)
        .then(|| NaiveDate::parse_from_str(raw, "%Y-%m-%d").ok())
        .flatten()
}

/// One report: a period, how its rows are keyed, and optionally one owner's turns only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub since: DateTime<Utc>,
    /// Not included; `None`: up to now.
    pub until: Option<DateTime<Utc>>,
    pub by: Grouping,
    /// Only this user's turns (`sub`); `None`: everyone's.
    pub owner: Option<String>,
}

impl Query {
    /// The query for `since`/`until` as typed, resolved against `now`; refused when the
    /// period is empty or reaches back past [`MAX_DAYS_BACK`].
    pub fn new(
        since: Since,
        until: Option<Until>,
        by: Grouping,
        owner: Option<String>,
        now: DateTime<Utc>,
    ) -> Result<Query, PeriodError> {
        let start = since.start(now);
        if start < now - Duration::days(i64::from(MAX_DAYS_BACK) + 1) {
            return Err(PeriodError::TooFarBack);
        }
        let until = until.map(|Until(at)| at);
        if until.is_some_and(|end| end <= start) {
            return Err(PeriodError::Empty);
        }
        Ok(Query {
            since: start,
            until,
            by,
            owner,
        })
    }
}

/// The sums of one key (or of the whole period: [`Report::totals`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The user's `sub`, the model, or the day `YYYY-MM-DD`; `total` for the totals.
    pub key: String,
    /// Turns stored (answered, failed, interrupted, waiting for approval).
    pub turns: i64,
    pub model_calls: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub tool_calls: i64,
    /// Tool calls that ended in a tool error.
    pub tool_errors: i64,
    /// Turns that failed (an error code, not an interruption or a wait for approval).
    pub errors: i64,
    /// USD, exact decimal text (`0.0042`); `None` when a model of the row has no price.
    pub cost: Option<String>,
    /// The row's models that have no price, by name.
    pub unpriced: Vec<String>,
}

impl Row {
    /// The cost as a JSON number (the nearest double to the exact decimal), or null.
    pub fn cost_number(&self) -> Option<f64> {
        self.cost.as_deref().and_then(|c| c.parse().ok())
    }

    pub fn to_json(&self) -> Value {
        json!({
            "key": self.key,
            "turns": self.turns,
            "model_calls": self.model_calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "tool_calls": self.tool_calls,
            "tool_errors": self.tool_errors,
            "errors": self.errors,
            "cost": self.cost_number(),
            "unpriced": self.unpriced,
        })
    }
}

/// What [`report`] returns: the rows in key order, and their totals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub query: Query,
    pub rows: Vec<Row>,
    pub totals: Row,
}

impl Report {
    /// The report as the API and `parley usage --format json` give it.
    pub fn to_json(&self) -> Value {
        json!({
            "by": self.query.by.as_str(),
            "since": self.query.since.to_rfc3339_opts(SecondsFormat::Secs, true),
            "until": self.query.until.map(|u| u.to_rfc3339_opts(SecondsFormat::Secs, true)),
            "owner": self.query.owner,
            "currency": CURRENCY,
            "rows": self.rows.iter().map(Row::to_json).collect::<Vec<_>>(),
            "totals": self.totals.to_json(),
        })
    }
}

/// Why the ledger could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("this database has no chat.turn_usage table; run `parley migrate` first")]
    NotMigrated,
    #[error("reading chat.turn_usage failed: {}", crate::db::pg_message(.0))]
    Query(#[source] tokio_postgres::Error),
}

impl ReportError {
    /// The database error underneath, for callers that classify connection failures.
    pub fn source_error(&self) -> Option<&tokio_postgres::Error> {
        match self {
            ReportError::NotMigrated => None,
            ReportError::Query(e) => Some(e),
        }
    }
}

/// Per (key, model), then per key with each model's tokens at its own price; the `ROLLUP`
/// row (GROUPING = 1) is the totals, one even for an empty period. A row's cost is null when
/// any of its models is unpriced; with no turns at all it is 0, known.
const REPORT_SQL: &str = "\
WITH prices (model, input, output) AS (
    SELECT * FROM unnest($4::text[], $5::text[]::numeric[], $6::text[]::numeric[])
), per AS (
    SELECT {key} AS key, u.model,
           count(*) AS turns,
           sum(u.model_calls) AS model_calls,
           sum(u.input_tokens) AS input_tokens,
           sum(u.output_tokens) AS output_tokens,
           sum(u.tool_calls) AS tool_calls,
           sum(u.tool_errors) AS tool_errors,
           count(*) FILTER (WHERE u.error) AS errors
    FROM chat.turn_usage u
    WHERE u.at >= $1 AND ($2::timestamptz IS NULL OR u.at < $2)
      AND ($3::text IS NULL OR u.owner = $3)
    GROUP BY 1, 2
), priced AS (
    SELECT per.*, coalesce(p.input, d.input) AS input_price,
           coalesce(p.output, d.output) AS output_price
    FROM per
    LEFT JOIN prices p ON p.model = per.model
    LEFT JOIN prices d ON d.model = '*'
)
SELECT GROUPING(key) = 1 AS is_total, key,
       coalesce(sum(turns), 0)::int8 AS turns,
       coalesce(sum(model_calls), 0)::int8 AS model_calls,
       coalesce(sum(input_tokens), 0)::int8 AS input_tokens,
       coalesce(sum(output_tokens), 0)::int8 AS output_tokens,
       coalesce(sum(tool_calls), 0)::int8 AS tool_calls,
       coalesce(sum(tool_errors), 0)::int8 AS tool_errors,
       coalesce(sum(errors), 0)::int8 AS errors,
       CASE WHEN bool_and(input_price IS NOT NULL) IS NOT FALSE THEN
           trim_scale(coalesce(sum(input_tokens * input_price + output_tokens * output_price), 0)
                      / 1000000)::text
       END AS cost,
       coalesce(array_agg(DISTINCT model ORDER BY model) FILTER (WHERE input_price IS NULL),
                '{}') AS unpriced
FROM priced
GROUP BY ROLLUP (key)
ORDER BY GROUPING(key), key COLLATE \"C\"";

/// Reads the report `query` asks for, priced by `prices`: one statement.
pub async fn report(
    client: &Client,
    query: &Query,
    prices: &Prices,
) -> Result<Report, ReportError> {
    let sql = REPORT_SQL.replace("{key}", query.by.key_sql());
    let (models, inputs, outputs) = prices.columns();
    let owner = query.owner.as_deref();
    let params: [(&(dyn ToSql + Sync), Type); 6] = [
        (&query.since, Type::TIMESTAMPTZ),
        (&query.until, Type::TIMESTAMPTZ),
        (&owner, Type::TEXT),
        (&models, Type::TEXT_ARRAY),
        (&inputs, Type::TEXT_ARRAY),
        (&outputs, Type::TEXT_ARRAY),
    ];
    let rows = client.query_typed(&sql, &params).await.map_err(|e| {
        if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) {
            ReportError::NotMigrated
        } else {
            ReportError::Query(e)
        }
    })?;
    let mut keyed = Vec::with_capacity(rows.len().saturating_sub(1));
    let mut totals = None;
    for row in rows {
        let is_total: bool = row.get("is_total");
        let sums = Row {
            key: if is_total {
                "total".to_owned()
            } else {
                row.get("key")
            },
            turns: row.get("turns"),
            model_calls: row.get("model_calls"),
            input_tokens: row.get("input_tokens"),
            output_tokens: row.get("output_tokens"),
            tool_calls: row.get("tool_calls"),
            tool_errors: row.get("tool_errors"),
            errors: row.get("errors"),
            cost: row.get("cost"),
            unpriced: row.get("unpriced"),
        };
        if is_total {
            totals = Some(sums);
        } else {
            keyed.push(sums);
        }
    }
    Ok(Report {
        query: query.clone(),
        rows: keyed,
        // ROLLUP always yields its grand total, even over no rows.
        totals: totals.expect("a ROLLUP has its total row"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(rfc3339: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(rfc3339).unwrap().to_utc()
    }

    #[test]
    fn prices_are_per_model_with_an_optional_default_and_unknown_otherwise() {
        let prices = Prices::parse(
            r#"{"gpt-4.1-mini": {"input": 0.4, "output": 1.6}, "*": {"input": 2, "output": 8}}"#,
        )
        .unwrap();
        assert_eq!(
            prices.of("gpt-4.1-mini"),
            Some(Price {
                input: 0.4,
                output: 1.6
            })
        );
        assert_eq!(
            prices.of("other"),
            Some(Price {
                input: 2.0,
                output: 8.0
            })
        );
        let no_default = Prices::parse(r#"{"a": {"input": 0, "output": 0}}"#).unwrap();
        assert_eq!(no_default.of("b"), None);
        assert!(Prices::default().is_empty());
        assert_eq!(
            prices.columns(),
            (
                vec!["gpt-4.1-mini".to_owned(), "*".to_owned()],
                vec!["0.4".to_owned(), "2".to_owned()],
                vec!["1.6".to_owned(), "8".to_owned()],
            )
        );
    }

    #[test]
    fn a_bad_model_prices_setting_stops_start_up_naming_it() {
        for bad in [
            "not json",
            "[]",
            r#"{"m": 1}"#,
            r#"{"m": {"input": 1}}"#,
            r#"{"m": {"input": 1, "output": -1}}"#,
            r#"{"m": {"input": "1", "output": 1}}"#,
            r#"{"m": {"input": 1, "output": 1, "cached": 0.5}}"#,
            r#"{"m": {"input": 1, "outptu": 1}}"#,
            r#"{"m": {"input": 1e9, "output": 1}}"#,
            r#"{"": {"input": 1, "output": 1}}"#,
            r#"{" m": {"input": 1, "output": 1}}"#,
        ] {
            let env = Env::from_pairs([("MODEL_PRICES", bad)]);
            let e = Prices::from_env(&env).expect_err(bad);
            assert_eq!(e.var, "MODEL_PRICES", "{bad}");
        }
        assert_eq!(
            Prices::from_env(&Env::from_pairs([("MODEL_PRICES", " ")])).unwrap(),
            Prices::default()
        );
    }

    #[test]
    fn prices_go_to_postgres_as_the_decimal_written() {
        assert_eq!(decimal(0.15), "0.15");
        assert_eq!(decimal(2.0), "2");
        assert_eq!(decimal(0.0000001), "0.0000001");
        assert_eq!(decimal(100000.0), "100000");
    }

    #[test]
    fn days_back_are_whole_utc_days_with_today_and_hours_back_are_rolling() {
        let now = utc("2026-11-29T20:30:00Z");
        let start = |raw: &str| Since::parse(raw).unwrap().start(now);
        assert_eq!(start("1d"), utc("2026-11-29T00:00:00Z"));
        assert_eq!(start("7d"), utc("2026-11-23T00:00:00Z"));
        assert_eq!(start("30d"), utc("2026-10-31T00:00:00Z"));
        assert_eq!(start("24h"), utc("2026-11-28T20:30:00Z"));
        assert_eq!(start("2026-11-01"), utc("2026-11-01T00:00:00Z"));
        assert_eq!(
            start("2026-11-01T10:00:00+01:00"),
            utc("2026-11-01T09:00:00Z")
        );
    }

    #[test]
    fn since_refuses_anything_else_naming_the_forms_it_takes() {
        for bad in [
            "",
            "d",
            "0d",
            "0h",
            "7",
            "7w",
            "-7d",
            "+7d",
            "7.5d",
            "7 d",
            "1d2h",
            "today",
            "2026-13-01",
            "2026-1-05",
            "2026-11-01T10:00",
            "７d",
        ] {
            let e = Since::parse(bad).expect_err(bad);
            assert_eq!(e, PeriodError::Since, "{bad:?}");
            let message = e.to_string();
            for form in ["7d", "24h", "2026-11-01", "RFC 3339"] {
                assert!(message.contains(form), "{bad:?}: {message}");
            }
        }
        assert_eq!(Since::parse("36501d"), Err(PeriodError::TooFarBack));
        assert_eq!(
            Since::parse("99999999999999999999d"),
            Err(PeriodError::TooFarBack)
        );
    }

    #[test]
    fn until_a_date_takes_in_that_whole_day() {
        assert_eq!(
            Until::parse("2026-11-30"),
            Ok(Until(utc("2026-12-01T00:00:00Z")))
        );
        assert_eq!(
            Until::parse("2026-11-30T18:00:00Z"),
            Ok(Until(utc("2026-11-30T18:00:00Z")))
        );
        assert_eq!(Until::parse("7d"), Err(PeriodError::Until));
    }

    #[test]
    fn an_empty_or_endless_period_is_refused() {
        let now = utc("2026-11-29T20:30:00Z");
        let q = |since: &str, until: Option<&str>| {
            Query::new(
                Since::parse(since).unwrap(),
                until.map(|u| Until::parse(u).unwrap()),
                Grouping::Day,
                None,
                now,
            )
        };
        assert!(q("2026-11-01", Some("2026-11-01")).is_ok(), "one whole day");
        assert_eq!(q("2026-11-02", Some("2026-11-01")), Err(PeriodError::Empty));
        assert_eq!(
            q("2026-11-01T10:00:00Z", Some("2026-11-01T10:00:00Z")),
            Err(PeriodError::Empty)
        );
        assert_eq!(q("1900-01-01", None), Err(PeriodError::TooFarBack));
    }

    #[test]
    fn groupings_are_user_model_or_day() {
        for g in Grouping::ALL {
            assert_eq!(g.as_str().parse::<Grouping>(), Ok(g));
        }
        assert_eq!("User".parse::<Grouping>(), Err(PeriodError::Grouping));
        assert_eq!("week".parse::<Grouping>(), Err(PeriodError::Grouping));
    }
}
