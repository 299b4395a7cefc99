//! One turn's metrics document ([`Meter`]): its duration, the time spent waiting for the
//! model and for tools, its steps and tokens, and its outcome as a stable code.

use parley_core::metrics::Document;
use tokio::time::Instant;

use super::outcome::{TurnError, TurnOutcome, is_failure};
use crate::turn::llm::Usage;

/// What one turn's metrics are made of, gathered as it runs.
pub(super) struct Meter {
    started: Instant,
    /// Waiting for the model, retries included.
    pub(super) model: std::time::Duration,
    /// Waiting for tools: a step's calls run at once, so each step counts its longest.
    pub(super) tools: std::time::Duration,
    pub(super) steps: u32,
    pub(super) usage: Usage,
}

impl Meter {
    pub(super) fn start() -> Meter {
        Meter {
            started: Instant::now(),
            model: std::time::Duration::ZERO,
            tools: std::time::Duration::ZERO,
            steps: 0,
            usage: Usage::default(),
        }
    }

    /// `Turns`, `TurnDuration`, `ModelTime`, `ToolTime`, `TurnSteps`, `TokensIn`, `TokensOut`
    /// and `TurnErrors`, by `Outcome`. An interrupted turn is no error: its client left.
    pub(super) fn document(&self, outcome: &Result<TurnOutcome, TurnError>) -> Document {
        let code = match outcome {
            Ok(r) => r.status.code(),
            Err(e) => e.code(),
        };
        Document::new()
            .dimension("Outcome", code)
            .count("Turns", 1)
            .millis("TurnDuration", self.started.elapsed())
            .millis("ModelTime", self.model)
            .millis("ToolTime", self.tools)
            .count("TurnSteps", u64::from(self.steps))
            .count("TokensIn", self.usage.input_tokens)
            .count("TokensOut", self.usage.output_tokens)
            .count("TurnErrors", u64::from(is_failure(code)))
    }
}
