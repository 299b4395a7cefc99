//! The caller assertion: the chat's signed word to the mcp function about who is asking, one
//! per tool call. Signing and checking are `parley_core::jwt::assertion`'s; what both sides
//! must agree on is here.

use std::time::Duration;

/// `iss` of every assertion.
pub const ISSUER: &str = "parley-chat";
/// `aud` of every assertion: only the mcp function accepts it.
pub const AUDIENCE: &str = "parley-mcp";
/// How long an assertion is valid: one tool call, with room for clock skew, never a session.
pub const LIFETIME: Duration = Duration::from_secs(60);
