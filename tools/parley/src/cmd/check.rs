//! `parley check [URL]`: a stack checked as a person would use it, over HTTP only, after
//! `sam deploy` or against `scripts/dev`: the page, sign-in, a turn, the mcp function's
//! refusal of anonymous calls, its tools, documents search, the streamed turn and the ad-hoc
//! SQL tools. One line per check says what was seen, and a failure says what to change.
//!
//! It reaches only what any caller can reach (no database, no AWS API), and leaves nothing
//! behind but audit records: the conversations of its own turns are deleted again. The checks
//! are plain functions over a [`Target`] ([`check_stack`]), so tests call them as the command does.

mod http;
mod mcp;
mod page;
mod turn;

use std::time::Duration;

use parley_core::config::{Env, SecretString};
use serde::Serialize;

use super::{CmdError, Out};

/// The chat `scripts/dev` serves: the URL when none is given.
pub const DEFAULT_URL: &str = "http://127.0.0.1:3000/";
/// The mcp function `scripts/dev` serves, checked when no URL is given.
pub const DEFAULT_LOCAL_MCP_URL: &str = "http://127.0.0.1:3001/mcp";
/// Each check's time limit unless `--timeout` says otherwise: a turn with a real model and a
/// few tool calls, plus a cold start after a deploy (up to 20 s, docs/deploy.md "7. Ask").
pub const DEFAULT_TIMEOUT_SECS: u64 = 60;
/// Where the signed-in user's token comes from when `--token` is not given.
pub const USER_TOKEN_SETTING: &str = "PARLEY_USER_TOKEN";
/// Where the mcp function's service token comes from when `--mcp-token` is not given: the
/// setting's own name, as the app secret holds it.
pub const MCP_TOKEN_SETTING: &str = "MCP_AUTH_TOKEN";

#[derive(Debug, clap::Args)]
#[command(
    about = "Check a running stack as a user would (the page, sign-in, a turn, the mcp \
             function's refusal of anonymous calls, its tools, documents search, streaming, \
             the SQL tools); one line per check with the fix for each failure",
    after_help = "\
Checks, in order: page (GET the page, each asset it references and /api/page; a
Content-Security-Policy on the page), sign-in (the provider's discovery document, when the
page signs people in), turn (POST api/chat answered), mcp-auth (POST /mcp without credentials,
and with a forged caller assertion, answered 401), tools (tools/list), documents (the search
tool answers), stream (POST api/chat with Accept: text/event-stream at the page's stream_url,
else its own origin: the first byte must arrive before the turn ends), sql (run_sql SELECT 1
when the ad-hoc SQL tools are served).

A check that cannot run says why and is skipped (no token for a chat that asks for one, no
such tools served). The exit status is 1 when any check fails, 0 otherwise.

Tokens: a signed-in user's access token for the chat with --token or PARLEY_USER_TOKEN (needed
when the chat asks for sign-in; docs/deploy.md \"7. Ask\" shows where to copy one), the mcp
function's service token with --mcp-token or MCP_AUTH_TOKEN (the app secret's; without it the
user's token is tried). Prefer the variables: a command line is visible to other users."
)]
pub struct Args {
    /// The stack's page URL: the ApiUrl output after `sam deploy` [default: scripts/dev's
    /// chat, http://127.0.0.1:3000/].
    #[arg(value_name = "URL")]
    pub url: Option<String>,
    /// The mcp function's URL [default: <URL>mcp, where template.yaml routes it; without URL,
    /// scripts/dev's http://127.0.0.1:3001/mcp].
    #[arg(long, value_name = "URL")]
    pub mcp: Option<String>,
    /// A signed-in user's bearer token for the chat [default: PARLEY_USER_TOKEN].
    #[arg(long, value_name = "TOKEN")]
    pub token: Option<String>,
    /// The mcp function's service token [default: MCP_AUTH_TOKEN].
    #[arg(long, value_name = "TOKEN")]
    pub mcp_token: Option<String>,
    /// Each check's time limit, in seconds: a check without its answer by then fails.
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_TIMEOUT_SECS,
          value_parser = clap::value_parser!(u64).range(1..=900))]
    pub timeout: u64,
    /// A JSON array of {check, status, detail, fix} instead of lines.
    #[arg(long)]
    pub json: bool,
}

