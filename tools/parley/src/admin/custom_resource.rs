//! The CloudFormation custom resource `Custom::ParleyDatabase`: on Create and Update, `parley
//! migrate`, the demo domains `DemoData` asks for, then the login roles of `McpSecretArn`,
//! `ChatSecretArn`, `SqlSecretArn`, `IngestSecretArn` and `AdminSecretArn`, all as the owner
//! (`SECRET_IDS`); on Delete, nothing. Whatever happens, CloudFormation is answered by a PUT to
//! `ResponseURL`: a stack left unanswered waits an hour.

use std::time::Duration;

use parley_core::config::Env;
use parley_domain_documents::DEFAULT_MANUAL_DIR;
use serde::Serialize;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::{Admin, AdminError};
use crate::cmd::{self, CmdError, demo_data, logins};
use crate::demo::Domain;

/// CloudFormation refuses a response body over 4,096 bytes (and then waits for one it accepts):
/// "The total size of the response body can't exceed 4096 bytes."
pub const MAX_RESPONSE_BYTES: usize = 4096;
/// "PhysicalResourceId [...] can be up to 1 KB in size", CloudFormation says: a longer one is
/// shortened the same way every time (see [`bounded_physical_id`]).
pub const MAX_PHYSICAL_ID_BYTES: usize = 1024;
/// Bounds on the ids the answer echoes from the request (`StackId`, `RequestId`,
/// `LogicalResourceId`), in JSON bytes (escapes counted). CloudFormation's own are far shorter
/// (a stack ARN under 300 bytes, a UUID, a logical id of at most 255 characters), so only a
/// request that did not come from it is ever cut; with these the reason keeps about 900 bytes
/// whatever the request holds.
const MAX_ECHOED_BYTES: [usize; 3] = [1024, 512, 512];
/// Marks a cut reason or echo.
const ELLIPSIS: &str = "...";
/// Kept for the PUT when the work is cut short by the function's timeout: up to 3 attempts of
/// at most 10 s each would not fit, but one does with room, and a slow S3 is rare.
const ANSWER_MARGIN: Duration = Duration::from_secs(12);
/// Attempts at the PUT, 1 s then 2 s apart: a dropped connection must not hang the stack.
const PUT_ATTEMPTS: u32 = 3;
/// `DEMO_MANUAL_DIR`: where `DemoData: all` finds the PostgreSQL manual's html (absent in
/// Lambda unless a layer ships it; documents are then skipped, saying so).
pub const DEMO_MANUAL_DIR: &str = "DEMO_MANUAL_DIR";
/// `DEMO_MANUAL_PAGES`: pages of each of the manual's 8 parts `DemoData: all` embeds. The
/// whole manual (about 8,800 chunks) takes tens of minutes, past Lambda's 15; 10 pages a part
/// took a minute and a half on 2 cores with the built-in model (scripts/dev's default).
pub const DEMO_MANUAL_PAGES: &str = "DEMO_MANUAL_PAGES";
const DEFAULT_MANUAL_PAGES: u64 = 10;

/// A request that has at least a `RequestType` or a `ResponseURL`: one CloudFormation sent, or
/// meant to look like it; anything wrong with the rest is answered FAILED.
pub fn is_request(event: &Value) -> bool {
    event.get("RequestType").is_some() || event.get("ResponseURL").is_some()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestType {
    Create,
    Update,
    Delete,
}

/// `DemoData`: which demo domains to load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DemoData {
    None,
    /// The feedback and tasks domains.
    Demo,
    /// Also the documents domain, when the manual is there (`DEMO_MANUAL_DIR`).
    All,
}

/// What the template passes (`ResourceProperties`). An empty secret ARN skips that login.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Properties {
    pub mcp_secret: Option<String>,
    pub chat_secret: Option<String>,
    pub sql_secret: Option<String>,
    /// The ingest function's login (`parley_ingest_writer`).
    pub ingest_secret: Option<String>,
    /// The admin function's own routine login (`parley_admin_ops`), the secret its
    /// `ADMIN_ROUTINE_SECRET_ID` names.
    pub admin_secret: Option<String>,
    pub demo_data: DemoData,
}

