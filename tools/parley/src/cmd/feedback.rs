//! `parley feedback export`: the feedback people gave on answers, as JSONL that `parley eval`
//! takes as questions once a person has labelled them.

use parley_core::config::Env;

use super::{CmdError, Out};

#[derive(Debug, clap::Args)]
pub struct Args {}

/// Why feedback could not be exported.
#[derive(Debug, thiserror::Error)]
pub enum FeedbackError {
    #[error("not built yet")]
    NotBuilt,
}

impl FeedbackError {
    /// A mistake in the arguments or settings (exit code 2), not a failure.
    pub fn is_usage(&self) -> bool {
        false
    }
}

pub async fn run(_args: Args, _env: &Env, _out: &mut Out) -> Result<(), CmdError> {
    Err(FeedbackError::NotBuilt.into())
}
