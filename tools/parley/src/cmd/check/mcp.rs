//! The mcp checks, as any MCP client meets the function (stateless JSON-RPC POSTs, no
//! handshake): a call without credentials and one with a forged caller assertion refused,
//! `tools/list` answered, the documents search tool answering a query, and the ad-hoc SQL tools
//! running `SELECT 1` when served. Every call it makes is a read, audited as any other.

use std::time::{SystemTime, UNIX_EPOCH};

use parley_core::config::SecretString;
use parley_core::jwt::assertion::Signer;
use serde_json::{Map, Value, json};

use super::http::{Answer, Probe};
use super::{Check, McpUrl, Outcome, Seen};

/// The protocol version sent: one every Parley release answers without a handshake.
const PROTOCOL_VERSION: &str = "2025-06-18";
/// What an MCP client must accept (Streamable HTTP).
const ACCEPT: &str = "application/json, text/event-stream";
/// What the documents check searches for: any text answers, with passages or none.
pub const SEARCH_QUERY: &str = "parley check";
/// The statement the SQL check runs.
pub const SQL: &str = "SELECT 1 AS one";
/// The key a forged assertion is signed with: not the stack's `MCP_CALLER_KEY`.
const FORGED_KEY: &str = "parley check: a key no mcp function is given";

/// A listed tool, as the checks need it.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    pub name: String,
    /// It declares citations (`_meta["parley/citation"]`): its rows are sources.
    pub cites: bool,
    /// It takes a `query` argument.
    pub takes_query: bool,
}

/// A call without credentials must be refused, and so must one with a forged assertion.
pub async fn refusal(probe: &Probe, seen: &mut Seen) -> Outcome {
    let url = probe.target.mcp.url();
    let answer = match rpc(probe, url, None, "tools/list", json!({})).await {
        Ok(a) => a,
        Err(why) => {
            seen.mcp = Err("the mcp function did not answer (see mcp-auth)".into());
            return Outcome::fail(
                Check::McpAuth,
                format!("nothing answers at {url}: {why}"),
                mcp_url_fix(probe),
            );
        }
    };
    match answer.status {
        404 if matches!(probe.target.mcp, McpUrl::BesideThePage(_)) => {
            seen.mcp = Err("the mcp function's URL is not known: pass --mcp (see mcp-auth)".into());
            Outcome::skip(
                Check::McpAuth,
                format!(
                    "{url} answered 404: this stack serves its mcp function elsewhere; pass its \
                     URL with --mcp (the McpUrl output; scripts/dev: {})",
                    super::DEFAULT_LOCAL_MCP_URL
                ),
            )
        }
        200..=299 => {
            seen.mcp = Ok(url.clone());
            Outcome::fail(
                Check::McpAuth,
                format!(
                    "{url} answered a call without credentials (HTTP {}): anyone who can reach \
                     it calls every tool as the service",
                    answer.status
                ),
                open_fix(probe),
            )
        }
        401 => {
            seen.mcp = Ok(url.clone());
            let forged = forged_assertion();
            match rpc(probe, url, Some(&forged), "tools/list", json!({})).await {
                Ok(a) if a.status == 401 => Outcome::ok(
                    Check::McpAuth,
                    format!(
                        "{url} refuses a call without credentials and one with a forged caller \
                         assertion (401)"
                    ),
                ),
                Ok(a) => Outcome::fail(
                    Check::McpAuth,
                    format!(
                        "{url} refuses a call without credentials, but answered one with a \
                         forged caller assertion: {}",
                        a.summary()
                    ),
                    "The mcp function must verify caller assertions with MCP_CALLER_KEY, the \
                     chat's key and no other: deploy the current build (scripts/sam build && \
                     scripts/sam deploy) and keep MCP_CALLER_KEY only in the app secret.",
                ),
                Err(why) => Outcome::fail(
                    Check::McpAuth,
                    format!("{url} got no answer to a call with a forged assertion: {why}"),
                    mcp_url_fix(probe),
                ),
            }
        }
        403 => {
            seen.mcp = Err("the mcp function refuses this host name (see mcp-auth)".into());
            Outcome::fail(
                Check::McpAuth,
                format!("{url} answered {}", answer.summary()),
                "The mcp function refuses this host name or origin: add the name to its \
                 MCP_ALLOWED_HOSTS (and an Origin to MCP_ALLOWED_ORIGINS), as docs/settings.md \
                 \"mcp\" says; the chat reaches it under the same name.",
            )
        }
        _ => {
            seen.mcp = Err("the mcp function did not answer as one (see mcp-auth)".into());
            Outcome::fail(
                Check::McpAuth,
                format!(
                    "{url} answered {}, not an MCP endpoint's 401",
                    answer.summary()
                ),
                mcp_url_fix(probe),
            )
        }
    }
}

