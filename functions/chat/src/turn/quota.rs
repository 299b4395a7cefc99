//! Budgets and rate limits per user (issue 37): a daily token budget and a turn rate, with
//! overrides per group, admitted before a turn begins and charged as it ends, atomically in
//! Postgres so every instance sees the same count (docs/budgets.md).
//!
//! One row per user in `chat.quota_counters` (migration 0029) holds the tokens charged on its
//! UTC day and the turns started in its rate window. [`admit`] is one statement that takes the
//! row's lock, so concurrent admissions of one user queue on it whatever instance sends them:
//! a turn is admitted while the day's tokens are under the budget and the window's turns under
//! the rate, and counts itself into the window. The turn's tokens are charged by the statement
//! that stores it (`conversation::lease`'s `FINISH`, with its ledger row), so storing and
//! charging are one, and a repeated store charges once.
//!
//! Tokens are known only when a turn ends, so turns admitted together may all finish over the
//! budget: the day's count can pass the budget by at most what the turns already running when
//! it was reached spend. A turn whose model never answered charges nothing and gives its rate
//! slot back ([`Admission::give_back`], or `FINISH` when it is stored).

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Days, NaiveTime, Utc};
use deadpool_postgres::Pool;
use parley_core::config::{ConfigError, Env};
use serde_json::Value;
use tokio_postgres::types::{ToSql, Type};

use crate::auth::{User, UserId};
use crate::turn::conversation::StorageError;

/// The rate limit's window: turns are counted per minute.
pub const RATE_WINDOW: Duration = Duration::from_secs(60);

/// Largest budget a setting may name: what fits Postgres' `bigint` with room to add a turn.
const MAX_DAILY_TOKENS: u64 = 1 << 53;
/// Largest turn rate a setting may name.
const MAX_TURNS_PER_MINUTE: u64 = 1_000_000;

/// One user's limits; `None` is unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Limits {
    /// Tokens (input and output) per UTC day.
    pub daily_tokens: Option<u64>,
    /// Turns started per minute.
    pub turns_per_minute: Option<u32>,
}

impl Limits {
    pub fn is_unlimited(&self) -> bool {
        self.daily_tokens.is_none() && self.turns_per_minute.is_none()
    }

    /// Each limit the larger of the two, unlimited beating any number.
    fn most_generous(self, other: Limits) -> Limits {
        fn larger<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
            Some(a?.max(b?))
        }
        Limits {
            daily_tokens: larger(self.daily_tokens, other.daily_tokens),
            turns_per_minute: larger(self.turns_per_minute, other.turns_per_minute),
        }
    }
}

/// `BUDGET_DAILY_TOKENS`, `RATE_TURNS_PER_MINUTE` and `QUOTA_GROUP_OVERRIDES` (see
/// docs/settings.md). Unset, nothing is limited.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    /// Everyone's limits, unless a group of theirs overrides them.
    pub default: Limits,
    /// Per group name, the limits of its members (a field the override leaves out is the
    /// default's).
    pub groups: BTreeMap<String, Limits>,
}

impl Settings {
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let default = Limits {
            daily_tokens: positive(env, "BUDGET_DAILY_TOKENS", MAX_DAILY_TOKENS)?,
            turns_per_minute: positive(env, "RATE_TURNS_PER_MINUTE", MAX_TURNS_PER_MINUTE)?
                .map(|n| n as u32),
        };
        let groups = match env.get("QUOTA_GROUP_OVERRIDES") {
            None | Some("") => BTreeMap::new(),
            Some(raw) => overrides(raw, default)
                .map_err(|why| ConfigError::new("QUOTA_GROUP_OVERRIDES", why))?,
        };
        Ok(Settings { default, groups })
    }

    /// The caller's limits: the most generous of their groups' overrides, or the default when
    /// no group of theirs has one.
    pub fn limits_for(&self, user: &User) -> Limits {
        user.groups
            .iter()
            .filter_map(|g| self.groups.get(g))
            .copied()
            .reduce(Limits::most_generous)
            .unwrap_or(self.default)
    }
}

/// A whole number from 1 to `max`; unset or 0 is unlimited.
fn positive(env: &Env, var: &str, max: u64) -> Result<Option<u64>, ConfigError> {
    let n = env.limit(var, 0, 0..=max)?;
    Ok((n > 0).then_some(n))
}

