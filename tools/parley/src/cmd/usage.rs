//! `parley usage`: turns, model calls, tokens, tool calls, errors and cost per user, model or
//! day, from `chat.turn_usage`, priced by `MODEL_PRICES`.

use parley_core::config::Env;

use super::{CmdError, Out};

#[derive(Debug, clap::Args)]
pub struct Args {}

/// Why a usage report could not be made.
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    #[error("not built yet")]
    NotBuilt,
}

impl UsageError {
    /// A mistake in the arguments or settings (exit code 2), not a failure.
    pub fn is_usage(&self) -> bool {
        false
    }
}

pub async fn run(_args: Args, _env: &Env, _out: &mut Out) -> Result<(), CmdError> {
    Err(UsageError::NotBuilt.into())
}