/// `tools/list`, with the service token (or the user's).
pub async fn tools(probe: &Probe, seen: &mut Seen) -> Outcome {
    let url = match &seen.mcp {
        Ok(url) => url.clone(),
        Err(why) => return Outcome::skip(Check::Tools, why.clone()),
    };
    let token = probe.mcp_token();
    let answer = match rpc(probe, &url, token, "tools/list", json!({})).await {
        Ok(a) => a,
        Err(why) => {
            return Outcome::fail(
                Check::Tools,
                format!("tools/list got no answer: {why}"),
                mcp_url_fix(probe),
            );
        }
    };
    if answer.status == 401 {
        if token.is_none() {
            seen.tools = Err("the tools were not listed: no token (see tools)".into());
            return Outcome::skip(
                Check::Tools,
                format!(
                    "the mcp function asks for a token: pass the app secret's MCP_AUTH_TOKEN \
                     with --mcp-token or {} (docs/deploy.md \"When it fails\" reads it)",
                    super::MCP_TOKEN_SETTING
                ),
            );
        }
        seen.tools = Err("the tools were not listed: the token was refused (see tools)".into());
        return Outcome::fail(
            Check::Tools,
            format!(
                "tools/list was refused with the token given: {}",
                answer.summary()
            ),
            "Pass the mcp function's current service token, the app secret's MCP_AUTH_TOKEN \
             (--mcp-token or MCP_AUTH_TOKEN; docs/deploy.md \"When it fails\" reads it); a \
             user's \
             token counts only when the mcp function has JWT_* settings (docs/settings.md \
             \"mcp\").",
        );
    }
    let listed = match result(&answer) {
        Ok(result) => result
            .get("tools")
            .and_then(Value::as_array)
            .map(|tools| tools.iter().filter_map(tool).collect::<Vec<_>>()),
        Err(why) => {
            return Outcome::fail(
                Check::Tools,
                format!("tools/list answered {why}"),
                mcp_url_fix(probe),
            );
        }
    };
    let Some(listed) = listed.filter(|t| !t.is_empty()) else {
        return Outcome::fail(
            Check::Tools,
            "tools/list answered no tools",
            "The mcp function serves the tools of the files in TOOLS_FILE: name at least one \
             tools file there (docs/settings.md \"mcp\", docs/tools.md).",
        );
    };
    let names: Vec<&str> = listed.iter().map(|t| t.name.as_str()).collect();
    let shown = names.iter().take(8).copied().collect::<Vec<_>>().join(", ");
    let more = names.len().saturating_sub(8);
    let detail = if more > 0 {
        format!("{} tools: {shown} and {more} more", names.len())
    } else {
        format!("{} tools: {shown}", names.len())
    };
    seen.tools = Ok(listed);
    Outcome::ok(Check::Tools, detail)
}