/// `{"group": {"daily_tokens": n|null, "turns_per_minute": n|null}}`: `null` or 0 is
/// unlimited, a field left out keeps the default.
fn overrides(raw: &str, default: Limits) -> Result<BTreeMap<String, Limits>, String> {
    let parsed: Value = serde_json::from_str(raw)
        .map_err(|e| format!("must be a JSON object of group names to limits: {e}"))?;
    let Value::Object(groups) = parsed else {
        return Err("must be a JSON object of group names to limits".into());
    };
    let mut out = BTreeMap::new();
    for (group, limits) in groups {
        let Value::Object(fields) = limits else {
            return Err(format!(
                "group `{group}`: must be an object with `daily_tokens` and/or `turns_per_minute`"
            ));
        };
        let mut limits = default;
        for (field, value) in fields {
            let max = match field.as_str() {
                "daily_tokens" => MAX_DAILY_TOKENS,
                "turns_per_minute" => MAX_TURNS_PER_MINUTE,
                other => {
                    return Err(format!(
                        "group `{group}`: unknown field `{other}` (daily_tokens, turns_per_minute)"
                    ));
                }
            };
            let n = match value {
                Value::Null => None,
                Value::Number(n) => match n.as_u64() {
                    Some(n) if n <= max => (n > 0).then_some(n),
                    _ => {
                        return Err(format!(
                            "group `{group}`: `{field}` must be a whole number from 0 to {max}, \
                             or null"
                        ));
                    }
                },
                _ => {
                    return Err(format!(
                        "group `{group}`: `{field}` must be a whole number or null"
                    ));
                }
            };
            match field.as_str() {
                "daily_tokens" => limits.daily_tokens = n,
                _ => limits.turns_per_minute = n.map(|n| n as u32),
            }
        }
        out.insert(group, limits);
    }
    Ok(out)
}

/// Which limit refused a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// The day's tokens reached the budget: it resets at the next UTC midnight.
    DailyTokens { budget: u64 },
    /// The minute's turns reached the rate: it resets when the window ends.
    TurnRate { per_minute: u32 },
}

impl Limit {
    /// The limit's name, as the refusal's `limit` field gives it.
    pub fn name(self) -> &'static str {
        match self {
            Limit::DailyTokens { .. } => "daily_tokens",
            Limit::TurnRate { .. } => "turns_per_minute",
        }
    }
}

/// A refused turn: which limit, and when it may start again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exceeded {
    pub limit: Limit,
    /// When the limit resets (the budget: next UTC midnight; the rate: the window's end).
    pub resets_at: DateTime<Utc>,
    /// How long until then, in whole seconds, at least 1.
    pub retry_after: Duration,
}

impl std::fmt::Display for Exceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let wait = plain_wait(self.retry_after);
        match self.limit {
            Limit::DailyTokens { budget } => write!(
                f,
                "You have used today's token budget ({budget} tokens); it resets at {} UTC, in \
                 {wait}",
                self.resets_at.format("%H:%M")
            ),
            Limit::TurnRate { per_minute } => write!(
                f,
                "Too many questions in a minute (at most {per_minute}); try again in {wait}"
            ),
        }
    }
}

/// "42 s", "5 min", "3 h 12 min": a wait as a person says it, rounded up.
fn plain_wait(wait: Duration) -> String {
    let secs = wait.as_secs().max(1);
    if secs < 60 {
        return format!("{secs} s");
    }
    let minutes = secs.div_ceil(60);
    match (minutes / 60, minutes % 60) {
        (0, m) => format!("{m} min"),
        (h, 0) => format!("{h} h"),
        (h, m) => format!("{h} h {m} min"),
    }
}

