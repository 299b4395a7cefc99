//! `parley collections`: the document collections with their counts, model, size and readers;
//! `parley collections set NAME --public|--private`, who may read one; and `parley collections
//! remove NAME`, which deletes one with its documents, chunks and memberships in one
//! transaction after the person types its name (or `--yes`).

use std::io::{BufRead, IsTerminal, Write};

use chrono::{DateTime, SecondsFormat, Utc};
use parley_core::config::Env;
use parley_core::db::pg_message;
use serde_json::{Value, json};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;
use tokio_postgres::{GenericClient, Row};

use super::table::{aligned, cut, one_line};
use super::{CmdError, Out};

#[derive(Debug, clap::Args)]
#[command(
    args_conflicts_with_subcommands = true,
    after_help = "\
Columns: name, title, documents, chunks, the model the chunks were embedded with, size, public
(readable by every caller) and readers (groups and users enrolled, `parley enroll`).

Size is an estimate of the collection's rows: the sum of pg_column_size over its documents,
sections and chunks, as Postgres stores them (compressed, vectors included), without indexes
(the HNSW and full-text indexes), page overhead or free space. --json gives it in bytes."
)]
pub struct Args {
    #[command(subcommand)]
    pub action: Option<Action>,
    /// One JSON object per line with every field, for `jq`.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Subcommand)]
pub enum Action {
    /// Make a collection readable by every caller (--public) or by its readers only
    /// (--private), as `parley ingest --public` and `_collection.json` do.
    Set(SetArgs),
    /// Delete a collection with its documents, chunks and readers, in one transaction.
    Remove(RemoveArgs),
}

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("who").required(true).args(["public", "private"])))]
pub struct SetArgs {
    /// The collection (as given to `parley ingest --collection`).
    #[arg(value_name = "NAME")]
    pub name: String,
    /// Readable by every caller: every signed-in user, and the service token.
    #[arg(long)]
    pub public: bool,
    /// Readable only by the groups and users enrolled in it (`parley enroll`).
    #[arg(long)]
    pub private: bool,
}

#[derive(Debug, clap::Args)]
pub struct RemoveArgs {
    /// The collection (as given to `parley ingest --collection`).
    #[arg(value_name = "NAME")]
    pub name: String,
    /// Remove without asking. Without it, the name must be typed again on a terminal.
    #[arg(long)]
    pub yes: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum CollectionsError {
    #[error("{0}: no collection by that name; `parley collections` lists them")]
    Unknown(String),
    #[error(
        "removing {0} asks for its name to be typed again, and standard input is not a terminal: \
         add --yes to remove it without asking"
    )]
    NotATerminal(String),
    #[error("{0} was not removed: the name typed did not match")]
    NotConfirmed(String),
    #[error("reading the confirmation failed: {0}")]
    Confirm(#[source] std::io::Error),
    #[error("the database has no documents tables; run `parley migrate` first")]
    NotMigrated,
    #[error("{step}: {}", pg_message(source))]
    Postgres {
        step: &'static str,
        #[source]
        source: tokio_postgres::Error,
    },
}

impl CollectionsError {
    /// A mistake in what was asked, as opposed to a failure while doing it.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            CollectionsError::Unknown(_) | CollectionsError::NotATerminal(_)
        )
    }
}

fn pg(step: &'static str) -> impl FnOnce(tokio_postgres::Error) -> CollectionsError {
    move |source| match source.code() {
        Some(&SqlState::UNDEFINED_TABLE) => CollectionsError::NotMigrated,
        _ => CollectionsError::Postgres { step, source },
    }
}

/// One collection as listed.
#[derive(Debug, Clone, PartialEq)]
pub struct Listed {
    pub name: String,
    pub title: String,
    pub description: Option<String>,
    pub public: bool,
    pub model: String,
    pub dims: i32,
    pub documents: i64,
    pub chunks: i64,
    /// The estimate the help describes: rows' stored bytes, no indexes.
    pub bytes: i64,
    pub groups: Vec<String>,
    pub users: Vec<String>,
    pub updated_at: DateTime<Utc>,
}