/// What the checks are pointed at, parsed from the arguments and settings.
#[derive(Debug, Clone)]
pub struct Target {
    /// The page's URL, its path ending in `/` (the page's own links are relative to it).
    pub page: url::Url,
    pub mcp: McpUrl,
    /// The signed-in user's token for the chat (and for the mcp function without
    /// `mcp_token`).
    pub user_token: Option<SecretString>,
    pub mcp_token: Option<SecretString>,
    /// Each check's time limit.
    pub timeout: Duration,
}

/// Where the mcp function is, and how that was learnt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpUrl {
    /// Named by `--mcp`, or scripts/dev's when no URL was given: it must answer.
    Given(url::Url),
    /// `<page>mcp`, where template.yaml routes it beside the page: a 404 there means this
    /// stack serves it elsewhere, and the checks that need it are skipped.
    BesideThePage(url::Url),
}

impl McpUrl {
    pub fn url(&self) -> &url::Url {
        match self {
            McpUrl::Given(url) | McpUrl::BesideThePage(url) => url,
        }
    }
}

impl Target {
    /// The target the arguments name; `env` supplies the tokens the flags leave out.
    pub fn from_args(args: &Args, env: &Env) -> Result<Target, CmdError> {
        let page = page_url(args.url.as_deref().unwrap_or(DEFAULT_URL))?;
        let mcp = match (&args.mcp, &args.url) {
            (Some(raw), _) => McpUrl::Given(http_url("--mcp", raw)?),
            (None, None) => McpUrl::Given(http_url("--mcp", DEFAULT_LOCAL_MCP_URL)?),
            (None, Some(_)) => McpUrl::BesideThePage(
                page.join("mcp")
                    .map_err(|e| CmdError::Usage(format!("URL: {e}")))?,
            ),
        };
        let token = |flag: &Option<String>, setting: &str| {
            flag.as_deref()
                .or_else(|| env.get(setting))
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(|t| SecretString::from(t.to_owned()))
        };
        Ok(Target {
            page,
            mcp,
            user_token: token(&args.token, USER_TOKEN_SETTING),
            mcp_token: token(&args.mcp_token, MCP_TOKEN_SETTING),
            timeout: Duration::from_secs(args.timeout),
        })
    }
}

/// An absolute http(s) URL, or a usage error naming `what`.
fn http_url(what: &str, raw: &str) -> Result<url::Url, CmdError> {
    let url = url::Url::parse(raw.trim()).map_err(|e| {
        CmdError::Usage(format!(
            "{what} must be an absolute http(s) URL such as {DEFAULT_URL}: {e}"
        ))
    })?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(CmdError::Usage(format!(
            "{what} must be an http(s) URL with a host, not {raw}"
        )));
    }
    Ok(url)
}

/// The page's URL with its path ending in `/`: the stack's `ApiUrl` ends so, and the page's
/// assets and API are relative to it.
fn page_url(raw: &str) -> Result<url::Url, CmdError> {
    let mut url = http_url("URL", raw)?;
    url.set_query(None);
    url.set_fragment(None);
    if !url.path().ends_with('/') {
        let path = format!("{}/", url.path());
        url.set_path(&path);
    }
    Ok(url)
}

/// The checks, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    Page,
    SignIn,
    Turn,
    McpAuth,
    Tools,
    Documents,
    Stream,
    Sql,
}

impl Check {
    pub const ALL: [Check; 8] = [
        Check::Page,
        Check::SignIn,
        Check::Turn,
        Check::McpAuth,
        Check::Tools,
        Check::Documents,
        Check::Stream,
        Check::Sql,
    ];

    /// The name printed and in the JSON's `check`.
    pub fn name(self) -> &'static str {
        match self {
            Check::Page => "page",
            Check::SignIn => "sign-in",
            Check::Turn => "turn",
            Check::McpAuth => "mcp-auth",
            Check::Tools => "tools",
            Check::Documents => "documents",
            Check::Stream => "stream",
            Check::Sql => "sql",
        }
    }
}

impl Serialize for Check {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Fail,
    Skip,
}

impl Status {
    /// As the line starts: failures stand out.
    fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Fail => "FAIL",
            Status::Skip => "skip",
        }
    }
}