/// Why a turn could not be admitted.
#[derive(Debug, thiserror::Error)]
pub enum AdmitError {
    #[error("{0}")]
    Exceeded(Exceeded),
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// An admitted turn: the rate window it took a slot in, to give back if its model never
/// answers. Unlimited users take none.
#[derive(Debug, Clone, Copy, Default)]
pub struct Admission {
    /// The start of the rate window the turn was counted in.
    pub rate_slot: Option<DateTime<Utc>>,
}

/// Admits a turn of `owner` under `limits`, or says which limit refuses it and until when.
/// One statement (`ADMIT`): concurrent admissions of one user queue on their row's lock, so
/// no two are let in on the same count. An unlimited user is not counted at all (their tokens
/// still are, when their turns are stored).
pub async fn admit(pool: &Pool, owner: &UserId, limits: Limits) -> Result<Admission, AdmitError> {
    if limits.is_unlimited() {
        return Ok(Admission::default());
    }
    let budget = limits.daily_tokens.map(|n| n as i64);
    let rate = limits
        .turns_per_minute
        .map(i32::try_from)
        .and_then(Result::ok);
    let owner_str = owner.as_str();
    let params: [(&(dyn ToSql + Sync), Type); 3] = [
        (&owner_str, Type::TEXT),
        (&budget, Type::INT8),
        (&rate, Type::INT4),
    ];
    let conn = pool.get().await.map_err(StorageError::from)?;
    let row = conn
        .query_typed_one(ADMIT, &params)
        .await
        .map_err(StorageError::from)?;
    let counts = Counts {
        admitted: row.get(0),
        tokens: row.get::<_, i64>(1).max(0) as u64,
        window_start: row.get(2),
        now: row.get(3),
    };
    counts.decide(limits).map_err(AdmitError::Exceeded)
}

/// What [`ADMIT`] read back: the row as it now is, and the database's clock.
#[derive(Debug, Clone, Copy)]
struct Counts {
    admitted: bool,
    tokens: u64,
    window_start: DateTime<Utc>,
    now: DateTime<Utc>,
}

impl Counts {
    /// The admission, or the limit that refused it: of those reached, the one that resets
    /// last (the turn may start only when both allow it).
    fn decide(self, limits: Limits) -> Result<Admission, Exceeded> {
        if self.admitted {
            return Ok(Admission {
                rate_slot: Some(self.window_start),
            });
        }
        let budget = limits
            .daily_tokens
            .filter(|&b| self.tokens >= b)
            .map(|budget| (Limit::DailyTokens { budget }, next_midnight(self.now)));
        let rate = limits.turns_per_minute.map(|per_minute| {
            let ends =
                self.window_start + chrono::Duration::from_std(RATE_WINDOW).unwrap_or_default();
            (Limit::TurnRate { per_minute }, ends)
        });
        // Refused with the budget not reached: the rate refused it.
        let (limit, resets_at) = match (budget, rate) {
            (Some(b), Some(r)) => std::cmp::max_by_key(r, b, |(_, at)| *at),
            (Some(b), None) => b,
            (None, Some(r)) => r,
            (None, None) => (
                Limit::TurnRate { per_minute: 0 },
                self.now + chrono::Duration::seconds(1),
            ),
        };
        let secs = (resets_at - self.now).num_milliseconds().max(0) as u64;
        Err(Exceeded {
            limit,
            resets_at,
            retry_after: Duration::from_secs(secs.div_ceil(1000).max(1)),
        })
    }
}

/// The UTC midnight after `now`: when the day's budget resets.
fn next_midnight(now: DateTime<Utc>) -> DateTime<Utc> {
    now.date_naive()
        .checked_add_days(Days::new(1))
        .unwrap_or(now.date_naive())
        .and_time(NaiveTime::MIN)
        .and_utc()
}

impl Admission {
    /// Gives the turn's rate slot back: it ended before its model was asked (its conversation
    /// was busy or missing, its approvals were already decided), so it was no question. Best
    /// effort: a slot not given back is free again when its window ends.
    pub async fn give_back(self, pool: &Pool, owner: &UserId) {
        let Some(slot) = self.rate_slot else { return };
        let owner_str = owner.as_str();
        let give = async {
            let conn = pool.get().await.map_err(StorageError::from)?;
            conn.execute_typed(
                GIVE_BACK,
                &[(&owner_str, Type::TEXT), (&slot, Type::TIMESTAMPTZ)],
            )
            .await?;
            Ok::<_, StorageError>(())
        };
        if let Err(e) = give.await {
            tracing::warn!(error = %e, "could not give a turn's rate slot back; it frees when its minute ends");
        }
    }
}

/// Admission, in one statement: `$1` owner, `$2` daily token budget, `$3` turns per minute
/// (`NULL`: unlimited). The day's count starts again on a new UTC day and the window's after a
/// minute. `admitted` is decided on the row as it was (locked, the latest committed version)
/// and kept on it so `RETURNING` can say it; a refusal changes nothing but that and the
/// resets. Returns whether it was admitted, the day's tokens, the window's start and `now()`.
const ADMIT: &str = "INSERT INTO chat.quota_counters AS q
       (owner, day, tokens, window_start, window_turns, admitted)
     VALUES ($1, (now() AT TIME ZONE 'UTC')::date, 0, now(), 1, true)
     ON CONFLICT (owner) DO UPDATE SET
       admitted = ($2::int8 IS NULL
                   OR CASE WHEN q.day = EXCLUDED.day THEN q.tokens ELSE 0 END < $2::int8)
              AND ($3::int4 IS NULL OR q.window_start <= now() - interval '1 minute'
                   OR q.window_turns < $3::int4),
       tokens = CASE WHEN q.day = EXCLUDED.day THEN q.tokens ELSE 0 END,
       day = EXCLUDED.day,
       window_start = CASE WHEN q.window_start > now() - interval '1 minute'
                           THEN q.window_start ELSE now() END,
       window_turns = CASE WHEN q.window_start > now() - interval '1 minute'
                           THEN q.window_turns ELSE 0 END
         + CASE WHEN ($2::int8 IS NULL
                      OR CASE WHEN q.day = EXCLUDED.day THEN q.tokens ELSE 0 END < $2::int8)
                 AND ($3::int4 IS NULL OR q.window_start <= now() - interval '1 minute'
                      OR q.window_turns < $3::int4)
                THEN 1 ELSE 0 END
     RETURNING admitted, tokens, window_start, now()";

/// A slot given back, only in the window it was taken in.
const GIVE_BACK: &str = "UPDATE chat.quota_counters SET window_turns = window_turns - 1
     WHERE owner = $1 AND window_start = $2 AND window_turns > 0";

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Env {
        Env::from_pairs(pairs.iter().copied())
    }

