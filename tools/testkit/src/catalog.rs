//! A semantic catalog for tests that serve one: drafted from the live database as `parley
//! catalog init` drafts it, and indexed as `parley catalog index` indexes it (the same library
//! calls, the built-in model), so a test's mcp function serves `search_catalog` and
//! `find_values` over real entries and values.

use std::path::{Path, PathBuf};

use parley_tools::semantic::index::{self, ValueBounds};
use parley_tools::semantic::{self, Bounds, introspect, write};

use crate::TestDb;

/// A drafted and indexed catalog: its file, and a tools file serving it, in a directory that
/// lives as long as this.
pub struct Served {
    pub catalog: PathBuf,
    pub tools_file: PathBuf,
    _dir: tempfile::TempDir,
}

/// Drafts the catalog of `schemas`, indexes it in `db`, and writes a tools file whose
/// `[catalog]` names it.
pub async fn served(db: &TestDb, schemas: &[&str]) -> Served {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let catalog = draft_and_index(db, schemas, dir.path()).await;
    let tools_file = dir.path().join("catalog-tools.toml");
    std::fs::write(
        &tools_file,
        format!("[catalog]\nfile = \"{}\"\n", catalog.display()),
    )
    .expect("write the tools file");
    Served {
        catalog,
        tools_file,
        _dir: dir,
    }
}

/// Drafts the catalog of `schemas` into `dir/catalog.toml`, indexes it in `db`, and returns
/// the file's path.
pub async fn draft_and_index(db: &TestDb, schemas: &[&str], dir: &Path) -> PathBuf {
    let schemas: Vec<String> = schemas.iter().map(|s| s.to_string()).collect();
    let mut client = db.client().await;
    let snapshot = introspect::snapshot(&client, &schemas, Bounds::default())
        .await
        .expect("the database describes itself");
    let text = write::draft(&snapshot, &schemas);
    let path = dir.join("catalog.toml");
    std::fs::write(&path, &text).expect("write the catalog");
    let file = semantic::file::parse(&text).expect("a draft reads back");
    let entries = index::entries(&file);
    let bodies: Vec<String> = entries.iter().map(|e| e.body.clone()).collect();
    let embedder = crate::embedder();
    let embeddings = embedder.embed(&bodies).await.expect("entries embed");
    let tx = client.transaction().await.expect("a transaction");
    index::write(
        &tx,
        &file,
        &entries,
        &embeddings,
        embedder.model_id(),
        ValueBounds::default(),
    )
    .await
    .expect("the index is written");
    tx.commit().await.expect("committed");
    path
}
