//! The limits of a turn and of the requests that start one, each a named setting that
//! `config` reads: the one piece of settings both rooms (`http` and `turn`) read.

use std::time::Duration;

/// Limits of one turn; each is a named setting.
#[derive(Debug, Clone)]
pub struct Limits {
    /// `HISTORY_LIMIT`: earlier messages reloaded into each turn (default 20).
    pub history: usize,
    /// `TOOL_OUTPUT_REPLAY_CHARS`: earlier turns' tool outputs are replayed cut to this many
    /// characters, so old results cannot bloat the context (default 2000).
    pub replay_chars: usize,
    /// `MAX_TOOL_CALL_STEPS`: model→tools rounds per turn (default 8).
    pub max_steps: u32,
    /// `MAX_TOOL_CALLS_PER_STEP`: tool calls run from one model response (default 16); the
    /// rest get a tool error asking the model to make them in its next response.
    pub max_calls_per_step: usize,
    /// `TURN_DEADLINE_MS`: when a turn stops and answers with what it has, marked cut short
    /// (default 25000: the template's 28 s Lambda timeout less 3 s to store the reply).
    pub turn_deadline: Duration,
    /// `STREAM_TURN_DEADLINE_MS`: the same for a streamed turn (default 300000): a stream
    /// shows progress as it goes and its route (a Function URL) has no 29 s gateway limit.
    pub stream_turn_deadline: Duration,
    /// `STREAM_FLUSH_MS`: a streamed turn writes text at most this often (default 20): the
    /// first delta after a pause at once, the words that follow within it together. 0 writes
    /// each delta as it comes.
    pub stream_flush: Duration,
    /// `MAX_MESSAGE_CHARS`: longest accepted user message (default 4000).
    pub max_message_chars: usize,
    /// `CHAT_MAX_BODY_BYTES`: request body limit (default 65536).
    pub max_body_bytes: usize,
    /// `MAX_CONTEXT_BYTES`: largest accepted `context` object, serialized (default 8192).
    pub max_context_bytes: usize,
    /// `TURN_LOCK_WAIT_MS`: how long a turn waits for another turn on the same conversation
    /// before answering 409 (default 60000).
    pub turn_lock_wait: Duration,
    /// `TURN_LEASE_MS`: how long a turn's claim on its conversation lasts if the turn never
    /// finishes (its instance froze or died); then the next turn may take the conversation
    /// over. Longer than any turn can run (default 30000: the 25 s turn deadline plus 5 s for
    /// the last tool call and storing the answer).
    pub turn_lease: Duration,
    /// `MCP_TIMEOUT_MS`: one MCP request (default 30000).
    pub mcp_timeout: Duration,
    /// `CONVERSATIONS_PAGE_MAX`: most conversations per page of `GET /api/conversations`
    /// (default 100).
    pub page_max: u32,
    /// `CHART_MAX_ROWS`: most rows one chart (`show_chart`) draws (default 5000). With the
    /// next, what `turn::chart::ChartLimits` is made of (this layer is below `turn`).
    pub chart_max_rows: usize,
    /// `CHART_MAX_SPEC_BYTES`: largest chart spec, rows included, as JSON (default 1 MiB).
    pub chart_max_spec_bytes: usize,
    /// `V1_TABLE_ROWS`: most rows of a chart's table in a `/v1` answer (default 50); a line
    /// says how many more there were.
    pub v1_table_rows: usize,
}
