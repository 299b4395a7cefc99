//! The contract between the chat and the mcp function, written once: the `_meta` keys a tool
//! listing and a `tools/call` carry, the citation a tool publishes, the verified query a tool
//! answers with, the approval a call runs under, the idempotency key's form, and what a caller
//! assertion says about itself. Any MCP client may rely on the same.
//! Nothing here knows HTTP, SQL or a domain.

mod approval;
pub mod assertion;
mod citation;
mod idempotency;

pub use approval::{Approval, MalformedApproval};
pub use citation::{Citation, CitationError};
pub use idempotency::{IdempotencyKey, KeyError};

/// Tool `_meta`: `{"<ui context key>": "<parameter>"}`, the parameter that resolves what the
/// user's screen refers to under that key.
pub const META_CONTEXT: &str = "parley/context";

/// Tool `_meta`: `true` when the server records a call's idempotency key and answers a repeat
/// with the first result instead of running it again. Request `_meta` of a `tools/call`: the
/// call's [`IdempotencyKey`].
pub const META_IDEMPOTENCY_KEY: &str = "parley/idempotency_key";

/// Tool `_meta`: the [`Citation`], the output columns that make a row of the tool a source.
pub const META_CITATION: &str = "parley/citation";

/// Tool `_meta`: the name of the verified query the tool runs (`"top_artists"` for the tool
/// `verified_top_artists`): SQL the team trusts, served from its semantic catalog. A reply that
/// follows a successful call of it is answered from that query, and the client says so among the
/// turn's sources (`verified: top_artists`). Absent for every other tool.
pub const META_VERIFIED: &str = "parley/verified";

/// Tool `_meta`: `"always"` when every call of the tool waits for the user's approval, whatever
/// its annotations say (sending an e-mail, spending money). A client that pauses calls for
/// approval also pauses those annotated `destructiveHint: true`.
pub const META_APPROVAL: &str = "parley/approval";

/// Request `_meta` of a `tools/call`: the approval the call runs under, `{"id": "<approval
/// id>", "decided_by": "<user's subject>", "decided_at": "<RFC 3339 time>"}`, so the server's
/// audit record of the call names who approved it and when ([`Approval`]).
pub const META_APPROVED: &str = "parley/approved";

/// Request `_meta` of a `tools/call` inside the chat only: a reference to the caller assertion
/// its HTTP client puts in that one POST's `Authorization` header, taking the reference out of
/// the message. Never sent to a server.
pub const META_CALLER: &str = "parley/caller";
