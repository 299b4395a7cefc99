//! `parley logins`: creates or updates the functions' login roles in the database in
//! `DATABASE_URL`, each from a Secrets Manager secret (`{"username", "password", ...}`, as the
//! template generates) or from a user name plus a password in the environment.

use parley_core::config::Env;
use parley_core::secrets;
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;

use super::{CmdError, Out};
use crate::logins::{self, Kind, Login};

/// Where `--mcp-user`'s password is read from (and likewise for the others): a password on
/// the command line would sit in the shell's history and the process list.
pub const MCP_PASSWORD: &str = "PARLEY_MCP_PASSWORD";
pub const CHAT_PASSWORD: &str = "PARLEY_CHAT_PASSWORD";
pub const SQL_PASSWORD: &str = "PARLEY_SQL_PASSWORD";
pub const INGEST_PASSWORD: &str = "PARLEY_INGEST_PASSWORD";
pub const ADMIN_PASSWORD: &str = "PARLEY_ADMIN_PASSWORD";

#[derive(Debug, Default, clap::Args)]
#[command(after_help = "\
Each login comes from a secret (--X-secret: its `username` and `password`) or from --X-user with
the password in PARLEY_MCP_PASSWORD, PARLEY_CHAT_PASSWORD, PARLEY_SQL_PASSWORD,
PARLEY_INGEST_PASSWORD or PARLEY_ADMIN_PASSWORD. A role that exists gets the new password and its
grants; one that is a superuser, may create roles or is the role running this is refused. mcp: in
parley_readonly, default_transaction_read_only on, and every domain write role (a NOLOGIN member
of parley_tool_writer with a table grant in this database) WITH INHERIT FALSE, SET TRUE, so run
it again after loading a domain. chat: in parley_chat_writer. sql: in parley_sql_reader,
read-only by default, CONNECTION LIMIT 40, temp_file_limit 256MB (a superuser setting: run by a
role that is not one, as on RDS and Aurora, it is left to the server's parameter group, saying
so). The SQL tools' schema grants are the domain's (see docs/sql.md). ingest: the ingest
function's, in parley_ingest_writer (the documents tables only). admin: the admin function's
routine work (sync, collections, enroll, audit), in parley_admin_ops.")]
#[command(group = clap::ArgGroup::new("logins").required(true).multiple(true))]
pub struct Args {
    /// The mcp function's login, from this secret (name or ARN).
    #[arg(long, value_name = "ID", group = "logins", conflicts_with = "mcp_user")]
    pub mcp_secret: Option<String>,
    /// The chat function's login, from this secret (name or ARN).
    #[arg(
        long,
        value_name = "ID",
        group = "logins",
        conflicts_with = "chat_user"
    )]
    pub chat_secret: Option<String>,
    /// The SQL tools' login (SQL_DATABASE_URL), from this secret (name or ARN).
    #[arg(long, value_name = "ID", group = "logins", conflicts_with = "sql_user")]
    pub sql_secret: Option<String>,
    /// The ingest function's login, from this secret (name or ARN).
    #[arg(
        long,
        value_name = "ID",
        group = "logins",
        conflicts_with = "ingest_user"
    )]
    pub ingest_secret: Option<String>,
    /// The admin function's routine login (ADMIN_ROUTINE_SECRET_ID), from this secret (name or
    /// ARN).
    #[arg(
        long,
        value_name = "ID",
        group = "logins",
        conflicts_with = "admin_user"
    )]
    pub admin_secret: Option<String>,
    /// The mcp function's login, this user with the password in PARLEY_MCP_PASSWORD.
    #[arg(long, value_name = "NAME", group = "logins")]
    pub mcp_user: Option<String>,
    /// The chat function's login, this user with the password in PARLEY_CHAT_PASSWORD.
    #[arg(long, value_name = "NAME", group = "logins")]
    pub chat_user: Option<String>,
    /// The SQL tools' login, this user with the password in PARLEY_SQL_PASSWORD.
    #[arg(long, value_name = "NAME", group = "logins")]
    pub sql_user: Option<String>,
    /// The ingest function's login, this user with the password in PARLEY_INGEST_PASSWORD.
    #[arg(long, value_name = "NAME", group = "logins")]
    pub ingest_user: Option<String>,
    /// The admin function's routine login, this user with the password in
    /// PARLEY_ADMIN_PASSWORD.
    #[arg(long, value_name = "NAME", group = "logins")]
    pub admin_user: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error(transparent)]
    Fetch(#[from] secrets::SecretsError),
    // Only the position of a parse error: serde's messages may quote the text.
    #[error("secret {id} is not a JSON object with `username` and `password` ({problem})")]
    Shape { id: String, problem: String },
    #[error("--{kind}-user needs the password in {var}, which is not set")]
    NoPassword {
        kind: &'static str,
        var: &'static str,
    },
}

