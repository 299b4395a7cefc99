//! A catalog file written from a [`Snapshot`]: the draft `parley catalog init` makes, and the
//! same file updated by `refresh`. Refresh edits the file's own TOML (`toml_edit`), so the
//! team's descriptions, synonyms, flags, entries, comments and layout stay as they were: only
//! each table's and column's `db` key and the foreign-key relationships are rewritten, new
//! tables and columns are added, and those the database no longer has are removed when nobody
//! wrote anything about them, or kept and marked `gone = true` (`parley catalog check` names
//! them) when somebody did.

use toml_edit::{Array, ArrayOfTables, DocumentMut, InlineTable, Item, Table as TomlTable, value};

use super::file::{Column, ColumnFacts, Relationship, Table, TableFacts};
use super::introspect::Snapshot;

/// The first lines of a draft.
fn header(schemas: &[String]) -> String {
    format!(
        "# What the tables of {} mean, for the assistant (docs/catalog.md).\n\
         # Drafted by `parley catalog init`. Add `description`, `synonyms`, `hidden = true` or\n\
         # `pii = true` to any table or column, and [[relationship]], [[metric]],\n\
         # [[verified_query]] and [[instruction]] entries. `parley catalog refresh` rewrites only\n\
         # the `db` keys and the foreign keys, and keeps everything else.\n\n",
        schemas.join(", ")
    )
}

/// A new catalog file for `snapshot` of `schemas`.
pub fn draft(snapshot: &Snapshot, schemas: &[String]) -> String {
    let mut doc = DocumentMut::new();
    doc.insert("schemas", value(strings(schemas)));
    let mut tables = ArrayOfTables::new();
    for table in &snapshot.tables {
        tables.push(table_entry(table));
    }
    doc.insert("table", Item::ArrayOfTables(tables));
    let mut relationships = ArrayOfTables::new();
    for fk in &snapshot.foreign_keys {
        relationships.push(relationship_entry(fk));
    }
    if !relationships.is_empty() {
        doc.insert("relationship", Item::ArrayOfTables(relationships));
    }
    format!("{}{doc}", header(schemas))
}

/// `text` (a catalog file) brought up to date with `snapshot`, the team's edits kept.
pub fn refresh(text: &str, snapshot: &Snapshot) -> Result<String, toml_edit::TomlError> {
    let mut doc: DocumentMut = text.parse()?;
    let tables = doc
        .entry("table")
        .or_insert(Item::ArrayOfTables(ArrayOfTables::new()))
        .as_array_of_tables_mut();
    if let Some(tables) = tables {
        refresh_tables(tables, snapshot);
    }
    refresh_foreign_keys(&mut doc, &snapshot.foreign_keys);
    Ok(doc.to_string())
}

fn refresh_tables(tables: &mut ArrayOfTables, snapshot: &Snapshot) {
    let mut seen = Vec::new();
    let mut gone = Vec::new();
    for (i, entry) in tables.iter_mut().enumerate() {
        let name = entry
            .get("name")
            .and_then(Item::as_str)
            .unwrap_or_default()
            .to_owned();
        match snapshot.tables.iter().find(|t| t.name == name) {
            Some(table) => {
                entry.insert("db", value(table_facts(&table.db)));
                let private = flag(entry, "hidden");
                refresh_columns(entry, &table.columns, private);
                seen.push(name);
            }
            None if edited(entry, &["name", "db", "column"]) || edited_columns(entry) => {
                entry.insert("db", value(gone_facts()));
            }
            None => gone.push(i),
        }
    }
    for i in gone.into_iter().rev() {
        tables.remove(i);
    }
    for table in snapshot.tables.iter().filter(|t| !seen.contains(&t.name)) {
        tables.push(table_entry(table));
    }
}

/// Whether `entry` says `key = true`.
fn flag(entry: &TomlTable, key: &str) -> bool {
    entry.get(key).and_then(Item::as_bool) == Some(true)
}