/// The documents search tool answers a query (with passages or none: the service token reads
/// only the public collections).
pub async fn documents(probe: &Probe, seen: &Seen) -> Outcome {
    let (url, tools) = match known(seen) {
        Ok(known) => known,
        Err(why) => return Outcome::skip(Check::Documents, why),
    };
    let search = tools
        .iter()
        .find(|t| t.name == "search_documents" && t.takes_query)
        .or_else(|| tools.iter().find(|t| t.cites && t.takes_query));
    let Some(search) = search else {
        return Outcome::skip(
            Check::Documents,
            "no documents search tool is served (none takes a query and cites its rows): \
             TOOLS_FILE has no documents tools file (docs/documents.md)",
        );
    };
    let outcome = call(probe, url, &search.name, json!({"query": SEARCH_QUERY})).await;
    match outcome {
        Ok(rows) => Outcome::ok(
            Check::Documents,
            format!(
                "{} answered {SEARCH_QUERY:?} with {}",
                search.name,
                super::count(rows, "passage")
            ),
        ),
        // Parley's own refusal (migration 0009), raised once the query is embedded and the
        // search runs: the tool works, and this caller may read nothing.
        Err(why) if why.starts_with(NO_COLLECTION) => Outcome::ok(
            Check::Documents,
            format!(
                "{} ran, and says this caller may read no collection (no collection is public, \
                 and the service token is no user): signed-in users search what they are \
                 enrolled in",
                search.name
            ),
        ),
        Err(why) => Outcome::fail(
            Check::Documents,
            format!("{} answered {why}", search.name),
            "The mcp function cannot search: its EMBEDDINGS_* settings must name a model it \
             can reach, the one the collections were ingested with (docs/settings.md \
             \"Embeddings\"); its log has the cause.",
        ),
    }
}

/// How a search by a caller who may read no collection is refused (migration 0009), as
/// [`call`] reports a tool's error.
const NO_COLLECTION: &str = "an error: you may read no collection";

/// The ad-hoc SQL tools run a statement, when they are served.
pub async fn sql(probe: &Probe, seen: &Seen) -> Outcome {
    let (url, tools) = match known(seen) {
        Ok(known) => known,
        Err(why) => return Outcome::skip(Check::Sql, why),
    };
    let served = |name: &str| tools.iter().any(|t| t.name == name);
    let (tool, arguments, what) = if served("run_sql") {
        ("run_sql", json!({"sql": SQL}), SQL)
    } else if served("list_tables") {
        ("list_tables", json!({}), "the tables")
    } else {
        return Outcome::skip(
            Check::Sql,
            "the ad-hoc SQL tools are not served (no [sql] table in TOOLS_FILE; docs/sql.md)",
        );
    };
    match call(probe, url, tool, arguments).await {
        Ok(rows) => Outcome::ok(
            Check::Sql,
            format!("{tool} ran {what}: {}", super::count(rows, "row")),
        ),
        Err(why) => Outcome::fail(
            Check::Sql,
            format!("{tool} answered {why}"),
            "The SQL tools' login cannot run a query: check SQL_DATABASE_URL (the parley_sql \
             login and its password) and that the database is reachable with it (docs/sql.md \
             \"Turning the SQL tools on\"); the mcp function's log has the cause.",
        ),
    }
}

/// The mcp function's URL and its tools, once both are known.
fn known(seen: &Seen) -> Result<(&url::Url, &[Tool]), String> {
    let url = seen.mcp.as_ref().map_err(Clone::clone)?;
    let tools = seen.tools.as_ref().map_err(Clone::clone)?;
    Ok((url, tools))
}

/// One `tools/call`; its rows (as counted by the result) or what went wrong, in words.
async fn call(probe: &Probe, url: &url::Url, tool: &str, arguments: Value) -> Result<u64, String> {
    let answer = rpc(
        probe,
        url,
        probe.mcp_token(),
        "tools/call",
        json!({"name": tool, "arguments": arguments}),
    )
    .await
    .map_err(|why| format!("no answer: {why}"))?;
    let result = result(&answer)?;
    let text = result
        .pointer("/content/0/text")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        return Err(format!("an error: {text}"));
    }
    let structured = result.get("structuredContent");
    Ok(structured
        .and_then(|s| s.get("row_count"))
        .and_then(Value::as_u64)
        .or_else(|| {
            structured
                .and_then(|s| s.get("rows"))
                .and_then(Value::as_array)
                .map(|r| r.len() as u64)
        })
        .unwrap_or(0))
}