/// The fields every answer echoes. Read leniently: a request missing one is still answered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Envelope {
    pub response_url: String,
    pub stack_id: String,
    pub request_id: String,
    pub logical_resource_id: String,
    pub physical_resource_id: Option<String>,
}

/// The response document CloudFormation reads from the PUT.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    pub status: Status,
    pub reason: String,
    pub physical_resource_id: String,
    pub stack_id: String,
    pub request_id: String,
    pub logical_resource_id: String,
    pub data: Map<String, Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Status {
    Success,
    Failed,
}

impl Envelope {
    pub fn parse(event: &Value) -> Envelope {
        let text = |key: &str| {
            event
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        Envelope {
            response_url: text("ResponseURL"),
            stack_id: text("StackId"),
            request_id: text("RequestId"),
            logical_resource_id: text("LogicalResourceId"),
            physical_resource_id: event
                .get("PhysicalResourceId")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
        }
    }
}

/// The request's type and properties, or why it cannot be acted on (the FAILED reason).
pub fn parse(event: &Value) -> Result<(RequestType, Properties), String> {
    let request_type = match event.get("RequestType").and_then(Value::as_str) {
        Some("Create") => RequestType::Create,
        Some("Update") => RequestType::Update,
        Some("Delete") => RequestType::Delete,
        Some(other) => {
            return Err(format!(
                "unknown RequestType `{other}`: expected Create, Update or Delete"
            ));
        }
        None => return Err("the request has no RequestType".into()),
    };
    for key in ["StackId", "RequestId", "LogicalResourceId"] {
        if event
            .get(key)
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(format!("the request has no {key}"));
        }
    }
    let props = event
        .get("ResourceProperties")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let secret = |key: &str| -> Result<Option<String>, String> {
        match props.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(format!(
                "ResourceProperties.{key} must be a string (a secret ARN, or empty to skip)"
            )),
        }
    };
    let demo_data = match props.get("DemoData") {
        None | Some(Value::Null) => DemoData::None,
        Some(Value::String(s)) => match s.as_str() {
            "none" | "" => DemoData::None,
            "demo" => DemoData::Demo,
            "all" => DemoData::All,
            other => {
                return Err(format!(
                    "ResourceProperties.DemoData is `{other}`: expected none, demo or all"
                ));
            }
        },
        Some(_) => return Err("ResourceProperties.DemoData must be none, demo or all".into()),
    };
    Ok((
        request_type,
        Properties {
            mcp_secret: secret("McpSecretArn")?,
            chat_secret: secret("ChatSecretArn")?,
            sql_secret: secret("SqlSecretArn")?,
            ingest_secret: secret("IngestSecretArn")?,
            admin_secret: secret("AdminSecretArn")?,
            demo_data,
        },
    ))
}

/// What a finished Create or Update did, or why it failed; the physical id when the database
/// is known.
struct Outcome {
    result: Result<Map<String, Value>, String>,
    physical_id: Option<String>,
}