/// One check's result: what was seen and, for a failure, what to change.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    pub check: Check,
    pub status: Status,
    pub detail: String,
    pub fix: Option<String>,
}

impl Outcome {
    pub fn ok(check: Check, detail: impl Into<String>) -> Outcome {
        Outcome {
            check,
            status: Status::Ok,
            detail: detail.into(),
            fix: None,
        }
    }

    pub fn fail(check: Check, detail: impl Into<String>, fix: impl Into<String>) -> Outcome {
        Outcome {
            check,
            status: Status::Fail,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    /// A check that could not run here, with why (never a failure).
    pub fn skip(check: Check, why: impl Into<String>) -> Outcome {
        Outcome {
            check,
            status: Status::Skip,
            detail: why.into(),
            fix: None,
        }
    }
}

/// What earlier checks learnt that later ones need.
#[derive(Debug)]
struct Seen {
    /// `GET api/page`, once the page check read it.
    config: Option<page::PageConfig>,
    /// The mcp function, once it answered as one; else why it is not known.
    mcp: Result<url::Url, String>,
    /// The tools it listed; else why they are not known.
    tools: Result<Vec<mcp::Tool>, String>,
}

impl Default for Seen {
    fn default() -> Self {
        Seen {
            config: None,
            mcp: Err("the mcp function was not reached (see mcp-auth)".into()),
            tools: Err("the tools were not listed (see tools)".into()),
        }
    }
}

/// Runs every check against `target`, in order, each within `target.timeout`.
pub async fn check_stack(target: &Target) -> Vec<Outcome> {
    let probe = match http::Probe::new(target) {
        Ok(probe) => probe,
        Err(why) => {
            return Check::ALL
                .iter()
                .map(|&c| Outcome::fail(c, why.clone(), http::CLIENT_FIX))
                .collect();
        }
    };
    let mut seen = Seen::default();
    let mut outcomes = Vec::with_capacity(Check::ALL.len());
    for check in Check::ALL {
        let run = async {
            match check {
                Check::Page => page::page(&probe, &mut seen).await,
                Check::SignIn => page::sign_in(&probe, &seen).await,
                Check::Turn => turn::turn(&probe).await,
                Check::McpAuth => mcp::refusal(&probe, &mut seen).await,
                Check::Tools => mcp::tools(&probe, &mut seen).await,
                Check::Documents => mcp::documents(&probe, &seen).await,
                Check::Stream => turn::stream(&probe, &seen).await,
                Check::Sql => mcp::sql(&probe, &seen).await,
            }
        };
        let outcome = match tokio::time::timeout(target.timeout, run).await {
            Ok(outcome) => outcome,
            Err(_) => Outcome::fail(
                check,
                format!(
                    "no answer within {} s (--timeout)",
                    target.timeout.as_secs()
                ),
                "The first requests after a deploy include cold starts and a paused database \
                 resuming (up to 20 s, docs/deploy.md \"7. Ask\"): run parley check again; if it \
                 still times out, raise --timeout or follow docs/deploy-reference.md \"When \
                 something is wrong\" with the function's log.",
            ),
        };
        outcomes.push(outcome);
    }
    outcomes
}

/// Why `parley check` exits non-zero.
#[derive(Debug, thiserror::Error)]
#[error("{failed} of {total} checks failed")]
pub struct ChecksFailed {
    pub failed: usize,
    pub total: usize,
}

pub async fn run(args: Args, env: &Env, out: &mut Out) -> Result<(), CmdError> {
    let target = Target::from_args(&args, env)?;
    let outcomes = check_stack(&target).await;
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &outcomes).map_err(std::io::Error::from)?;
        writeln!(out)?;
    } else {
        write_lines(&outcomes, out)?;
    }
    let failed = outcomes.iter().filter(|o| o.status == Status::Fail).count();
    if failed > 0 {
        return Err(CmdError::Check(ChecksFailed {
            failed,
            total: outcomes.len(),
        }));
    }
    Ok(())
}