    fn user(groups: &[&str]) -> User {
        User {
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..User::local()
        }
    }

    #[test]
    fn unset_or_zero_is_unlimited() {
        let s = Settings::from_env(&env(&[])).unwrap();
        assert!(s.default.is_unlimited());
        let s = Settings::from_env(&env(&[
            ("BUDGET_DAILY_TOKENS", "0"),
            ("RATE_TURNS_PER_MINUTE", "0"),
        ]))
        .unwrap();
        assert!(s.default.is_unlimited());
    }

    #[test]
    fn a_bad_value_names_its_variable() {
        for (var, value) in [
            ("BUDGET_DAILY_TOKENS", "lots"),
            ("RATE_TURNS_PER_MINUTE", "-1"),
            ("QUOTA_GROUP_OVERRIDES", "[1]"),
            (
                "QUOTA_GROUP_OVERRIDES",
                r#"{"a": {"daily_tokens": "many"}}"#,
            ),
            ("QUOTA_GROUP_OVERRIDES", r#"{"a": {"tokens": 5}}"#),
            (
                "QUOTA_GROUP_OVERRIDES",
                r#"{"a": {"turns_per_minute": 1.5}}"#,
            ),
            ("QUOTA_GROUP_OVERRIDES", r#"{"a": 5}"#),
        ] {
            let e = Settings::from_env(&env(&[(var, value)])).unwrap_err();
            assert!(e.to_string().contains(var), "{var}={value}: {e}");
        }
    }

    #[test]
    fn a_user_in_several_groups_gets_the_most_generous_and_others_the_default() {
        let s = Settings::from_env(&env(&[
            ("BUDGET_DAILY_TOKENS", "1000"),
            ("RATE_TURNS_PER_MINUTE", "5"),
            (
                "QUOTA_GROUP_OVERRIDES",
                r#"{"analysts": {"daily_tokens": 50000},
                    "trial": {"daily_tokens": 100, "turns_per_minute": 2},
                    "ops": {"turns_per_minute": null}}"#,
            ),
        ]))
        .unwrap();
        let limits = |groups: &[&str]| s.limits_for(&user(groups));
        assert_eq!(
            limits(&[]),
            Limits {
                daily_tokens: Some(1000),
                turns_per_minute: Some(5)
            }
        );
        // A group's override replaces the default, stricter or not.
        assert_eq!(
            limits(&["trial"]),
            Limits {
                daily_tokens: Some(100),
                turns_per_minute: Some(2)
            }
        );
        assert_eq!(
            limits(&["trial", "analysts", "ops", "unknown"]),
            Limits {
                daily_tokens: Some(50000),
                turns_per_minute: None
            }
        );
    }

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn a_refusal_says_which_limit_and_when_it_resets() {
        let limits = Limits {
            daily_tokens: Some(1000),
            turns_per_minute: Some(10),
        };
        let counts = Counts {
            admitted: false,
            tokens: 1200,
            window_start: at("2026-11-29T20:47:30Z"),
            now: at("2026-11-29T20:48:00Z"),
        };
        let e = counts.decide(limits).unwrap_err();
        assert_eq!(e.limit, Limit::DailyTokens { budget: 1000 });
        assert_eq!(e.resets_at, at("2026-11-30T00:00:00Z"));
        assert_eq!(e.retry_after, Duration::from_secs(3 * 3600 + 12 * 60));
        assert_eq!(
            e.to_string(),
            "You have used today's token budget (1000 tokens); it resets at 00:00 UTC, in 3 h 12 min"
        );
        let e = Counts {
            tokens: 10,
            now: at("2026-11-29T20:48:17.5Z"),
            ..counts
        }
        .decide(limits)
        .unwrap_err();
        assert_eq!(e.limit, Limit::TurnRate { per_minute: 10 });
        assert_eq!(e.resets_at, at("2026-11-29T20:48:30Z"));
        assert_eq!(e.retry_after, Duration::from_secs(13));
        assert_eq!(
            e.to_string(),
            "Too many questions in a minute (at most 10); try again in 13 s"
        );
    }
}