pub async fn run(args: Args, env: &Env, out: &mut Out) -> Result<(), CmdError> {
    let wanted = resolve(&args, env).await?;
    for done in set_up(env, &wanted).await? {
        writeln!(out, "{done}")?;
        for warning in &done.warnings {
            writeln!(out, "warning: {warning}")?;
        }
    }
    Ok(())
}

/// The logins `args` name, their secrets read and checked; nothing is connected to yet.
pub async fn resolve(args: &Args, env: &Env) -> Result<Vec<Login>, CmdError> {
    let mut wanted = Vec::new();
    let sources = [
        (Kind::Mcp, &args.mcp_secret, &args.mcp_user, MCP_PASSWORD),
        (
            Kind::Chat,
            &args.chat_secret,
            &args.chat_user,
            CHAT_PASSWORD,
        ),
        (Kind::Sql, &args.sql_secret, &args.sql_user, SQL_PASSWORD),
        (
            Kind::Ingest,
            &args.ingest_secret,
            &args.ingest_user,
            INGEST_PASSWORD,
        ),
        (
            Kind::Admin,
            &args.admin_secret,
            &args.admin_user,
            ADMIN_PASSWORD,
        ),
    ];
    for (kind, secret, user, var) in sources {
        if let Some(id) = secret.as_deref().filter(|id| !id.is_empty()) {
            wanted.push(from_secret(kind, env, id).await?);
        } else if let Some(user) = user {
            let password = env.secret(var).ok_or(SourceError::NoPassword {
                kind: kind.name(),
                var,
            })?;
            wanted.push(Login::new(kind, user, password)?);
        }
    }
    Ok(wanted)
}

/// Connects with `env`'s `DATABASE_URL` and sets the logins up.
pub async fn set_up(env: &Env, wanted: &[Login]) -> Result<Vec<logins::Done>, CmdError> {
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    let mut client = crate::db::connect(env).await?;
    Ok(logins::apply(&mut client, wanted).await?)
}

/// A login from a secret's `username` and `password` (its other keys, `host`, `dbname`..., are
/// for the functions that log in with it).
async fn from_secret(kind: Kind, env: &Env, id: &str) -> Result<Login, CmdError> {
    let text = secrets::fetch(env, id).await.map_err(SourceError::from)?;
    let shape = |problem: String| SourceError::Shape {
        id: id.to_owned(),
        problem,
    };
    let json: Value = serde_json::from_str(text.expose_secret()).map_err(|e| {
        shape(format!(
            "not JSON at line {}, column {}",
            e.line(),
            e.column()
        ))
    })?;
    let field = |key: &str| match json.get(key) {
        Some(Value::String(s)) => Ok(s.as_str()),
        _ => Err(shape(format!("no string `{key}`"))),
    };
    let user = field("username")?;
    let password = SecretString::from(field("password")?.to_owned());
    Ok(Login::new(kind, user, password)?)
}