/// One line per check (`ok    page       what was seen`), the fix indented under a failure,
/// then the counts.
pub fn write_lines(outcomes: &[Outcome], out: &mut Out) -> std::io::Result<()> {
    let width = Check::ALL.iter().map(|c| c.name().len()).max().unwrap_or(0);
    for o in outcomes {
        writeln!(
            out,
            "{:<4}  {:<width$}  {}",
            o.status.label(),
            o.check.name(),
            one_line(&o.detail)
        )?;
        if let Some(fix) = &o.fix {
            writeln!(out, "{:<4}  {:<width$}  fix: {}", "", "", one_line(fix))?;
        }
    }
    let count = |s: Status| outcomes.iter().filter(|o| o.status == s).count();
    writeln!(
        out,
        "{} checks: {} ok, {} failed, {} skipped",
        outcomes.len(),
        count(Status::Ok),
        count(Status::Fail),
        count(Status::Skip)
    )
}

/// `1 row`, `3 rows`.
fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Text from a server shown on one line: control characters (a hostile or broken answer's
/// newlines, escapes) become spaces.
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(url: Option<&str>, mcp: Option<&str>) -> Args {
        Args {
            url: url.map(str::to_owned),
            mcp: mcp.map(str::to_owned),
            token: None,
            mcp_token: None,
            timeout: DEFAULT_TIMEOUT_SECS,
            json: false,
        }
    }

    #[test]
    fn without_a_url_the_local_stack_of_scripts_dev_is_checked() {
        let target =
            Target::from_args(&args(None, None), &Env::from_pairs::<&str, &str>([])).unwrap();
        assert_eq!(target.page.as_str(), "http://127.0.0.1:3000/");
        assert_eq!(
            target.mcp,
            McpUrl::Given(url::Url::parse("http://127.0.0.1:3001/mcp").unwrap())
        );
        assert!(target.user_token.is_none() && target.mcp_token.is_none());
    }

    #[test]
    fn a_deployed_pages_mcp_is_looked_for_beside_it_and_its_path_ends_in_a_slash() {
        let env = Env::from_pairs([("MCP_AUTH_TOKEN", "s3cret"), ("PARLEY_USER_TOKEN", " ")]);
        let target = Target::from_args(
            &args(
                Some("https://abc.execute-api.eu-west-1.amazonaws.com/prod"),
                None,
            ),
            &env,
        )
        .unwrap();
        assert_eq!(
            target.page.as_str(),
            "https://abc.execute-api.eu-west-1.amazonaws.com/prod/"
        );
        assert_eq!(
            target.mcp.url().as_str(),
            "https://abc.execute-api.eu-west-1.amazonaws.com/prod/mcp"
        );
        assert!(matches!(target.mcp, McpUrl::BesideThePage(_)));
        assert!(target.mcp_token.is_some(), "MCP_AUTH_TOKEN is read");
        assert!(target.user_token.is_none(), "a blank setting is no token");
    }

    #[test]
    fn urls_that_are_not_http_are_usage_errors_naming_the_argument() {
        for (url, mcp, says) in [
            (Some("127.0.0.1:3000"), None, "URL"),
            (Some("ftp://host/"), None, "URL"),
            (None, Some("/mcp"), "--mcp"),
        ] {
            let e =
                Target::from_args(&args(url, mcp), &Env::from_pairs::<&str, &str>([])).unwrap_err();
            assert!(
                matches!(&e, CmdError::Usage(m) if m.starts_with(says)),
                "{e}"
            );
        }
    }

    #[test]
    fn lines_name_each_check_and_put_the_fix_under_a_failure() {
        let outcomes = vec![
            Outcome::ok(Check::Page, "loaded"),
            Outcome::fail(Check::Turn, "the model key is missing", "Set LLM_API_KEY."),
            Outcome::skip(Check::Sql, "no SQL tools\nserved"),
        ];
        let mut out = Vec::new();
        write_lines(&outcomes, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "ok    page       loaded\n\
             FAIL  turn       the model key is missing\n\
             \x20                fix: Set LLM_API_KEY.\n\
             skip  sql        no SQL tools served\n\
             3 checks: 1 ok, 1 failed, 1 skipped\n"
        );
        let json = serde_json::to_value(&outcomes).unwrap();
        assert_eq!(
            json[1],
            serde_json::json!({"check": "turn", "status": "fail",
                "detail": "the model key is missing", "fix": "Set LLM_API_KEY."})
        );
        assert_eq!(json[2]["fix"], serde_json::Value::Null);
    }
}
