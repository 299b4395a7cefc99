//! The functions' login roles, made as docs/deploy-reference.md ("The roles"), docs/sql.md and
//! migration 0025 describe: created when missing, else given the new password, then granted
//! their group.
//! Passwords are sent as SCRAM verifiers, never as text, and never reach an error or the output.

use std::fmt;

use parley_core::db::pg_message;
use secrecy::{ExposeSecret, SecretString};
use tokio_postgres::types::Type;
use tokio_postgres::{Client, Transaction};

/// Serialises role set-up on a server: roles are cluster-wide, and two stacks (or a deploy and
/// a person) on one server must not interleave their grants. ASCII "parleylg".
const LOCK_KEY: i64 = 0x7061_726c_6579_6c67;

/// The `temp_file_limit` docs/sql.md gives the SQL tools' role: bounds a spilled sort on disk.
pub const SQL_TEMP_FILE_LIMIT: &str = "256MB";
/// The `CONNECTION LIMIT` docs/sql.md gives it: each mcp instance keeps up to
/// `SQL_POOL_MAX_SIZE` connections (the template sets 1), so 40 is `Scale=team`'s 40 mcp
/// instances; behind RDS Proxy (`Scale=production`) it bounds the proxy's connections for it.
pub const SQL_CONNECTION_LIMIT: i32 = 40;

/// Which function a login is for; each kind has its group and settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The mcp function: `parley_readonly`, read-only by default, may switch to the write roles.
    Mcp,
    /// The chat function: `parley_chat_writer`.
    Chat,
    /// The mcp function's SQL tools (`SQL_DATABASE_URL`): `parley_sql_reader` and nothing else.
    Sql,
    /// The ingest function: `parley_ingest_writer`, the documents tables and nothing else.
    Ingest,
    /// The admin function's routine work (`ADMIN_ROUTINE_SECRET_ID`: sync, collections,
    /// enroll, audit): `parley_admin_ops`.
    Admin,
}

impl Kind {
    pub fn group(self) -> &'static str {
        match self {
            Kind::Mcp => "parley_readonly",
            Kind::Chat => "parley_chat_writer",
            Kind::Sql => "parley_sql_reader",
            Kind::Ingest => "parley_ingest_writer",
            Kind::Admin => "parley_admin_ops",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Mcp => "mcp",
            Kind::Chat => "chat",
            Kind::Sql => "sql",
            Kind::Ingest => "ingest",
            Kind::Admin => "admin",
        }
    }
}

/// One login to set up: its kind, user name and password. Debug shows no password.
pub struct Login {
    pub kind: Kind,
    pub user: String,
    pub password: SecretString,
}

impl fmt::Debug for Login {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Login")
            .field("kind", &self.kind)
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// What set-up did to one login, for the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Done {
    pub kind: Kind,
    pub user: String,
    pub created: bool,
    /// Write roles the mcp login may now switch to (`SET ROLE`), by name.
    pub switches_to: Vec<String>,
    /// What could not be set, each with the statement a superuser must run.
    pub warnings: Vec<String>,
}

