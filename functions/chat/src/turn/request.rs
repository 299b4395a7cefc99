//! What a turn is asked to do ([`TurnRequest`]): the question or the answers to waiting calls,
//! the conversation, the screen's context and the tools to offer, each already checked.

use crate::turn::approval::Answer;
use crate::turn::conversation::ConversationId;
use crate::turn::instructions::UiContext;
use crate::turn::llm::Item;

/// A checked turn request. Only the edge's parsers (`crate::http::bodies`, a `TryFrom` of either
/// route's wire struct) make one, so holding one proves its parts were checked; the fields are
/// the crate's for that alone (review rule: nothing else builds one).
#[derive(Debug, Clone)]
pub struct TurnRequest {
    pub(crate) message: String,
    pub(crate) context: Option<UiContext>,
    pub(crate) conversation: Option<ConversationId>,
    pub(crate) tools: Option<Vec<String>>,
    pub(crate) prior: Vec<Item>,
    pub(crate) approvals: Option<Vec<Answer>>,
    pub(crate) ui_message: Option<String>,
}

impl TurnRequest {
    /// The user's message: trimmed, not empty, at most `MAX_MESSAGE_CHARS`, no NUL; empty for
    /// a request that answers approvals instead ([`TurnRequest::approvals`]).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The answers to a paused turn's waiting calls (1 to `MAX_APPROVALS`, distinct ids):
    /// such a request names its conversation and carries no message.
    pub fn approvals(&self) -> Option<&[Answer]> {
        self.approvals.as_deref()
    }

    /// The id of the AI SDK UI message a resumed turn continues (the assistant message whose
    /// approvals a `useChat` request answers), so its stream goes on in that message.
    pub fn ui_message(&self) -> Option<&str> {
        self.ui_message.as_deref()
    }

    /// The page's context object, at most `MAX_CONTEXT_BYTES`.
    pub fn context(&self) -> Option<&UiContext> {
        self.context.as_ref()
    }

    /// The conversation to continue; none starts a new one.
    pub fn conversation(&self) -> Option<ConversationId> {
        self.conversation
    }

    /// The names the tools offered to the model are narrowed to (1 to `MAX_TOOL_NAMES`).
    pub fn tools(&self) -> Option<&[String]> {
        self.tools.as_deref()
    }

    /// What a stateless client (the OpenAI-compatible endpoint) says came before, for a new
    /// conversation: the model sees it ahead of the question; it is not stored.
    pub fn take_prior(&mut self) -> Vec<Item> {
        std::mem::take(&mut self.prior)
    }
}
