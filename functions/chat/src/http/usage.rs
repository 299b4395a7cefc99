//! `GET /api/usage`: usage and cost per user, model and day, from `chat.turn_usage`. Members
//! of the admin group see everyone's; other users see their own.
//!
//! The query string becomes a typed [`usage::Query`] here (parse, don't validate); the report
//! itself is `parley_core::usage`'s, the one `parley usage` prints, so the page and the command
//! cannot disagree. A non-admin's owner filter is part of the statement, not applied after.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use parley_core::config::{ConfigError, Env};
use parley_core::usage::{self, Grouping, PeriodError, Prices, ReportError, Since, Until};
use serde::Deserialize;
use serde_json::Value;

use super::AppState;
use super::error::ApiError;
use crate::auth::User;
use crate::turn::conversation::StorageError;

/// `ADMIN_GROUP`, `MODEL_PRICES` (see docs/settings.md).
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// `ADMIN_GROUP`: members (by the `GROUPS_CLAIM` claim) see everyone's usage; unset, no
    /// one does through the chat (`parley usage` still does).
    pub admin_group: Option<String>,
    /// `MODEL_PRICES`: USD per million tokens per model.
    pub prices: Prices,
}

impl Settings {
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let admin_group = env.get("ADMIN_GROUP").map(str::to_owned);
        if let Some(group) = &admin_group
            && (group.chars().count() > 200 || group.chars().any(char::is_control))
        {
            return Err(ConfigError::new(
                "ADMIN_GROUP",
                "must be 1 to 200 characters without control characters",
            ));
        }
        Ok(Self {
            admin_group,
            prices: Prices::from_env(env)?,
        })
    }

    /// Whether `user` sees everyone's usage: a member of `ADMIN_GROUP`, or the one local user
    /// of `CHAT_AUTH=none` (who runs the chat with its `DATABASE_URL`, and so could read the
    /// ledger anyway).
    fn is_admin(&self, user: &User, auth_disabled: bool) -> bool {
        auth_disabled
            || self
                .admin_group
                .as_deref()
                .is_some_and(|group| user.in_group(group))
    }
}

/// The query string as sent: every value is parsed below, naming the parameter it came in.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageQuery {
    since: Option<String>,
    until: Option<String>,
    by: Option<String>,
}

fn bad(parameter: &str, problem: impl std::fmt::Display) -> ApiError {
    ApiError::BadRequest {
        code: "invalid_query",
        message: format!("`{parameter}`: {problem}"),
    }
}

/// The report, the user's admin standing, the currency and the prices it was priced at.
pub async fn report(
    State(state): State<AppState>,
    user: User,
    query: Result<Query<UsageQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(raw) = query.map_err(|e| ApiError::BadRequest {
        code: "invalid_query",
        message: e.body_text(),
    })?;
    let admin = state.usage.is_admin(&user, state.auth.is_disabled());
    let since = match raw.since.as_deref() {
        None => Since::DEFAULT,
        Some(s) => Since::parse(s).map_err(|e| bad("since", e))?,
    };
    let until = raw
        .until
        .as_deref()
        .map(Until::parse)
        .transpose()
        .map_err(|e| bad("until", e))?;
    // An admin's natural view is everyone by user; anyone else's, their own days.
    let by = match raw.by.as_deref() {
        None if admin => Grouping::User,
        None => Grouping::Day,
        Some(b) => b.parse::<Grouping>().map_err(|e| bad("by", e))?,
    };
    let owner = (!admin).then(|| user.id.as_str().to_owned());
    let query = usage::Query::new(since, until, by, owner, chrono::Utc::now()).map_err(|e| {
        let parameter = match e {
            PeriodError::Empty => "until",
            _ => "since",
        };
        bad(parameter, e)
    })?;
    let client = state.pool.get().await.map_err(StorageError::from)?;
    let report = usage::report(&client, &query, &state.usage.prices)
        .await
        .map_err(|e| match e {
            ReportError::Query(e) => ApiError::Storage(StorageError::from(e)),
            other => ApiError::Internal(other.to_string()),
        })?;
    let mut body = report.to_json();
    body["admin"] = Value::Bool(admin);
    body["prices"] = state.usage.prices.to_json();
    Ok(Json(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(groups: &[&str]) -> User {
        User {
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
            ..User::local()
        }
    }

    #[test]
    fn only_members_of_the_admin_group_or_the_local_user_are_admins() {
        let settings = Settings::from_env(&Env::from_pairs([("ADMIN_GROUP", "ops")])).unwrap();
        assert!(settings.is_admin(&user(&["staff", "ops"]), false));
        assert!(!settings.is_admin(&user(&["staff", "Ops"]), false));
        assert!(settings.is_admin(&user(&[]), true));
        let nobody = Settings::from_env(&Env::default()).unwrap();
        assert!(!nobody.is_admin(&user(&["ops"]), false));
    }

    #[test]
    fn bad_settings_stop_start_up_naming_them() {
        let e = Settings::from_env(&Env::from_pairs([("ADMIN_GROUP", "a\u{7}b")])).unwrap_err();
        assert_eq!(e.var, "ADMIN_GROUP");
        let e = Settings::from_env(&Env::from_pairs([("MODEL_PRICES", "{")])).unwrap_err();
        assert_eq!(e.var, "MODEL_PRICES");
    }
}