// Subqueries per collection rather than joins: each is served by a collection_id index
// (migration 0004) and no join multiplies the counts.
const LIST: &str = "
SELECT c.name, c.title, c.description, c.public, c.embedding_model, c.embedding_dims, c.updated_at,
       (SELECT count(*) FROM parley.documents d WHERE d.collection_id = c.id) AS documents,
       (SELECT count(*) FROM parley.chunks k WHERE k.collection_id = c.id) AS chunks,
       (coalesce((SELECT sum(pg_column_size(d.*)) FROM parley.documents d WHERE d.collection_id = c.id), 0)
      + coalesce((SELECT sum(pg_column_size(s.*)) FROM parley.sections s WHERE s.collection_id = c.id), 0)
      + coalesce((SELECT sum(pg_column_size(k.*)) FROM parley.chunks k WHERE k.collection_id = c.id), 0)
       )::bigint AS bytes,
       coalesce((SELECT array_agg(m.principal ORDER BY m.principal) FROM parley.memberships m
                  WHERE m.collection_id = c.id AND m.kind = 'group'), '{}') AS groups,
       coalesce((SELECT array_agg(m.principal ORDER BY m.principal) FROM parley.memberships m
                  WHERE m.collection_id = c.id AND m.kind = 'user'), '{}') AS users
  FROM parley.collections c
 WHERE $1::text IS NULL OR c.name = $1
 ORDER BY c.name";

/// The collections, by name; only `name` when given (an unknown one is an error naming it).
pub async fn list(
    db: &impl GenericClient,
    name: Option<&str>,
) -> Result<Vec<Listed>, CollectionsError> {
    let rows = db
        .query_typed(LIST, &[(&name, Type::TEXT)])
        .await
        .map_err(pg("listing the collections"))?;
    if let (Some(name), true) = (name, rows.is_empty()) {
        return Err(CollectionsError::Unknown(name.to_owned()));
    }
    Ok(rows.iter().map(listed).collect())
}

fn listed(row: &Row) -> Listed {
    Listed {
        name: row.get("name"),
        title: row.get("title"),
        description: row.get("description"),
        public: row.get("public"),
        model: row.get("embedding_model"),
        dims: row.get("embedding_dims"),
        documents: row.get("documents"),
        chunks: row.get("chunks"),
        bytes: row.get("bytes"),
        groups: row.get("groups"),
        users: row.get("users"),
        updated_at: row.get("updated_at"),
    }
}

impl Listed {
    pub fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "public": self.public,
            "model": self.model,
            "dims": self.dims,
            "documents": self.documents,
            "chunks": self.chunks,
            "bytes": self.bytes,
            "groups": self.groups,
            "users": self.users,
            "updated_at": self.updated_at.to_rfc3339_opts(SecondsFormat::Secs, true),
        })
    }

    /// Its readers in one cell: `group:staff, user:alice`.
    pub fn readers(&self) -> String {
        let groups = self.groups.iter().map(|g| format!("group:{}", one_line(g)));
        let users = self.users.iter().map(|u| format!("user:{}", one_line(u)));
        groups.chain(users).collect::<Vec<_>>().join(", ")
    }
}

/// A title longer than this ends in an ellipsis in the table (`--json` has it whole).
const TITLE_CHARS: usize = 40;

fn table(collections: &[Listed]) -> String {
    let header = [
        "name",
        "title",
        "documents",
        "chunks",
        "model",
        "size",
        "public",
        "readers",
    ];
    let lines: Vec<Vec<String>> = std::iter::once(header.map(str::to_owned).to_vec())
        .chain(collections.iter().map(|c| {
            vec![
                c.name.clone(),
                cut(&one_line(&c.title), TITLE_CHARS),
                c.documents.to_string(),
                c.chunks.to_string(),
                one_line(&c.model),
                size(c.bytes),
                if c.public { "yes" } else { "no" }.to_owned(),
                c.readers(),
            ]
        }))
        .collect();
    aligned(
        &lines,
        &[false, false, true, true, false, true, false, false],
    )
}

/// Bytes in binary units with one decimal, the precision a person reads.
pub fn size(bytes: i64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// A collection made public or private: whether it was already, and how many readers it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Visibility {
    pub was_public: bool,
    pub readers: i64,
}

