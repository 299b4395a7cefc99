//! The MCP client both `mcp` sections drive (the main table and `sql_audit`): `tools/call` as
//! a stateless Streamable HTTP client sends it ([`Mcp`]), the HTTP client it runs on, and the
//! call arguments they share. Below both sections, so neither imports the other's internals.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use parley_wire::META_IDEMPOTENCY_KEY;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::{Map, Value, json};

use crate::measure::{self, Driver};
use crate::tasks::Keys;

/// The protocol revision an ordinary current client announces.
const PROTOCOL_VERSION: &str = "2025-06-18";

/// Districts the lookup rotates over.
pub(crate) const LAD_REFS: i64 = 50;

/// Evenly spread feedback ids that exist, for `get_feedback`: a primary-key lookup, so the
/// query is cheap and the protocol's own cost stands out.
pub(crate) async fn feedback_ids(client: &tokio_postgres::Client) -> anyhow::Result<Vec<i64>> {
    let ids: Vec<i64> = client
        .query(
            "WITH b AS (SELECT min(id) AS lo, max(id) AS hi FROM feedback)
             SELECT f.id FROM b, generate_series(b.lo, b.hi, greatest((b.hi - b.lo) / $1, 1)) g
             JOIN feedback f ON f.id = g LIMIT $1",
            &[&LAD_REFS],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if ids.is_empty() {
        bail!("the feedback table is empty");
    }
    Ok(ids)
}

/// `TOOLS_FILE` naming `files`.
pub fn tools_file_setting(files: &[PathBuf]) -> String {
    files
        .iter()
        .map(|f| f.display().to_string())
        .collect::<Vec<_>>()
        .join(",")
}

pub(crate) fn object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => unreachable!("json! of an object literal"),
    }
}

/// `tools/call` as a stateless Streamable HTTP client sends it, over a keep-alive connection.
pub(crate) struct Mcp<'a> {
    http: &'a reqwest::Client,
    url: String,
    /// The `params` object of each call, already serialised (without its closing brace when
    /// the call gets a key: `_meta` is appended per call).
    params: Vec<String>,
    /// Call `i`'s `Authorization` (a bench user's token); empty: the client's service token.
    authorization: Vec<HeaderValue>,
    /// Each call's own idempotency key, in `_meta`.
    keys: Option<&'a Keys>,
}

impl<'a> Mcp<'a> {
    pub(crate) fn new(
        http: &'a reqwest::Client,
        base: &str,
        tool: &str,
        calls: &[Map<String, Value>],
        authorization: Vec<HeaderValue>,
        keys: Option<&'a Keys>,
    ) -> Self {
        let params = calls.iter().map(|a| {
            let mut params = json!({ "name": tool, "arguments": a }).to_string();
            if keys.is_some() {
                params.pop();
            }
            params
        });
        Self {
            http,
            url: format!("{base}/mcp"),
            params: params.collect(),
            authorization,
            keys,
        }
    }
}

impl Driver for Mcp<'_> {
    async fn call(&self, i: usize) -> anyhow::Result<(Duration, u64)> {
        let params = &self.params[i % self.params.len()];
        let meta = match self.keys {
            Some(keys) => format!(
                r#","_meta":{{"{META_IDEMPOTENCY_KEY}":"{}"}}}}"#,
                keys.next()
            ),
            None => String::new(),
        };
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{params}{meta}}}"#,
            i + 1,
        );
        let authorization = (!self.authorization.is_empty())
            .then(|| &self.authorization[i % self.authorization.len()]);
        let (elapsed, v) = measure::post_json_as(self.http, &self.url, authorization, body).await?;
        if let Some(error) = v.get("error") {
            bail!("JSON-RPC error: {error}");
        }
        let result = v
            .get("result")
            .with_context(|| format!("no result in {v}"))?;
        if result.get("isError") != Some(&Value::Bool(false)) {
            bail!("tool error: {}", result["content"][0]["text"]);
        }

        let rows = result["structuredContent"]["row_count"]
            .as_u64()
            .with_context(|| format!("no structuredContent.row_count in {result}"))?;
        Ok((elapsed, rows))
    }
}

pub(crate) fn http_client(token: &str, concurrency: usize) -> anyhow::Result<reqwest::Client> {
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(
        ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    headers.insert(
        "mcp-protocol-version",
        HeaderValue::from_static(PROTOCOL_VERSION),
    );
    headers.insert(
        AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {token}"))?,
    );
    Ok(reqwest::Client::builder()
        .default_headers(headers)
        .tcp_nodelay(true)
        .pool_max_idle_per_host(concurrency)
        .build()?)
}