/// The columns' facts rewritten. A column marked `pii` or `hidden` (or all of them, when the
/// table is `hidden`) gets no values and no range: a draft's sample of a column the team then
/// marked personal is taken out at the next refresh, and never written again.
fn refresh_columns(entry: &mut TomlTable, columns: &[Column], hidden_table: bool) {
    let existing = entry
        .entry("column")
        .or_insert(Item::ArrayOfTables(ArrayOfTables::new()));
    let Some(existing) = existing.as_array_of_tables_mut() else {
        return;
    };
    let mut seen = Vec::new();
    let mut gone = Vec::new();
    for (i, column) in existing.iter_mut().enumerate() {
        let name = column
            .get("name")
            .and_then(Item::as_str)
            .unwrap_or_default()
            .to_owned();
        match columns.iter().find(|c| c.name == name) {
            Some(found) => {
                let mut facts = found.db.clone();
                if hidden_table || flag(column, "pii") || flag(column, "hidden") {
                    facts.values.clear();
                    (facts.min, facts.max) = (None, None);
                }
                column.insert("db", value(column_facts(&facts)));
                seen.push(name);
            }
            None if edited(column, &["name", "db"]) => {
                column.insert("db", value(gone_facts()));
            }
            None => gone.push(i),
        }
    }
    for i in gone.into_iter().rev() {
        existing.remove(i);
    }
    for column in columns.iter().filter(|c| !seen.contains(&c.name)) {
        existing.push(column_entry(column));
    }
}

/// The foreign-key relationships replaced by the database's, each keeping the description a
/// team gave it; declared relationships (no `foreign_key`) kept as they are.
fn refresh_foreign_keys(doc: &mut DocumentMut, foreign_keys: &[Relationship]) {
    let relationships = doc
        .entry("relationship")
        .or_insert(Item::ArrayOfTables(ArrayOfTables::new()));
    let Some(relationships) = relationships.as_array_of_tables_mut() else {
        return;
    };
    let mut descriptions = Vec::new();
    let mut stale = Vec::new();
    for (i, r) in relationships.iter().enumerate() {
        if let Some(fk) = r.get("foreign_key").and_then(Item::as_str) {
            if let Some(description) = r.get("description") {
                descriptions.push((fk.to_owned(), description.clone()));
            }
            stale.push(i);
        }
    }
    for i in stale.into_iter().rev() {
        relationships.remove(i);
    }
    for fk in foreign_keys {
        let mut entry = relationship_entry(fk);
        if let Some((_, description)) = descriptions
            .iter()
            .find(|(name, _)| Some(name) == fk.foreign_key.as_ref())
        {
            entry.insert("description", description.clone());
        }
        relationships.push(entry);
    }
}

/// Whether `entry` holds a key other than `generated` ones: someone wrote about it.
fn edited(entry: &TomlTable, generated: &[&str]) -> bool {
    entry.iter().any(|(key, _)| !generated.contains(&key))
}

fn edited_columns(entry: &TomlTable) -> bool {
    entry
        .get("column")
        .and_then(Item::as_array_of_tables)
        .is_some_and(|columns| columns.iter().any(|c| edited(c, &["name", "db"])))
}

fn table_entry(table: &Table) -> TomlTable {
    let mut entry = TomlTable::new();
    entry.insert("name", value(&table.name));
    entry.insert("db", value(table_facts(&table.db)));
    let mut columns = ArrayOfTables::new();
    for column in &table.columns {
        columns.push(column_entry(column));
    }
    entry.insert("column", Item::ArrayOfTables(columns));
    entry
}

fn column_entry(column: &Column) -> TomlTable {
    let mut entry = TomlTable::new();
    entry.insert("name", value(&column.name));
    entry.insert("db", value(column_facts(&column.db)));
    entry
}

fn relationship_entry(r: &Relationship) -> TomlTable {
    let mut entry = TomlTable::new();
    entry.insert("from", value(r.from.to_string()));
    entry.insert("to", value(r.to.to_string()));
    if let Some(fk) = &r.foreign_key {
        entry.insert("foreign_key", value(fk));
    }
    entry
}

fn table_facts(facts: &TableFacts) -> InlineTable {
    let mut t = InlineTable::new();
    if let Some(kind) = &facts.kind {
        t.insert("kind", kind.into());
    }
    if let Some(rows) = facts.rows {
        t.insert("rows", rows.into());
    }
    if let Some(comment) = &facts.comment {
        t.insert("comment", comment.into());
    }
    if !facts.primary_key.is_empty() {
        t.insert("primary_key", strings(&facts.primary_key).into());
    }
    t
}

