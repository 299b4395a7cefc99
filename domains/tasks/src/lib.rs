//! The tasks demo domain: a personal task list per user, owned by the caller and kept apart by
//! row-level security. Its schema, its tools file and a small seed for the local demo user,
//! applied together by `parley demo-data --domain tasks` (the schema, then [`load_data`], in
//! one transaction); nothing here is part of Parley's own schema.

use std::path::PathBuf;

use parley_core::db::pg_message;
use tokio_postgres::Transaction;

/// The domain's table, row-level security policy, write role and grants; idempotent (see
/// schema.sql).
pub const SCHEMA: &str = include_str!("../schema.sql");

/// The demo seed: a few tasks for [`SEED_OWNER`], only while that user has none (see seed.sql).
pub const SEED: &str = include_str!("../seed.sql");

/// Whose tasks the seed creates: the one user of a chat run with `CHAT_AUTH=none`.
pub const SEED_OWNER: &str = "local-user";

/// The domain's tools file, as served by the mcp function (`TOOLS_FILE`).
pub const TOOLS: &str = include_str!("../tools.toml");

/// The absolute path of the tools file in this checkout, for tests and `scripts/dev`.
pub const TOOLS_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tools.toml");

/// The role the write tools run as (`role` in tools.toml). A login role that serves these tools
/// is granted it `WITH INHERIT FALSE, SET TRUE`.
pub const WRITER_ROLE: &str = "parley_tasks_writer";

/// [`TOOLS_PATH`] as a path.
pub fn tools_path() -> PathBuf {
    PathBuf::from(TOOLS_PATH)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadSummary {
    /// Tasks the seed added (0 on a rerun).
    pub seeded: u64,
    /// [`SEED_OWNER`]'s tasks afterwards.
    pub tasks: u64,
}

#[derive(Debug, thiserror::Error)]
#[error("{step} failed: {}", pg_message(.source))]
pub struct LoadError {
    step: &'static str,
    #[source]
    source: tokio_postgres::Error,
}

fn pg(step: &'static str) -> impl FnOnce(tokio_postgres::Error) -> LoadError {
    move |source| LoadError { step, source }
}

/// Applies the seed in `tx`, which has applied [`SCHEMA`] (as `parley demo-data` does). A rerun
/// changes nothing.
pub async fn load_data(tx: &Transaction<'_>) -> Result<LoadSummary, LoadError> {
    // As the seed does: the counts then pass the row-level security policy even when the
    // loading role is not a superuser.
    tx.execute(
        "SELECT set_config('parley.caller', json_build_object('sub', $1::text)::text, true)",
        &[&SEED_OWNER],
    )
    .await
    .map_err(pg("setting the caller"))?;
    let count = "SELECT count(*) FROM tasks WHERE owner = $1";
    let before: i64 = tx
        .query_one(count, &[&SEED_OWNER])
        .await
        .map_err(pg("counting tasks"))?
        .get(0);
    tx.batch_execute(SEED).await.map_err(pg("seeding tasks"))?;
    let after: i64 = tx
        .query_one(count, &[&SEED_OWNER])
        .await
        .map_err(pg("counting tasks"))?
        .get(0);
    Ok(LoadSummary {
        seeded: u64::try_from(after - before).unwrap_or(0),
        tasks: u64::try_from(after).unwrap_or(0),
    })
}