/// A JSON-RPC request to the mcp function, as a stateless client sends one.
async fn rpc(
    probe: &Probe,
    url: &url::Url,
    token: Option<&str>,
    method: &str,
    params: Value,
) -> Result<Answer, String> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let request = probe
        .post(url, &body, ACCEPT, token)
        .header("mcp-protocol-version", PROTOCOL_VERSION);
    let mut response = request.send().await.map_err(super::http::describe)?;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(super::http::describe)? {
        if bytes.len() + chunk.len() > super::http::MAX_BODY_BYTES {
            break;
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(Answer {
        status,
        headers,
        body: bytes,
    })
}

/// The JSON-RPC `result` of an answer (a JSON body, or the message in an event stream), or
/// what was answered instead.
fn result(answer: &Answer) -> Result<Value, String> {
    if answer.status != 200 {
        return Err(answer.summary());
    }
    let message = if answer.media_type() == "text/event-stream" {
        super::turn::events(&answer.body)
            .into_iter()
            .find(|m| m.get("result").is_some() || m.get("error").is_some())
    } else {
        answer.json()
    };
    let Some(message) = message else {
        return Err(format!("a body that is not JSON-RPC: {}", answer.snippet()));
    };
    if let Some(error) = message.get("error") {
        return Err(format!(
            "a JSON-RPC error: {}",
            error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or_default()
        ));
    }
    message
        .get("result")
        .cloned()
        .ok_or_else(|| "a JSON-RPC answer without a result".to_owned())
}

/// A listed tool's name, citations and `query` argument.
fn tool(listed: &Value) -> Option<Tool> {
    Some(Tool {
        name: listed.get("name")?.as_str()?.to_owned(),
        cites: listed
            .pointer("/_meta/parley~1citation")
            .is_some_and(|c| !c.is_null()),
        takes_query: listed.pointer("/inputSchema/properties/query").is_some(),
    })
}

/// An assertion as the chat signs one, for a made-up user, with a key that is not the chat's.
fn forged_assertion() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Signer::new(&SecretString::from(FORGED_KEY))
        .sign("parley-check", &Map::new(), now)
        .unwrap_or_default()
}

/// What to do when the mcp URL does not answer as the mcp function.
fn mcp_url_fix(probe: &Probe) -> String {
    if probe.is_local() && matches!(probe.target.mcp, McpUrl::Given(_)) {
        format!(
            "Start the local stack with scripts/dev (it serves the mcp function on \
             {}), or pass the mcp function's URL with --mcp.",
            super::DEFAULT_LOCAL_MCP_URL
        )
    } else {
        "Pass the mcp function's URL with --mcp: the stack's McpUrl output (aws cloudformation \
         describe-stacks --stack-name <stack> --query 'Stacks[0].Outputs'; \
         docs/deploy-reference.md \"Asking\")."
            .to_owned()
    }
}

/// What to do about an mcp function that answers anyone.
fn open_fix(probe: &Probe) -> &'static str {
    if probe.is_local() {
        "The mcp function runs with auth off (no MCP_AUTH_TOKEN and no JWT_* settings), as \
         scripts/dev runs it unless told: restart it as MCP_AUTH_TOKEN=$(openssl rand -hex 32) \
         scripts/dev and run parley check with the same MCP_AUTH_TOKEN (docs/settings.md \"mcp\")."
    } else {
        "Set MCP_AUTH_TOKEN for the mcp function (template.yaml puts a generated one in the app \
         secret; docs/deploy.md \"4. The model's key\") and, for users' tokens, its JWT_* \
         settings: with neither, auth is off (docs/settings.md \"mcp\")."
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_tool_says_whether_it_cites_and_takes_a_query() {
        let listed = json!({"name": "search_documents",
            "inputSchema": {"type": "object", "properties": {"query": {"type": "string"}}},
            "_meta": {"parley/citation": {"id": "chunk_id"}}});
        assert_eq!(
            tool(&listed),
            Some(Tool {
                name: "search_documents".into(),
                cites: true,
                takes_query: true
            })
        );
        let plain = json!({"name": "list_lads", "inputSchema": {"type": "object"}});
        assert_eq!(
            tool(&plain),
            Some(Tool {
                name: "list_lads".into(),
                cites: false,
                takes_query: false
            })
        );
    }

    #[test]
    fn a_forged_assertion_claims_the_chat_as_its_issuer() {
        let token = forged_assertion();
        assert_eq!(token.split('.').count(), 3);
        assert!(parley_core::jwt::assertion::claims_to_be_one(&token));
    }
}