/// Answers the request by PUT, whatever the work does: it runs in a task of its own (a panic
/// is a FAILED answer) under the function's time left minus [`ANSWER_MARGIN`] (a timeout is
/// one too). Returns the response sent, or an error when no PUT got through.
pub async fn handle(admin: &Admin, event: Value, time_left: Duration) -> Result<Value, AdminError> {
    let envelope = Envelope::parse(&event);
    let host = response_host(&envelope.response_url)?;
    let budget = time_left.saturating_sub(ANSWER_MARGIN);
    tracing::info!(
        time_left_ms = time_left.as_millis() as u64,
        budget_ms = budget.as_millis() as u64,
        "custom-resource request"
    );
    let mut work = {
        let admin = admin.clone();
        tokio::spawn(async move { act(&admin, &event).await })
    };
    let outcome = match tokio::time::timeout(budget, &mut work).await {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(join)) => Outcome {
            result: Err(format!("the admin function failed unexpectedly: {join}")),
            physical_id: None,
        },
        Err(_) => {
            // Stopped, not left running: Lambda freezes the instance after the answer and
            // would thaw a half-done Create inside the next invocation. Dropping its
            // connection makes Postgres roll back the transaction in flight.
            work.abort();
            Outcome {
                result: Err(format!(
                    "not done within the function's timeout (stopped {} s before it to answer); \
                     each migration commits on its own, so the database holds the ones that \
                     finished: raise the function's Timeout and deploy again",
                    ANSWER_MARGIN.as_secs()
                )),
                physical_id: None,
            }
        }
    };
    let response = respond(&envelope, outcome);
    match &response.status {
        Status::Success => {
            tracing::info!(physical_id = %response.physical_resource_id, "answering SUCCESS")
        }
        Status::Failed => tracing::warn!(reason = %response.reason, "answering FAILED"),
    }
    put(admin, &envelope.response_url, &host, &response).await?;
    Ok(serde_json::to_value(&response).unwrap_or_default())
}

/// The host of the ResponseURL, for logs and errors: the URL's query is a presigned
/// signature, so the URL itself is never logged.
fn response_host(url: &str) -> Result<String, AdminError> {
    let parsed = url::Url::parse(url).map_err(|e| AdminError::NoResponseUrl(e.to_string()))?;
    if !matches!(parsed.scheme(), "https" | "http") {
        return Err(AdminError::NoResponseUrl(format!(
            "scheme `{}`",
            parsed.scheme()
        )));
    }
    Ok(parsed.host_str().unwrap_or_default().to_owned())
}

/// The work of one request, never panicking out of the task on a bad event.
async fn act(admin: &Admin, event: &Value) -> Outcome {
    let (request_type, props) = match parse(event) {
        Ok(parsed) => parsed,
        Err(reason) => {
            return Outcome {
                result: Err(reason),
                physical_id: None,
            };
        }
    };
    if request_type == RequestType::Delete {
        // The database outlives the stack's resource: dropping it, or its roles, on a stack
        // delete (or on the Delete of a replaced resource) would lose the data.
        return Outcome {
            result: Ok(Map::new()),
            physical_id: None,
        };
    }
    let env = match admin.owner_env().await {
        Ok(env) => env,
        Err(e) => {
            return Outcome {
                result: Err(e.to_string()),
                physical_id: None,
            };
        }
    };
    let physical_id = physical_id(&env);
    let result = provision(&env, &props).await.map_err(|e| e.to_string());
    Outcome {
        result,
        physical_id,
    }
}