fn column_facts(facts: &ColumnFacts) -> InlineTable {
    let mut t = InlineTable::new();
    if let Some(ty) = &facts.ty {
        t.insert("type", ty.into());
    }
    t.insert("nullable", facts.nullable.into());
    if let Some(comment) = &facts.comment {
        t.insert("comment", comment.into());
    }
    if let Some(min) = &facts.min {
        t.insert("min", min.into());
    }
    if let Some(max) = &facts.max {
        t.insert("max", max.into());
    }
    if !facts.values.is_empty() {
        t.insert("values", strings(&facts.values).into());
    }
    t
}

fn gone_facts() -> InlineTable {
    let mut t = InlineTable::new();
    t.insert("gone", true.into());
    t
}

fn strings(items: &[String]) -> Array {
    items.iter().map(String::as_str).collect()
}

#[cfg(test)]
mod tests {
    use super::super::file::{self, ColumnsRef};
    use super::*;

    fn column(name: &str, ty: &str) -> Column {
        Column {
            name: name.into(),
            description: None,
            synonyms: Vec::new(),
            hidden: false,
            pii: false,
            db: ColumnFacts {
                ty: Some(ty.into()),
                ..ColumnFacts::default()
            },
        }
    }

    fn table(name: &str, rows: i64, columns: Vec<Column>) -> Table {
        Table {
            name: name.into(),
            description: None,
            synonyms: Vec::new(),
            hidden: false,
            columns,
            db: TableFacts {
                kind: Some("table".into()),
                rows: Some(rows),
                ..TableFacts::default()
            },
        }
    }

    fn snapshot(rows: i64) -> Snapshot {
        Snapshot {
            tables: vec![
                table("shop.customer", 59, vec![column("customer_id", "integer")]),
                table(
                    "shop.invoice",
                    rows,
                    vec![
                        column("invoice_id", "integer"),
                        column("customer_id", "integer"),
                    ],
                ),
            ],
            foreign_keys: vec![Relationship {
                from: ColumnsRef {
                    table: "shop.invoice".into(),
                    columns: vec!["customer_id".into()],
                },
                to: ColumnsRef {
                    table: "shop.customer".into(),
                    columns: vec!["customer_id".into()],
                },
                description: None,
                foreign_key: Some("invoice_customer_fkey".into()),
            }],
        }
    }

    #[test]
    fn a_draft_is_a_catalog_file_that_reads_back() {
        let text = draft(&snapshot(412), &["shop".into()]);
        let file = file::parse(&text).unwrap();
        assert_eq!(file.tables.len(), 2);
        assert_eq!(file.tables[1].db.rows, Some(412));
        assert_eq!(file.tables[1].columns[1].db.ty.as_deref(), Some("integer"));
        assert_eq!(
            file.relationships[0].condition(),
            "shop.invoice.customer_id = shop.customer.customer_id"
        );
        assert!(text.starts_with("# What the tables of shop mean"), "{text}");
    }

    #[test]
    fn refresh_rewrites_the_databases_facts_and_keeps_the_teams_words() {
        let text = draft(&snapshot(412), &["shop".into()])
            .replace(
                "name = \"shop.invoice\"",
                "name = \"shop.invoice\"\n# Sales, one row each.\ndescription = \"One sale.\"",
            )
            .replace(
                "foreign_key = \"invoice_customer_fkey\"",
                "foreign_key = \"invoice_customer_fkey\"\ndescription = \"who bought\"",
            );
        let mut later = snapshot(500);
        // The invoice gains a column; the customer table is dropped, and a new one appears.
        later.tables[1]
            .columns
            .push(column("total", "numeric(10,2)"));
        later.tables.remove(0);
        later
            .tables
            .push(table("shop.artist", 275, vec![column("name", "text")]));
        later.foreign_keys.clear();
        let refreshed = refresh(&text, &later).unwrap();
        assert!(refreshed.contains("# Sales, one row each."), "{refreshed}");
        let file = file::parse(&refreshed).unwrap();
        let names: Vec<&str> = file.tables.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            ["shop.invoice", "shop.artist"],
            "the customer had no edits"
        );
        assert_eq!(file.tables[0].description.as_deref(), Some("One sale."));
        assert_eq!(file.tables[0].db.rows, Some(500));
        assert_eq!(file.tables[0].columns.len(), 3);
        assert!(file.relationships.is_empty(), "the foreign key is gone");
    }
}