/// Makes the collection `name` readable by every caller (`public`) or by its members only, in
/// one statement: the row lock orders it with a concurrent removal or ingest. A collection
/// already so is left as it is (its `updated_at` too).
pub async fn set_public(
    db: &impl GenericClient,
    name: &str,
    public: bool,
) -> Result<Visibility, CollectionsError> {
    let row = db
        .query_typed_opt(
            "WITH target AS (
                 SELECT id, public FROM parley.collections WHERE name = $1 FOR UPDATE
             ), changed AS (
                 UPDATE parley.collections c SET public = $2, updated_at = now()
                   FROM target WHERE c.id = target.id AND target.public <> $2
             )
             SELECT target.public,
                    (SELECT count(*) FROM parley.memberships m WHERE m.collection_id = target.id)
               FROM target",
            &[(&name, Type::TEXT), (&public, Type::BOOL)],
        )
        .await
        .map_err(pg("changing who may read the collection"))?
        .ok_or_else(|| CollectionsError::Unknown(name.to_owned()))?;
    Ok(Visibility {
        was_public: row.get(0),
        readers: row.get(1),
    })
}

/// What `set` says it did.
fn visibility_line(name: &str, public: bool, done: Visibility) -> String {
    let now = if done.was_public == public {
        "already"
    } else {
        "now"
    };
    match (public, done.readers) {
        (true, _) => format!("{name} is {now} public: every caller may search and read it"),
        (false, 0) => format!(
            "{name} is {now} private: nobody is enrolled in it, so no caller may search it \
             until `parley enroll --collection {name}` adds readers"
        ),
        (false, n) => format!(
            "{name} is {now} private: only its {n} readers (groups and users enrolled) may \
             search and read it"
        ),
    }
}

/// What a removal deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Removed {
    pub documents: i64,
    pub chunks: i64,
    pub readers: i64,
}

/// Deletes the collection `name` with everything under it, in one transaction: a search sees
/// the whole collection or none of it. The row lock makes a concurrent removal or enrollment
/// wait, so the counts are what was deleted.
pub async fn remove(
    db: &mut tokio_postgres::Client,
    name: &str,
) -> Result<Removed, CollectionsError> {
    let tx = db
        .transaction()
        .await
        .map_err(pg("starting the transaction"))?;
    let found = tx
        .query_typed_opt(
            "SELECT id FROM parley.collections WHERE name = $1 FOR UPDATE",
            &[(&name, Type::TEXT)],
        )
        .await
        .map_err(pg("finding the collection"))?;
    let Some(row) = found else {
        return Err(CollectionsError::Unknown(name.to_owned()));
    };
    let id: i64 = row.get(0);
    let counts = tx
        .query_typed_one(
            "SELECT (SELECT count(*) FROM parley.documents WHERE collection_id = $1),
                    (SELECT count(*) FROM parley.chunks WHERE collection_id = $1),
                    (SELECT count(*) FROM parley.memberships WHERE collection_id = $1)",
            &[(&id, Type::INT8)],
        )
        .await
        .map_err(pg("counting what the collection holds"))?;
    // Documents, sections, chunks and memberships go with it (ON DELETE CASCADE, 0004).
    tx.execute_typed(
        "DELETE FROM parley.collections WHERE id = $1",
        &[(&id, Type::INT8)],
    )
    .await
    .map_err(pg("deleting the collection"))?;
    tx.commit().await.map_err(pg("committing the removal"))?;
    Ok(Removed {
        documents: counts.get(0),
        chunks: counts.get(1),
        readers: counts.get(2),
    })
}

/// Asks for `name` to be typed on `prompt` and reads the answer from `input`: only the exact
/// name confirms (a stray Enter or `y` does not remove a course).
pub fn confirm(
    name: &str,
    listed: &Listed,
    input: &mut impl BufRead,
    prompt: &mut impl Write,
) -> Result<(), CollectionsError> {
    write!(
        prompt,
        "This deletes {name} ({}): {} documents, {} chunks, {} readers. Type its name to remove it: ",
        one_line(&listed.title),
        listed.documents,
        listed.chunks,
        listed.groups.len() + listed.users.len()
    )
    .and_then(|()| prompt.flush())
    .map_err(CollectionsError::Confirm)?;
    let mut typed = String::new();
    input
        .read_line(&mut typed)
        .map_err(CollectionsError::Confirm)?;
    if typed.trim() == name {
        Ok(())
    } else {
        Err(CollectionsError::NotConfirmed(name.to_owned()))
    }
}