/// Create and Update alike, each step idempotent: the login secrets are read first (a wrong
/// ARN fails before anything changes), then migrations, demo data, and the logins last, so the
/// mcp login is granted the write roles the domains just made.
async fn provision(env: &Env, props: &Properties) -> Result<Map<String, Value>, CmdError> {
    let wanted = logins::resolve(
        &logins::Args {
            mcp_secret: props.mcp_secret.clone(),
            chat_secret: props.chat_secret.clone(),
            sql_secret: props.sql_secret.clone(),
            ingest_secret: props.ingest_secret.clone(),
            admin_secret: props.admin_secret.clone(),
            ..logins::Args::default()
        },
        env,
    )
    .await?;
    let applied = cmd::migrate::apply(env).await?;
    tracing::info!(applied = ?applied, "migrations done");
    let mut data = Map::new();
    data.insert("MigrationsApplied".into(), json!(applied.len().to_string()));
    data.insert(
        "LastMigrationApplied".into(),
        json!(applied.last().cloned().unwrap_or_default()),
    );
    let (domains, skipped) = demo_domains(env, props.demo_data)?;
    if !domains.is_empty() {
        let args = demo_data::Args {
            domains: domains.clone(),
            feedback: crate::demo::DemoOptions::default().feedback,
            seed: crate::demo::DemoOptions::default().seed,
            manual: env
                .get(DEMO_MANUAL_DIR)
                .unwrap_or(DEFAULT_MANUAL_DIR)
                .into(),
            pages_per_part: domains
                .contains(&Domain::Documents)
                .then(|| env.limit(DEMO_MANUAL_PAGES, DEFAULT_MANUAL_PAGES, 1..=100_000))
                .transpose()
                .map_err(CmdError::Settings)?
                .map(|n| n as usize),
        };
        let mut report = Vec::new();
        demo_data::run(args, env, &mut report).await?;
        for line in String::from_utf8_lossy(&report).lines() {
            tracing::info!("demo-data: {line}");
        }
    }
    let names: Vec<&str> = domains.iter().map(|d| d.name()).collect();
    data.insert("DemoDomains".into(), json!(names.join(",")));
    let done = logins::set_up(env, &wanted).await?;
    let mut warnings: Vec<String> = done.iter().flat_map(|d| d.warnings.clone()).collect();
    warnings.extend(skipped);
    for line in &done {
        tracing::info!("logins: {line}");
    }
    for warning in &warnings {
        tracing::warn!("{warning}");
    }
    let users: Vec<&str> = done.iter().map(|d| d.user.as_str()).collect();
    data.insert("Logins".into(), json!(users.join(",")));
    data.insert("Warnings".into(), json!(warnings.join(" | ")));
    Ok(data)
}

/// The domains `DemoData` asks for, and why any was left out.
fn demo_domains(env: &Env, demo: DemoData) -> Result<(Vec<Domain>, Vec<String>), CmdError> {
    let mut domains = match demo {
        DemoData::None => return Ok((Vec::new(), Vec::new())),
        DemoData::Demo | DemoData::All => Domain::DEFAULT.to_vec(),
    };
    let mut skipped = Vec::new();
    if demo == DemoData::All {
        let dir = env.get(DEMO_MANUAL_DIR).unwrap_or(DEFAULT_MANUAL_DIR);
        match parley_domain_documents::manual::check_dir(std::path::Path::new(dir)) {
            Ok(()) => domains.push(Domain::Documents),
            Err(_) => skipped.push(format!(
                "DemoData all: the documents domain was skipped, no PostgreSQL manual at {dir} \
                 ({DEMO_MANUAL_DIR})"
            )),
        }
    }
    Ok((domains, skipped))
}

/// `parley-db:<host>/<dbname>`: the same for every request on one database, so an Update
/// never looks like a replacement to CloudFormation.
pub fn physical_id(env: &Env) -> Option<String> {
    let url = url::Url::parse(env.get(crate::db::DATABASE_URL)?).ok()?;
    let host = url.host_str()?;
    let db = url.path().trim_start_matches('/');
    Some(format!("parley-db:{host}/{db}"))
}

/// `id` as sent: unchanged when it fits CloudFormation's 1 KB (every real one does: a host
/// name is at most 253 bytes and Postgres cuts a database name at 63), else its longest
/// prefix that fits with `~` and the first 16 hex digits of its SHA-256 after it. The same id
/// always gives the same answer (a changed id would make CloudFormation replace the resource
/// and Delete the old one), and two long ids that share the prefix still differ.
pub fn bounded_physical_id(id: &str) -> String {
    if json_bytes(id) <= MAX_PHYSICAL_ID_BYTES {
        return id.to_owned();
    }
    let digest = Sha256::digest(id.as_bytes());
    let suffix: String = std::iter::once("~".to_owned())
        .chain(digest[..8].iter().map(|b| format!("{b:02x}")))
        .collect();
    let prefix = json_prefix(id, MAX_PHYSICAL_ID_BYTES - suffix.len());
    format!("{prefix}{suffix}")
}

