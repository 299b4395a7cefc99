//! The pin lint: statements RDS Proxy documents as pinning a session, found in the statement
//! log of a private server ([`StatementLog`]).
//!
//! RDS Proxy pins a client connection to one database connection, for as long as the client
//! stays connected, when it sees a statement change session state; PgBouncer, which the other
//! tests use, does not, so only the statements themselves can show it here. The server logs
//! every statement (`log_statement = all`, as JSON lines), and [`triggers`] names what in one
//! of them is a documented trigger (docs/rds-proxy.md, read strictly): `SET` in any form,
//! `RESET`, `set_config`, `DISCARD`, SQL-level `PREPARE`/`EXECUTE`/`DEALLOCATE`, session
//! advisory lock functions, `LISTEN`, temporary tables, holdable cursors, `currval`/`lastval`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::cluster::TestCluster;

/// The logging collector writes JSON lines to `log/statements.json` in the data directory
/// (a `.log` file name becomes `.json` for `jsonlog`), every statement, never rotated.
const CONF: &str = "logging_collector = on\n\
                    log_destination = 'jsonlog'\n\
                    log_directory = 'log'\n\
                    log_filename = 'statements.log'\n\
                    log_rotation_age = 0\n\
                    log_rotation_size = 0\n\
                    log_statement = 'all'\n";

/// How long a statement may take to reach the log file after it ran.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(15);

/// One statement a client sent, as the server logged it.
#[derive(Debug, Clone)]
pub struct Logged {
    /// `application_name` when it ran: which function sent it (`parley-chat`, `parley-mcp`,
    /// `parley-ingest`; `parley request=<id>` inside a tool call).
    pub application: String,
    pub user: String,
    pub statement: String,
}

/// A logged statement with what in it pins a session.
#[derive(Debug, Clone)]
pub struct Finding {
    pub logged: Logged,
    pub triggers: Vec<&'static str>,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text: String = self.logged.statement.chars().take(300).collect();
        write!(
            f,
            "[{}] {} (as {}, from {})",
            self.triggers.join(", "),
            text.split_whitespace().collect::<Vec<_>>().join(" "),
            self.logged.user,
            self.logged.application
        )
    }
}

/// A private Postgres server that logs every statement, for the lint. Dropping it stops the
/// server.
#[derive(Debug)]
pub struct StatementLog {
    cluster: TestCluster,
}

impl Default for StatementLog {
    fn default() -> Self {
        Self::start()
    }
}

impl StatementLog {
    pub fn start() -> StatementLog {
        StatementLog {
            cluster: TestCluster::start_with_conf(CONF),
        }
    }

    /// The superuser URL of the server (for [`crate::TestDb::migrated_on`] and friends).
    pub fn url(&self) -> String {
        self.cluster.url()
    }

    fn file(&self) -> PathBuf {
        self.cluster.data_dir().join("log/statements.json")
    }

