//! Applies the SQL files in `migrations/`, embedded at compile time, in filename order and
//! records each in `schema_migrations`, so every binary carries the schema it expects.
//! Safe to run from several processes at once; refuses to continue if a landed file changed.

use include_dir::{Dir, include_dir};
use sha2::{Digest, Sha256};
use tokio_postgres::Client;
use tokio_postgres::types::Type;

use crate::db::pg_message;

static MIGRATIONS: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../../migrations");

/// Advisory locks are per database, so one fixed key serialises runners of the same database
/// while different databases in a cluster migrate in parallel. ASCII "parleymg". Held for one
/// migration's transaction at a time (see [`run`]).
const LOCK_KEY: i64 = 0x7061_726c_6579_6d67;

const CREATE_BOOKKEEPING: &str = "CREATE TABLE IF NOT EXISTS schema_migrations (
    name text PRIMARY KEY,
    checksum text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)";

#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error("migration {name} is not valid UTF-8")]
    NotUtf8 { name: String },
    #[error(
        "migration {name} changed after it was applied (recorded checksum {recorded}, file has {actual}); \
         landed migrations must never be edited, add a new one instead"
    )]
    ChecksumMismatch {
        name: String,
        recorded: String,
        actual: String,
    },
    #[error("migration {name} failed: {}", pg_message(.source))]
    Failed {
        name: String,
        #[source]
        source: tokio_postgres::Error,
    },
    #[error("migration bookkeeping failed while {step}: {}", pg_message(.source))]
    Bookkeeping {
        step: &'static str,
        #[source]
        source: tokio_postgres::Error,
    },
}

/// One embedded migration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migration {
    pub name: &'static str,
    pub sql: &'static str,
    pub checksum: String,
}

/// The embedded migrations as `(file name, SQL)`, in the order they are applied.
pub fn embedded() -> Result<Vec<(&'static str, &'static str)>, MigrateError> {
    Ok(migrations()?.into_iter().map(|m| (m.name, m.sql)).collect())
}

fn migrations() -> Result<Vec<Migration>, MigrateError> {
    let files = MIGRATIONS.files().filter_map(|file| {
        let name = file.path().file_name()?.to_str()?;
        name.ends_with(".sql").then_some((name, file.contents()))
    });
    ordered(files)
}

/// Sorts by file name (zero-padded numbers make that the intended order) and checksums.
fn ordered(
    files: impl IntoIterator<Item = (&'static str, &'static [u8])>,
) -> Result<Vec<Migration>, MigrateError> {
    let mut out = files
        .into_iter()
        .map(|(name, bytes)| {
            let sql = std::str::from_utf8(bytes).map_err(|_| MigrateError::NotUtf8 {
                name: name.to_owned(),
            })?;
            Ok(Migration {
                name,
                sql,
                checksum: checksum(sql),
            })
        })
        .collect::<Result<Vec<_>, MigrateError>>()?;
    out.sort_by(|a, b| a.name.cmp(b.name));
    Ok(out)
}

/// Hex SHA-256 of the file with line endings normalised, so a Windows checkout with CRLF
/// does not look like an edited migration.
pub fn checksum(sql: &str) -> String {
    let digest = Sha256::digest(sql.replace("\r\n", "\n").as_bytes());
    let mut hex = String::with_capacity(digest.len() * 2);
    for byte in digest.iter() {
        hex.push(char::from(HEX[usize::from(byte >> 4)]));
        hex.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    hex
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Checks every applied migration against the embedded files before anything runs, and
/// returns the ones still to apply. Applied names this binary does not know are left alone:
/// an older binary may run against a database a newer one already migrated.
fn pending<'m>(
    embedded: &'m [Migration],
    applied: &[(String, String)],
) -> Result<Vec<&'m Migration>, MigrateError> {
    let mut todo = Vec::new();
    for migration in embedded {
        match applied.iter().find(|(name, _)| name == migration.name) {
            Some((_, recorded)) if *recorded != migration.checksum => {
                return Err(MigrateError::ChecksumMismatch {
                    name: migration.name.to_owned(),
                    recorded: recorded.clone(),
                    actual: migration.checksum.clone(),
                });
            }
            Some(_) => {}
            None => todo.push(migration),
        }
    }
    Ok(todo)
}

/// Applies pending migrations and returns the file names applied, in order (empty when the
/// database is up to date).
///
/// Each migration runs in a transaction of its own that first takes the migration lock
/// ([`LOCK_KEY`], a transaction-level advisory lock) and reads `schema_migrations` under it, so
/// concurrent runners take turns and none applies a file another has recorded. Nothing
/// outlives a transaction (no session lock, no named statement), so `client` may come through
/// a transaction-mode pooler. A failure rolls back only that file and reports it as
/// [`MigrateError::Failed`].
pub async fn run(client: &mut Client) -> Result<Vec<String>, MigrateError> {
    let embedded = migrations()?;
    let mut done = Vec::new();
    while let Some(name) = apply_next(client, &embedded).await? {
        done.push(name);
    }
    Ok(done)
}