fn respond(envelope: &Envelope, outcome: Outcome) -> Response {
    // A Delete or failed Update keeps the id CloudFormation knows; a new id on a failed
    // Create would only be deleted again.
    let physical_resource_id = outcome
        .physical_id
        .or_else(|| envelope.physical_resource_id.clone())
        .unwrap_or_else(|| "parley-db:unknown".to_owned());
    let (status, reason, data) = match outcome.result {
        Ok(data) => (Status::Success, String::new(), data),
        Err(reason) => (Status::Failed, reason, Map::new()),
    };
    fit(Response {
        status,
        reason,
        physical_resource_id,
        stack_id: envelope.stack_id.clone(),
        request_id: envelope.request_id.clone(),
        logical_resource_id: envelope.logical_resource_id.clone(),
        data,
    })
}

/// The response cut to [`MAX_RESPONSE_BYTES`], whatever the request held. The physical id is
/// always bounded (so it is the same on every answer about one resource, long or short
/// reason); then, only as far as needed: `Data` goes, the echoed ids over their bounds are cut
/// (CloudFormation never sends such ids, so nothing it matches on is lost), and last the
/// reason is cut to the longest prefix whose JSON, escapes included, fits, ending "...".
pub fn fit(mut response: Response) -> Response {
    response.physical_resource_id = bounded_physical_id(&response.physical_resource_id);
    if size(&response) <= MAX_RESPONSE_BYTES {
        return response;
    }
    response.data.clear();
    let echoed = [
        &mut response.stack_id,
        &mut response.request_id,
        &mut response.logical_resource_id,
    ];
    for (field, max) in echoed.into_iter().zip(MAX_ECHOED_BYTES) {
        if json_bytes(field) > max {
            let kept = json_prefix(field, max - ELLIPSIS.len());
            *field = format!("{kept}{ELLIPSIS}");
        }
    }
    if size(&response) <= MAX_RESPONSE_BYTES {
        return response;
    }
    let full = std::mem::take(&mut response.reason);
    let room = MAX_RESPONSE_BYTES.saturating_sub(size(&response) + ELLIPSIS.len());
    let kept = json_prefix(&full, room);
    response.reason = format!("{kept}{ELLIPSIS}");
    response
}

/// The response's size as sent.
fn size(response: &Response) -> usize {
    serde_json::to_vec(response).map_or(usize::MAX, |v| v.len())
}

/// The bytes `text` takes inside a JSON string: quotes, backslashes and control characters
/// take two to six.
fn json_bytes(text: &str) -> usize {
    text.chars().map(json_char_bytes).sum()
}

fn json_char_bytes(c: char) -> usize {
    // serde_json's own escaping, so what is counted is what is sent.
    serde_json::to_string(&c).map_or(6, |quoted| quoted.len() - 2)
}

/// The longest prefix of `text` (at a character boundary) taking at most `max` bytes inside a
/// JSON string.
fn json_prefix(text: &str, max: usize) -> &str {
    let mut used = 0;
    for (at, c) in text.char_indices() {
        used += json_char_bytes(c);
        if used > max {
            return &text[..at];
        }
    }
    text
}