    /// Every statement logged so far whose `application_name` starts with one of
    /// `applications`. Waits until a marker sent now has reached the file, so nothing sent
    /// before the call is missed.
    pub async fn statements(&self, applications: &[&str]) -> Vec<Logged> {
        let marker = format!("pin-lint flush {}", uuid::Uuid::new_v4().simple());
        let client = crate::connect(&self.url()).await;
        client
            .batch_execute(&format!("SELECT '{marker}'"))
            .await
            .expect("marker statement");
        let deadline = Instant::now() + FLUSH_TIMEOUT;
        let text = loop {
            let text = std::fs::read_to_string(self.file()).unwrap_or_default();
            if text.contains(&marker) {
                break text;
            }
            assert!(
                Instant::now() < deadline,
                "the statement log {} did not show the marker within {FLUSH_TIMEOUT:?}",
                self.file().display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        text.lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter_map(|record| logged(&record))
            .filter(|l| applications.iter().any(|a| l.application.starts_with(a)))
            .collect()
    }

    /// The statements of [`StatementLog::statements`] that pin a session.
    pub async fn findings(&self, applications: &[&str]) -> Vec<Finding> {
        self.statements(applications)
            .await
            .into_iter()
            .filter_map(|logged| {
                let triggers = triggers(&logged.statement);
                (!triggers.is_empty()).then_some(Finding { logged, triggers })
            })
            .collect()
    }
}

/// A `log_statement` record's statement: `statement: <text>` for the simple protocol,
/// `execute <name>: <text>` for the extended one.
fn logged(record: &Value) -> Option<Logged> {
    let message = record["message"].as_str()?;
    let statement = if let Some(text) = message.strip_prefix("statement: ") {
        text
    } else if message.starts_with("execute ") {
        message.split_once(": ")?.1
    } else {
        return None;
    };
    Some(Logged {
        application: record["application_name"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        user: record["user"].as_str().unwrap_or_default().to_owned(),
        statement: statement.to_owned(),
    })
}

/// What in `sql` (one message: one statement, or several separated by `;`) RDS Proxy
/// documents as pinning a session, read strictly; empty when nothing does. Comments and
/// string literals are skipped, so a title such as 'SET TRANSACTION' in a literal is not one.
pub fn triggers(sql: &str) -> Vec<&'static str> {
    let code = code_only(sql).to_lowercase();
    let mut found = Vec::new();
    let mut add = |name: &'static str| {
        if !found.contains(&name) {
            found.push(name);
        }
    };
    for statement in code.split(';') {
        let words: Vec<&str> = statement.split_whitespace().collect();
        match words.first().copied() {
            Some("set") => add("SET"),
            Some("reset") => add("RESET"),
            Some("discard") => add("DISCARD"),
            Some("prepare") => add("PREPARE"),
            Some("execute") => add("EXECUTE"),
            Some("deallocate") => add("DEALLOCATE"),
            Some("listen") | Some("unlisten") => add("LISTEN"),
            Some("declare") if statement.contains(" with hold") => add("holdable cursor"),
            _ => {}
        }
        let temp_table = words.windows(2).any(|w| {
            matches!(w[0], "temp" | "temporary") && matches!(w[1], "table" | "sequence" | "view")
        }) || words.windows(2).any(|w| w == ["create", "temp"]);
        if temp_table {
            add("temporary table");
        }
    }
    let calls = |name: &str| {
        code.match_indices(name).any(|(i, _)| {
            let before = code[..i].chars().next_back();
            let after = code[i + name.len()..].trim_start();
            !before.is_some_and(|c| c.is_alphanumeric() || c == '_') && after.starts_with('(')
        })
    };
    if calls("set_config") {
        add("set_config");
    }
    for lock in [
        "pg_advisory_lock",
        "pg_advisory_lock_shared",
        "pg_try_advisory_lock",
        "pg_try_advisory_lock_shared",
        "pg_advisory_unlock",
        "pg_advisory_unlock_shared",
        "pg_advisory_unlock_all",
    ] {
        if calls(lock) {
            add("session advisory lock");
        }
    }
    if calls("currval") || calls("lastval") {
        add("currval/lastval");
    }
    found
}

/// `sql` with comments and string literals (quoted, `E''`, dollar-quoted) replaced by a space
/// and quoted identifiers kept as they are.
fn code_only(sql: &str) -> String {
    let chars: Vec<char> = sql.chars().collect();
    let mut out = String::with_capacity(sql.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '-' && next == Some('-') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            out.push(' ');
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == '\'' {
            let escapes = matches!(out.chars().next_back(), Some('e' | 'E'));
            i += 1;
            while i < chars.len() {
                let escaped = escapes && chars[i] == '\\';
                let doubled = chars[i] == '\'' && chars.get(i + 1) == Some(&'\'');
                if escaped || doubled {
                    i += 2;
                } else if chars[i] == '\'' {
                    i += 1;
                    break;
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == '$' && !out.chars().next_back().is_some_and(is_word) {
            // `$tag$ ... $tag$` (tag possibly empty); `$1` is a placeholder, kept.
            let tag_end = chars[i + 1..]
                .iter()
                .position(|&ch| !is_word(ch))
                .map(|p| i + 1 + p);
            match tag_end {
                Some(end) if chars[end] == '$' && !chars[i + 1].is_ascii_digit() => {
                    let tag: String = chars[i..=end].iter().collect();
                    let rest: String = chars[end + 1..].iter().collect();
                    let skip = rest.find(&tag).map_or(rest.len(), |p| p + tag.len());
                    i = end + 1 + rest[..skip].chars().count();
                    out.push(' ');
                }
                _ => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

#[cfg(test)]
mod tests {
    use super::triggers;

    #[test]
    fn every_documented_trigger_is_named() {
        for (sql, trigger) in [
            ("SET work_mem = '1MB'", "SET"),
            ("BEGIN; SET LOCAL statement_timeout = 5000", "SET"),
            ("set local role \"reader\"", "SET"),
            ("SET CONSTRAINTS ALL IMMEDIATE; RESET ALL", "RESET"),
            ("SELECT set_config('parley.caller', $1, true)", "set_config"),
            (
                "SELECT pg_catalog.set_config ('a.b', 'c', false)",
                "set_config",
            ),
            ("DISCARD ALL", "DISCARD"),
            ("PREPARE q AS SELECT 1", "PREPARE"),
            ("EXECUTE q", "EXECUTE"),
            ("DEALLOCATE ALL", "DEALLOCATE"),
            ("SELECT pg_advisory_lock(1)", "session advisory lock"),
            ("SELECT pg_advisory_unlock_all()", "session advisory lock"),
            ("SELECT pg_try_advisory_lock(1, 2)", "session advisory lock"),
            ("LISTEN jobs", "LISTEN"),
            ("CREATE TEMP TABLE t (a int)", "temporary table"),
            ("SELECT 1 INTO TEMPORARY TABLE t", "temporary table"),
            ("DECLARE c CURSOR WITH HOLD FOR SELECT 1", "holdable cursor"),
            ("SELECT currval('s')", "currval/lastval"),
        ] {
            assert!(
                triggers(sql).contains(&trigger),
                "{sql}: {:?}",
                triggers(sql)
            );
        }
    }

    #[test]
    fn what_stays_in_its_transaction_or_only_looks_like_a_trigger_is_not_one() {
        for sql in [
            "BEGIN READ ONLY",
            "SELECT parley.begin_call($1, $2, $3, $4, $5)",
            "SELECT parley.end_call()",
            "UPDATE chat.conversations SET turn_lease = NULL WHERE id = $1",
            "INSERT INTO t VALUES (1) ON CONFLICT (id) DO UPDATE SET a = excluded.a",
            "SELECT pg_advisory_xact_lock($1)",
            "SELECT 'SET work_mem = 1' AS title, E'it\\'s; RESET' AS b",
            "/* SET x */ SELECT 1 -- DISCARD ALL\n",
            "SELECT $q$ ; SET role $q$, $1, offset_config FROM t OFFSET 5",
            "COMMIT",
        ] {
            assert!(triggers(sql).is_empty(), "{sql}: {:?}", triggers(sql));
        }
    }
}