impl fmt::Display for Done {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verb = if self.created {
            "created"
        } else {
            "password set"
        };
        write!(
            f,
            "{} ({}): {verb}, in {}",
            self.user,
            self.kind.name(),
            self.kind.group()
        )?;
        if !self.switches_to.is_empty() {
            write!(f, "; may switch to {}", self.switches_to.join(", "))?;
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    #[error("the {kind} login's user name {problem}")]
    BadUser { kind: &'static str, problem: String },
    #[error("the {kind} login's password is empty")]
    EmptyPassword { kind: &'static str },
    #[error("refusing to make {user} the {kind} login: {why}")]
    Refused {
        kind: &'static str,
        user: String,
        why: &'static str,
    },
    #[error("role {0} does not exist: run `parley migrate` first")]
    NotMigrated(&'static str),
    #[error("setting up the {kind} login {user}: {step} failed: {}", pg_message(.source))]
    Postgres {
        kind: &'static str,
        user: String,
        step: &'static str,
        #[source]
        source: tokio_postgres::Error,
    },
}

impl LoginError {
    /// A mistake in what was asked for, as opposed to a database that refused.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            LoginError::BadUser { .. } | LoginError::EmptyPassword { .. }
        )
    }
}

impl Login {
    /// Checks what can be checked before connecting: Postgres' 63-byte names, and no `pg_`
    /// prefix (reserved for its own roles).
    pub fn new(kind: Kind, user: &str, password: SecretString) -> Result<Login, LoginError> {
        let bad = |problem: &str| LoginError::BadUser {
            kind: kind.name(),
            problem: problem.to_owned(),
        };
        if user.is_empty() {
            return Err(bad("is empty"));
        }
        if user.len() > 63 {
            return Err(bad("is longer than Postgres' 63 bytes"));
        }
        if user.starts_with("pg_") || user.contains('\0') {
            return Err(bad("may not start with pg_ or hold a NUL"));
        }
        if password.expose_secret().is_empty() {
            return Err(LoginError::EmptyPassword { kind: kind.name() });
        }
        Ok(Login {
            kind,
            user: user.to_owned(),
            password,
        })
    }
}

/// Sets up each login in its own transaction (all of a login's changes or none), under the
/// role lock. Stops at the first failure; the logins before it stay done.
pub async fn apply(client: &mut Client, logins: &[Login]) -> Result<Vec<Done>, LoginError> {
    let mut done = Vec::with_capacity(logins.len());
    for login in logins {
        done.push(apply_one(client, login).await?);
    }
    Ok(done)
}

async fn apply_one(client: &mut Client, login: &Login) -> Result<Done, LoginError> {
    let kind = login.kind.name();
    let pg = |step: &'static str| {
        move |source| LoginError::Postgres {
            kind,
            user: login.user.clone(),
            step,
            source,
        }
    };
    let tx = parley_core::db::locked_transaction(client, LOCK_KEY)
        .await
        .map_err(|e| pg(e.step)(e.source))?;
    let group_exists: bool = tx
        .query_typed_one(
            "SELECT to_regrole($1) IS NOT NULL",
            &[(&login.kind.group(), Type::TEXT)],
        )
        .await
        .map_err(pg("looking up the group"))?
        .get(0);
    if !group_exists {
        return Err(LoginError::NotMigrated(login.kind.group()));
    }
    let existing = tx
        .query_typed_opt(
            "SELECT rolsuper OR rolcreaterole OR rolcreatedb OR rolreplication OR rolbypassrls,
                    rolname = current_user
               FROM pg_catalog.pg_roles WHERE rolname = $1",
            &[(&login.user, Type::TEXT)],
        )
        .await
        .map_err(pg("looking up the role"))?;
    if let Some(row) = &existing {
        let refuse = |why| LoginError::Refused {
            kind,
            user: login.user.clone(),
            why,
        };
        // Giving the master's password away, or a function logging in with rights to change
        // roles or skip row security, would undo what the roles are for.
        if row.get::<_, bool>(1) {
            return Err(refuse("it is the role running this set-up"));
        }
        if row.get::<_, bool>(0) {
            return Err(refuse(
                "it is a superuser or may create roles or databases, replicate or bypass row security",
            ));
        }
    }
    // A SCRAM-SHA-256 verifier, as psql's \password sends: the text of the statement (which a
    // server with log_statement = ddl logs) never holds the password itself.
    let verifier =
        postgres_protocol::password::scram_sha_256(login.password.expose_secret().as_bytes());
    let create = existing.is_none();
    let statement = if create {
        "CREATE ROLE %I LOGIN PASSWORD %L"
    } else {
        "ALTER ROLE %I LOGIN PASSWORD %L"
    };
    execute(&tx, statement, &login.user, Some(&verifier))
        .await
        .map_err(pg(if create {
            "creating the role"
        } else {
            "setting the password"
        }))?;
    execute(
        &tx,
        &format!("GRANT {} TO %I", login.kind.group()),
        &login.user,
        None,
    )
    .await
    .map_err(pg("granting the group"))?;
    let mut switches_to = Vec::new();
    let mut warnings = Vec::new();
    // The tools' logins (mcp, SQL) read only by default; a write tool opens its own READ WRITE
    // transaction.
    if matches!(login.kind, Kind::Mcp | Kind::Sql) {
        execute(
            &tx,
            "ALTER ROLE %I SET default_transaction_read_only = on",
            &login.user,
            None,
        )
        .await
        .map_err(pg("making it read-only by default"))?;
    }
    match login.kind {
        Kind::Chat => {}
        Kind::Mcp => {
            // The domains' write roles (`NOLOGIN IN ROLE parley_tool_writer`, e.g. the tasks
            // domain's parley_tasks_writer) that may write a table of this database (roles
            // are cluster-wide; another database's domains are not this one's): SET but not
            // INHERIT, so the login writes only inside a write tool's `SET LOCAL ROLE`.
            let writers = tx
                .query_typed(
                    "SELECT r.rolname FROM pg_catalog.pg_auth_members m
                       JOIN pg_catalog.pg_roles r ON r.oid = m.member
                      WHERE m.roleid = 'parley_tool_writer'::regrole AND NOT r.rolcanlogin
                        AND EXISTS (SELECT FROM pg_catalog.pg_class c,
                                                LATERAL pg_catalog.aclexplode(c.relacl) a
                                     WHERE a.grantee = r.oid)
                      ORDER BY r.rolname",
                    &[],
                )
                .await
                .map_err(pg("listing the write roles"))?;
            for row in writers {
                let writer: String = row.get(0);
                let sql = format!(
                    "GRANT {} TO %I WITH INHERIT FALSE, SET TRUE",
                    quote_ident(&writer)
                );
                execute(&tx, &sql, &login.user, None)
                    .await
                    .map_err(pg("granting a write role"))?;
                switches_to.push(writer);
            }
        }
        Kind::Sql => {
            execute(
                &tx,
                &format!("ALTER ROLE %I CONNECTION LIMIT {SQL_CONNECTION_LIMIT}"),
                &login.user,
                None,
            )
            .await
            .map_err(pg("limiting its connections"))?;
            // temp_file_limit is a superuser setting: a managed server's master (RDS and
            // Aurora's: NOSUPERUSER CREATEROLE, in rds_superuser) may not put it on a role.
            // Asked first rather than tried: a refused ALTER ROLE would abort the transaction
            // and log an ERROR on every deploy. Such a server sets it for every session in its
            // parameter group instead (the template's cluster parameter group does), which the
            // mcp function's start-up check accepts as well.
            if may_set_temp_file_limit(&tx)
                .await
                .map_err(pg("checking who may set temp_file_limit"))?
            {
                let sql = format!("ALTER ROLE %I SET temp_file_limit = '{SQL_TEMP_FILE_LIMIT}'");
                execute(&tx, &sql, &login.user, None)
                    .await
                    .map_err(pg("setting temp_file_limit"))?;
            } else {
                warnings.push(format!(
                    "{}: temp_file_limit not set on the role, because the role running this set-up \
                     is not a superuser (as on RDS and Aurora); the server's parameter group must \
                     set it (the template's cluster parameter group sets \
                     {SQL_TEMP_FILE_LIMIT}), or as a superuser run: ALTER ROLE {} SET \
                     temp_file_limit = '{SQL_TEMP_FILE_LIMIT}'",
                    login.user,
                    quote_ident(&login.user)
                ));
            }
        }
        Kind::Ingest | Kind::Admin => {}
    }
    tx.commit().await.map_err(pg("committing"))?;
    Ok(Done {
        kind: login.kind,
        user: login.user.clone(),
        created: create,
        switches_to,
        warnings,
    })
}

/// Whether the role running the set-up may put `temp_file_limit` on a role: a superuser, or
/// (Postgres 15 and later) one granted `SET` on the parameter.
async fn may_set_temp_file_limit(tx: &Transaction<'_>) -> Result<bool, tokio_postgres::Error> {
    let row = tx
        .query_typed_one(
            "SELECT rolsuper, current_setting('server_version_num')::int >= 150000
               FROM pg_catalog.pg_roles WHERE rolname = current_user",
            &[],
        )
        .await?;
    let (superuser, has_parameter_grants): (bool, bool) = (row.get(0), row.get(1));
    if superuser || !has_parameter_grants {
        return Ok(superuser);
    }
    // A separate statement: the function does not exist before 15, and a statement naming it
    // would not parse there.
    Ok(tx
        .query_typed_one(
            "SELECT pg_catalog.has_parameter_privilege('temp_file_limit', 'SET')",
            &[],
        )
        .await?
        .get(0))
}

/// Runs `template` with `%I` the user and `%L` the literal, quoted by Postgres' own `format`:
/// role DDL takes no parameters, so the values go through `format`'s quoting, never pasted.
async fn execute(
    tx: &Transaction<'_>,
    template: &str,
    user: &str,
    literal: Option<&str>,
) -> Result<(), tokio_postgres::Error> {
    let row = tx
        .query_typed_one(
            "SELECT format($1, $2::text, $3::text)",
            &[
                (&template, Type::TEXT),
                (&user, Type::TEXT),
                (&literal, Type::TEXT),
            ],
        )
        .await?;
    let statement: String = row.get(0);
    tx.batch_execute(&statement).await
}

/// `"name"` with inner quotes doubled: for names read back from the catalog.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(s: &str) -> SecretString {
        SecretString::from(s.to_owned())
    }

    #[test]
    fn user_names_postgres_would_refuse_or_reserves_are_refused_before_connecting() {
        for (user, problem) in [
            ("", "is empty"),
            ("pg_monitor", "may not start with pg_ or hold a NUL"),
            (&"x".repeat(64), "is longer than Postgres' 63 bytes"),
        ] {
            let e = Login::new(Kind::Mcp, user, secret("pw")).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("the mcp login's user name {problem}")
            );
            assert!(e.is_usage());
        }
        assert!(Login::new(Kind::Sql, "Odd \"name\"", secret("pw")).is_ok());
    }

    #[test]
    fn an_empty_password_is_refused_and_debug_never_shows_one() {
        let e = Login::new(Kind::Chat, "parley_chat", secret("")).unwrap_err();
        assert_eq!(e.to_string(), "the chat login's password is empty");
        let login = Login::new(Kind::Chat, "parley_chat", secret("hunter2")).unwrap();
        assert!(!format!("{login:?}").contains("hunter2"));
    }

    #[test]
    fn catalog_names_are_quoted_with_inner_quotes_doubled() {
        assert_eq!(
            quote_ident("parley_tasks_writer"),
            "\"parley_tasks_writer\""
        );
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
    }
}