/// PUT of the response with no content type, as the presigned URL was signed for.
async fn put(admin: &Admin, url: &str, host: &str, response: &Response) -> Result<(), AdminError> {
    let body = serde_json::to_vec(response).unwrap_or_default();
    let mut last = String::new();
    for attempt in 1..=PUT_ATTEMPTS {
        if attempt > 1 {
            tokio::time::sleep(Duration::from_secs(1 << (attempt - 2))).await;
        }
        match admin.http.put(url).body(body.clone()).send().await {
            Ok(r) if r.status().is_success() => return Ok(()),
            // A 4xx (an expired or altered URL) will not improve with another try.
            Ok(r) if r.status().is_client_error() => {
                last = format!("HTTP {}", r.status());
                break;
            }
            Ok(r) => last = format!("HTTP {}", r.status()),
            // Without the URL (reqwest's message holds it, signature and all).
            Err(e) => last = parley_core::error::chain(&e.without_url()),
        }
        tracing::warn!(attempt, host, problem = %last, "the answer to CloudFormation did not go through");
    }
    Err(AdminError::Respond {
        host: host.to_owned(),
        reason: last,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(request_type: &str, props: Value) -> Value {
        json!({
            "RequestType": request_type,
            "ResponseURL": "https://cloudformation-custom-resource-response.s3.amazonaws.com/x?sig=1",
            "StackId": "arn:aws:cloudformation:eu-west-2:123456789012:stack/parley/1",
            "RequestId": "req-1",
            "LogicalResourceId": "Database",
            "ResourceType": "Custom::ParleyDatabase",
            "ResourceProperties": props,
        })
    }

    #[test]
    fn a_create_event_gives_its_secrets_and_demo_data_and_empty_or_absent_arns_skip_a_login() {
        let e = event(
            "Create",
            json!({"ServiceToken": "arn:x", "McpSecretArn": "arn:mcp",
            "ChatSecretArn": "", "SqlSecretArn": "arn:sql", "IngestSecretArn": "arn:ingest",
            "DemoData": "demo", "Version": "7"}),
        );
        let (kind, props) = parse(&e).unwrap();
        assert_eq!(kind, RequestType::Create);
        assert_eq!(
            props,
            Properties {
                mcp_secret: Some("arn:mcp".into()),
                chat_secret: None,
                sql_secret: Some("arn:sql".into()),
                ingest_secret: Some("arn:ingest".into()),
                admin_secret: None,
                demo_data: DemoData::Demo,
            }
        );
    }

    #[test]
    fn unknown_request_types_and_demo_data_values_are_refused_with_what_is_expected() {
        assert_eq!(
            parse(&event("Replace", json!({}))).unwrap_err(),
            "unknown RequestType `Replace`: expected Create, Update or Delete"
        );
        assert_eq!(
            parse(&event("Update", json!({"DemoData": "everything"}))).unwrap_err(),
            "ResourceProperties.DemoData is `everything`: expected none, demo or all"
        );
        assert_eq!(
            parse(&event("Create", json!({"McpSecretArn": 5}))).unwrap_err(),
            "ResourceProperties.McpSecretArn must be a string (a secret ARN, or empty to skip)"
        );
        let mut no_stack = event("Create", json!({}));
        no_stack.as_object_mut().unwrap().remove("StackId");
        assert_eq!(parse(&no_stack).unwrap_err(), "the request has no StackId");
    }

    #[test]
    fn the_response_has_the_fields_cloudformation_reads_and_echoes_the_request() {
        let mut e = event("Update", json!({}));
        e["PhysicalResourceId"] = json!("parley-db:old/parley");
        let envelope = Envelope::parse(&e);
        let response = respond(
            &envelope,
            Outcome {
                result: Ok(Map::from_iter([("Logins".to_owned(), json!("parley_mcp"))])),
                physical_id: Some("parley-db:db.internal/parley".into()),
            },
        );
        assert_eq!(
            serde_json::to_value(&response).unwrap(),
            json!({
                "Status": "SUCCESS",
                "Reason": "",
                "PhysicalResourceId": "parley-db:db.internal/parley",
                "StackId": "arn:aws:cloudformation:eu-west-2:123456789012:stack/parley/1",
                "RequestId": "req-1",
                "LogicalResourceId": "Database",
                "Data": {"Logins": "parley_mcp"},
            })
        );
        let failed = respond(
            &envelope,
            Outcome {
                result: Err("boom".into()),
                physical_id: None,
            },
        );
        assert_eq!(failed.status, Status::Failed);
        assert_eq!(
            failed.physical_resource_id, "parley-db:old/parley",
            "the known id is kept"
        );
    }

    #[test]
    fn a_long_reason_is_cut_to_cloudformations_4_kb_with_escapes_counted() {
        let envelope = Envelope::parse(&event("Create", json!({})));
        // Quotes double in JSON and "é" is 2 bytes: the cut must count what is sent.
        let reason = "relation \"x\" é ".repeat(1000);
        let response = respond(
            &envelope,
            Outcome {
                result: Err(reason.clone()),
                physical_id: None,
            },
        );
        let sent = serde_json::to_vec(&response).unwrap();
        assert!(sent.len() <= MAX_RESPONSE_BYTES, "{} bytes", sent.len());
        assert!(
            sent.len() > MAX_RESPONSE_BYTES - 16,
            "cut no more than needed: {}",
            sent.len()
        );
        assert!(response.reason.ends_with("..."));
        assert!(reason.starts_with(response.reason.trim_end_matches("...")));
    }

    #[test]
    fn the_response_fits_whatever_the_request_holds() {
        // Nothing CloudFormation sends, but an event can hold it: every echoed field far past
        // the limit, with quotes and control characters that grow when escaped.
        let long = |what: &str, n: usize| format!("{what}\"\u{1}é").repeat(n);
        let mut e = event("Update", json!({}));
        e["StackId"] = json!(long("arn:aws:cloudformation:stack/", 700));
        e["RequestId"] = json!(long("req", 3000));
        e["LogicalResourceId"] = json!(long("Database", 2000));
        e["PhysicalResourceId"] = json!(long("parley-db:host/db", 1000));
        let envelope = Envelope::parse(&e);
        for result in [
            Err(long("relation x ", 1000)),
            Ok(Map::from_iter([(
                "Warnings".to_owned(),
                json!(long("w", 5000)),
            )])),
        ] {
            let failed = result.is_err();
            let response = respond(
                &envelope,
                Outcome {
                    result,
                    physical_id: None,
                },
            );
            let sent = serde_json::to_vec(&response).unwrap();
            assert!(sent.len() <= MAX_RESPONSE_BYTES, "{} bytes", sent.len());
            assert!(json_bytes(&response.physical_resource_id) <= MAX_PHYSICAL_ID_BYTES);
            assert!(
                envelope
                    .stack_id
                    .starts_with(response.stack_id.trim_end_matches("..."))
            );
            if failed {
                assert!(
                    json_bytes(&response.reason) > 800,
                    "the reason keeps room: {}",
                    response.reason
                );
            }
        }
    }

    #[test]
    fn a_long_physical_id_is_shortened_the_same_way_every_time_and_a_real_one_is_kept() {
        let real = "parley-db:parley-db.cluster-abc123.eu-west-2.rds.amazonaws.com/parley";
        assert_eq!(bounded_physical_id(real), real);
        let long = format!("parley-db:{}/parley", "h".repeat(2000));
        let bounded = bounded_physical_id(&long);
        assert!(bounded.len() <= MAX_PHYSICAL_ID_BYTES, "{}", bounded.len());
        assert_eq!(bounded, bounded_physical_id(&long), "stable");
        assert_eq!(
            bounded,
            bounded_physical_id(&bounded),
            "an id it gave is kept"
        );
        let other = format!("parley-db:{}/other", "h".repeat(2000));
        assert_ne!(
            bounded_physical_id(&other),
            bounded,
            "the digest tells them apart"
        );
        // Whatever the reason's length, one resource keeps one id: the Update that fails with
        // a long message answers the id its Create did.
        let envelope = Envelope::parse(&event("Update", json!({})));
        let with = |result| {
            respond(
                &envelope,
                Outcome {
                    result,
                    physical_id: Some(long.clone()),
                },
            )
            .physical_resource_id
        };
        assert_eq!(with(Ok(Map::new())), with(Err("x".repeat(10_000))));
    }

    #[test]
    fn the_physical_id_names_the_host_and_database_and_never_the_credentials() {
        let env = Env::from_pairs([(
            "DATABASE_URL",
            "postgres://u:secret@db.internal:5432/parley?sslmode=verify-full",
        )]);
        assert_eq!(
            physical_id(&env).as_deref(),
            Some("parley-db:db.internal/parley")
        );
    }

    #[test]
    fn events_that_are_neither_kind_are_not_requests() {
        assert!(is_request(&json!({"RequestType": "Create"})));
        assert!(!is_request(&json!({"command": ["audit"]})));
    }
}