/// One transaction under the lock: checks every applied migration against the embedded files,
/// then applies and records the first pending one. `None` when nothing was pending.
async fn apply_next(
    client: &mut Client,
    embedded: &[Migration],
) -> Result<Option<String>, MigrateError> {
    let bookkeeping = |step| move |source| MigrateError::Bookkeeping { step, source };
    let tx = crate::db::locked_transaction(client, LOCK_KEY)
        .await
        .map_err(|e| bookkeeping(e.step)(e.source))?;
    tx.batch_execute(CREATE_BOOKKEEPING)
        .await
        .map_err(bookkeeping("creating schema_migrations"))?;
    // Read under the lock: what a runner before us committed is seen here.
    let applied: Vec<(String, String)> = tx
        .query_typed("SELECT name, checksum FROM schema_migrations", &[])
        .await
        .map_err(bookkeeping("reading schema_migrations"))?
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let Some(&migration) = pending(embedded, &applied)?.first() else {
        tx.commit()
            .await
            .map_err(bookkeeping("ending the transaction"))?;
        return Ok(None);
    };
    let failed = |source| MigrateError::Failed {
        name: migration.name.to_owned(),
        source,
    };
    tx.batch_execute(migration.sql).await.map_err(failed)?;
    tx.execute_typed(
        "INSERT INTO schema_migrations (name, checksum) VALUES ($1, $2)",
        &[
            (&migration.name, Type::TEXT),
            (&migration.checksum, Type::TEXT),
        ],
    )
    .await
    .map_err(failed)?;
    tx.commit().await.map_err(failed)?;
    Ok(Some(migration.name.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(names: &[&'static str]) -> Vec<Migration> {
        let bytes: &'static [u8] = b"SELECT 1;";
        ordered(names.iter().map(|n| (*n, bytes))).expect("valid utf-8")
    }

    #[test]
    fn migrations_are_ordered_by_file_name() {
        let got: Vec<_> = files(&["0010_c.sql", "0002_b.sql", "0001_a.sql"])
            .into_iter()
            .map(|m| m.name)
            .collect();
        assert_eq!(got, ["0001_a.sql", "0002_b.sql", "0010_c.sql"]);
    }

    #[test]
    fn checksum_is_lowercase_hex_sha256() {
        assert_eq!(
            checksum("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn checksum_ignores_crlf_line_endings() {
        assert_eq!(checksum("a;\r\nb;\r\n"), checksum("a;\nb;\n"));
        assert_ne!(checksum("a;\nb;\n"), checksum("a;\nc;\n"));
    }

    #[test]
    fn non_utf8_files_are_named_in_the_error() {
        let bad: &'static [u8] = &[0xff, 0xfe];
        let err = ordered([("0003_bad.sql", bad)]).expect_err("must reject");
        assert!(err.to_string().contains("0003_bad.sql"));
    }

    #[test]
    fn pending_skips_applied_and_keeps_order() {
        let all = files(&["0001_a.sql", "0002_b.sql", "0003_c.sql"]);
        let applied = vec![("0002_b.sql".to_owned(), all[1].checksum.clone())];
        let todo: Vec<_> = pending(&all, &applied)
            .expect("no mismatch")
            .iter()
            .map(|m| m.name)
            .collect();
        assert_eq!(todo, ["0001_a.sql", "0003_c.sql"]);
    }

    #[test]
    fn pending_refuses_an_edited_migration() {
        let all = files(&["0001_a.sql"]);
        let applied = vec![("0001_a.sql".to_owned(), "deadbeef".to_owned())];
        match pending(&all, &applied) {
            Err(MigrateError::ChecksumMismatch { name, recorded, .. }) => {
                assert_eq!(name, "0001_a.sql");
                assert_eq!(recorded, "deadbeef");
            }
            other => panic!("expected a checksum mismatch, got {other:?}"),
        }
    }

    #[test]
    fn pending_tolerates_migrations_from_a_newer_binary() {
        let all = files(&["0001_a.sql"]);
        let applied = vec![
            ("0001_a.sql".to_owned(), all[0].checksum.clone()),
            ("0099_future.sql".to_owned(), "whatever".to_owned()),
        ];
        assert!(pending(&all, &applied).expect("no mismatch").is_empty());
    }

    #[test]
    fn embedded_migrations_are_numbered_sql_files_in_order() {
        let all = embedded().expect("embedded migrations are utf-8");
        assert!(
            all.len() >= 3,
            "expected the roles, chat and parley migrations"
        );
        assert_eq!(all[0].0, "0001_roles.sql");
        for pair in all.windows(2) {
            assert!(pair[0].0 < pair[1].0);
        }
        for (name, _) in &all {
            let (number, rest) = name.split_at(4);
            assert!(
                number.bytes().all(|b| b.is_ascii_digit()),
                "{name} must start with 4 digits"
            );
            assert!(
                rest.starts_with('_') && rest.ends_with(".sql"),
                "{name} must be NNNN_name.sql"
            );
        }
    }
}