pub async fn run(args: Args, env: &Env, out: &mut Out) -> Result<(), CmdError> {
    match args.action {
        None => {
            let client = crate::db::connect(env).await?;
            let collections = list(&client, None).await?;
            let text = if args.json {
                collections
                    .iter()
                    .map(|c| format!("{}\n", c.to_json()))
                    .collect()
            } else if collections.is_empty() {
                "no collections; `parley ingest` makes one\n".to_owned()
            } else {
                table(&collections)
            };
            out.write_all(text.as_bytes())?;
        }
        Some(Action::Set(set)) => {
            let client = crate::db::connect(env).await?;
            let done = set_public(&client, &set.name, set.public).await?;
            writeln!(out, "{}", visibility_line(&set.name, set.public, done))?;
        }
        Some(Action::Remove(remove_args)) => {
            let name = remove_args.name;
            // Refused before connecting: a script without --yes learns it at once.
            let stdin = std::io::stdin();
            if !remove_args.yes && !stdin.is_terminal() {
                return Err(CollectionsError::NotATerminal(name).into());
            }
            let mut client = crate::db::connect(env).await?;
            if !remove_args.yes {
                let listed = list(&client, Some(&name)).await?;
                confirm(&name, &listed[0], &mut stdin.lock(), &mut std::io::stderr())?;
            }
            let removed = remove(&mut client, &name).await?;
            writeln!(
                out,
                "removed {name}: {} documents, {} chunks, {} readers",
                removed.documents, removed.chunks, removed.readers
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn course() -> Listed {
        Listed {
            name: "course-1".into(),
            title: "Course\n1".into(),
            description: None,
            public: false,
            model: "all-MiniLM-L6-v2".into(),
            dims: 384,
            documents: 2,
            chunks: 5,
            bytes: 3 * 1024 * 1024 + 200 * 1024,
            groups: vec!["staff".into()],
            users: vec!["student-1".into()],
            updated_at: DateTime::parse_from_rfc3339("2026-11-27T08:00:00Z")
                .unwrap()
                .to_utc(),
        }
    }

    #[test]
    fn only_the_exact_name_typed_confirms_a_removal() {
        let mut prompt = Vec::new();
        let ok = confirm("course-1", &course(), &mut &b"course-1\n"[..], &mut prompt);
        assert!(ok.is_ok());
        assert_eq!(
            String::from_utf8(prompt).unwrap(),
            "This deletes course-1 (Course 1): 2 documents, 5 chunks, 2 readers. \
             Type its name to remove it: "
        );
        for typed in ["y\n", "\n", "", "course-2\n", "COURSE-1\n"] {
            let refused = confirm(
                "course-1",
                &course(),
                &mut typed.as_bytes(),
                &mut Vec::new(),
            );
            assert!(
                matches!(refused, Err(CollectionsError::NotConfirmed(_))),
                "{typed:?}"
            );
        }
    }

    #[test]
    fn the_table_shows_counts_size_and_readers_one_collection_a_line() {
        let public = Listed {
            name: "manual".into(),
            title: "PostgreSQL manual".into(),
            public: true,
            documents: 1_200,
            chunks: 10_400,
            bytes: 900,
            groups: vec![],
            users: vec![],
            ..course()
        };
        assert_eq!(
            table(&[course(), public]),
            "\
name      title              documents  chunks  model                size  public  readers
course-1  Course 1                   2       5  all-MiniLM-L6-v2  3.2 MiB  no      group:staff, user:student-1
manual    PostgreSQL manual       1200   10400  all-MiniLM-L6-v2    900 B  yes
"
        );
    }

    #[test]
    fn sizes_read_in_binary_units() {
        assert_eq!(size(0), "0 B");
        assert_eq!(size(1023), "1023 B");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(5 * 1024 * 1024 * 1024), "5.0 GiB");
    }
}
