//! Named parameters (`:name`) in declared SQL become Postgres placeholders (`$1`).
//!
//! Values are always bound, never spliced into the text. The scanner skips string literals,
//! quoted identifiers, comments, dollar-quoted bodies and `::` casts, so only real parameters
//! are replaced.

/// The SQL with `$n` placeholders, and the parameter names in placeholder order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placeholders {
    pub sql: String,
    pub names: Vec<String>,
}

pub fn rewrite(sql: &str) -> Placeholders {
    let bytes = sql.as_bytes();
    let mut out = String::with_capacity(sql.len());
    let mut names: Vec<String> = Vec::new();
    let mut i = 0;
    let mut copied_to = 0;
    while i < bytes.len() {
        if let Some(next) = skip_literal(sql, i) {
            i = next;
            continue;
        }
        match bytes[i] {
            b':' if bytes.get(i + 1) == Some(&b':') => i += 2,
            b':' if bytes
                .get(i + 1)
                .is_some_and(|b| b.is_ascii_alphabetic() || *b == b'_') =>
            {
                let start = i + 1;
                let end = start
                    + sql[start..]
                        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .unwrap_or(sql.len() - start);
                let name = &sql[start..end];
                let index = match names.iter().position(|n| n == name) {
                    Some(p) => p + 1,
                    None => {
                        names.push(name.to_owned());
                        names.len()
                    }
                };
                out.push_str(&sql[copied_to..i]);
                out.push('$');
                out.push_str(&index.to_string());
                copied_to = end;
                i = end;
            }
            _ => i += 1,
        }
    }
    out.push_str(&sql[copied_to..]);
    Placeholders { sql: out, names }
}

/// The verb (`INSERT`, `UPDATE`, `DELETE` or `MERGE`) of a statement that changes rows but has
/// no `RETURNING`, looking only at its top level (not inside parentheses, literals or comments).
pub fn changes_rows_without_returning(sql: &str) -> Option<&'static str> {
    const VERBS: [&str; 7] = [
        "SELECT", "VALUES", "TABLE", "INSERT", "UPDATE", "DELETE", "MERGE",
    ];
    let bytes = sql.as_bytes();
    let (mut i, mut depth) = (0, 0usize);
    let mut verb: Option<&'static str> = None;
    while i < bytes.len() {
        if let Some(next) = skip_literal(sql, i) {
            i = next;
            continue;
        }
        match bytes[i] {
            b'(' => (depth, i) = (depth + 1, i + 1),
            b')' => (depth, i) = (depth.saturating_sub(1), i + 1),
            b if b.is_ascii_alphabetic() || b == b'_' => {
                let end = sql[i..]
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .map_or(bytes.len(), |n| i + n);
                let word = &sql[i..end];
                if depth == 0 {
                    if word.eq_ignore_ascii_case("RETURNING") {
                        return None;
                    }
                    if verb.is_none() {
                        verb = VERBS.into_iter().find(|v| word.eq_ignore_ascii_case(v));
                    }
                }
                i = end;
            }
            _ => i += 1,
        }
    }
    verb.filter(|v| !matches!(*v, "SELECT" | "VALUES" | "TABLE"))
}

/// A relation a statement changes, as its text names it: `INSERT INTO <relation>`, `UPDATE
/// <relation>`, `DELETE FROM <relation>`, and the actions of `ON CONFLICT DO UPDATE` and of
/// `MERGE INTO <relation> ... THEN INSERT | UPDATE | DELETE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteTarget {
    /// `INSERT`, `UPDATE` or `DELETE`: the privilege the change needs.
    pub verb: &'static str,
    /// The name as written (`rooms`, `app."Rooms"`), for Postgres to resolve (`to_regclass`).
    pub relation: String,
}

/// The relations `sql` changes, at any depth (data-modifying CTEs included), for the start-up
/// check to tell which privilege each changed relation needs. Locking clauses (`FOR UPDATE`,
/// `FOR NO KEY UPDATE`) are not changes.
pub fn write_targets(sql: &str) -> Vec<WriteTarget> {
    let tokens = tokens(sql);
    let word = |i: usize| match tokens.get(i) {
        Some(Token::Word(w)) => Some(w.to_ascii_uppercase()),
        _ => None,
    };
    let mut targets = Vec::new();
    let (mut inserted, mut merged): (Option<String>, Option<String>) = (None, None);
    let mut push = |verb: &'static str, relation: Option<String>| {
        if let Some(relation) = relation {
            let target = WriteTarget { verb, relation };
            if !targets.contains(&target) {
                targets.push(target);
            }
        }
    };
    for i in 0..tokens.len() {
        let Some(this) = word(i) else { continue };
        let before = i.checked_sub(1).and_then(word);
        let after = word(i + 1);
        match (this.as_str(), before.as_deref(), after.as_deref()) {
            ("INSERT" | "UPDATE" | "DELETE", Some("THEN"), _) => {
                push(verb(&this), merged.clone());
            }
            ("UPDATE", Some("DO"), _) => push("UPDATE", inserted.clone()),
            ("UPDATE", Some("FOR" | "KEY"), _) => {}
            ("UPDATE", _, _) => push("UPDATE", relation_at(&tokens, i + 1)),
            ("INSERT", _, Some("INTO")) => {
                inserted = relation_at(&tokens, i + 2);
                push("INSERT", inserted.clone());
            }
            ("DELETE", _, Some("FROM")) => push("DELETE", relation_at(&tokens, i + 2)),
            ("MERGE", _, Some("INTO")) => merged = relation_at(&tokens, i + 2),
            _ => {}
        }
    }
    targets
}

/// The names `sql` qualifies others with (`app` in `app.rooms`, `a` in `a.id`), as written:
/// the schemas it may name, for the start-up check to find one its role may not use.
pub fn qualifiers(sql: &str) -> Vec<String> {
    let tokens = tokens(sql);
    let mut found: Vec<String> = Vec::new();
    for pair in tokens.windows(2) {
        if let [Token::Word(name) | Token::Quoted(name), Token::Dot] = pair
            && !found.iter().any(|f| f == name)
        {
            found.push((*name).to_owned());
        }
    }
    found
}

fn verb(word: &str) -> &'static str {
    match word {
        "INSERT" => "INSERT",
        "UPDATE" => "UPDATE",
        _ => "DELETE",
    }
}

/// The dotted name starting at token `i` (after an optional `ONLY`), as written.
fn relation_at(tokens: &[Token<'_>], mut i: usize) -> Option<String> {
    if matches!(tokens.get(i), Some(Token::Word(w)) if w.eq_ignore_ascii_case("ONLY")) {
        i += 1;
    }
    let mut name = String::new();
    loop {
        match tokens.get(i) {
            Some(Token::Word(part) | Token::Quoted(part)) => name.push_str(part),
            _ => return None,
        }
        if tokens.get(i + 1) != Some(&Token::Dot) {
            return Some(name);
        }
        name.push('.');
        i += 2;
    }
}

/// What [`write_targets`] reads: words, quoted identifiers (quotes kept) and dots; every other
/// character is [`Token::Other`], and literals and comments are skipped.
#[derive(Debug, PartialEq, Eq)]
enum Token<'a> {
    Word(&'a str),
    Quoted(&'a str),
    Dot,
    Other,
}

fn tokens(sql: &str) -> Vec<Token<'_>> {
    let bytes = sql.as_bytes();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'"' {
            let end = skip_quoted(bytes, i);
            tokens.push(Token::Quoted(&sql[i..end]));
            i = end;
            continue;
        }
        if let Some(next) = skip_literal(sql, i) {
            if next == i + 1 {
                tokens.push(Token::Other);
            }
            i = next;
            continue;
        }
        match bytes[i] {
            b if b.is_ascii_alphabetic() || b == b'_' => {
                let end = sql[i..]
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '$'))
                    .map_or(bytes.len(), |n| i + n);
                tokens.push(Token::Word(&sql[i..end]));
                i = end;
            }
            b if b.is_ascii_whitespace() => i += 1,
            b => {
                tokens.push(if b == b'.' { Token::Dot } else { Token::Other });
                i += 1;
            }
        }
    }
    tokens
}

/// Where the text starting at `i` stops being a string literal, quoted identifier, comment or
/// dollar-quoted body; `None` when plain SQL starts at `i`.
fn skip_literal(sql: &str, i: usize) -> Option<usize> {
    let bytes = sql.as_bytes();
    match bytes[i] {
        b'\'' | b'"' => Some(skip_quoted(bytes, i)),
        b'-' if bytes.get(i + 1) == Some(&b'-') => {
            Some(sql[i..].find('\n').map_or(bytes.len(), |n| i + n + 1))
        }
        b'/' if bytes.get(i + 1) == Some(&b'*') => Some(
            sql[i + 2..]
                .find("*/")
                .map_or(bytes.len(), |n| i + 2 + n + 2),
        ),
        // A `$1`-style placeholder is stepped over by one byte, like plain SQL.
        b'$' => Some(skip_dollar_quoted(sql, i)),
        _ => None,
    }
}

fn skip_quoted(bytes: &[u8], start: usize) -> usize {
    let quote = bytes[start];
    let mut i = start + 1;
    while i < bytes.len() {
        if bytes[i] == quote {
            // A doubled quote is an escaped quote, not the end.
            if bytes.get(i + 1) == Some(&quote) {
                i += 2;
                continue;
            }
            return i + 1;
        }
        i += 1;
    }
    bytes.len()
}

/// `$tag$ ... $tag$` bodies; a `$1`-style placeholder is not a tag and is stepped over.
fn skip_dollar_quoted(sql: &str, start: usize) -> usize {
    let rest = &sql[start + 1..];
    let tag_len = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    let tag = &rest[..tag_len];
    let is_tag = rest[tag_len..].starts_with('$') && !tag.starts_with(|c: char| c.is_ascii_digit());
    if !is_tag {
        return start + 1;
    }
    let delimiter = format!("${tag}$");
    let body_start = start + delimiter.len();
    sql[body_start..]
        .find(&delimiter)
        .map_or(sql.len(), |n| body_start + n + delimiter.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_numbered_placeholders_in_first_use_order() {
        let p = rewrite("SELECT * FROM t WHERE a = :b AND c = :a OR :b IS NULL");
        assert_eq!(
            p.sql,
            "SELECT * FROM t WHERE a = $1 AND c = $2 OR $1 IS NULL"
        );
        assert_eq!(p.names, vec!["b", "a"]);
    }

    #[test]
    fn casts_are_not_parameters() {
        let p = rewrite("SELECT :x::text, now()::date");
        assert_eq!(p.sql, "SELECT $1::text, now()::date");
        assert_eq!(p.names, vec!["x"]);
    }

    #[test]
    fn literals_identifiers_and_comments_are_left_alone() {
        let sql =
            "SELECT ':no', \"a:b\", 'it''s :no' -- :no\n, /* :no */ $$ :no $$, $t$ :no $t$, :yes";
        let p = rewrite(sql);
        assert_eq!(p.names, vec!["yes"]);
        assert!(p.sql.ends_with("$t$ :no $t$, $1"));
    }

    #[test]
    fn only_a_top_level_change_without_returning_is_reported() {
        assert_eq!(
            changes_rows_without_returning("UPDATE t SET a = 1"),
            Some("UPDATE")
        );
        assert_eq!(
            changes_rows_without_returning(
                "WITH d AS (DELETE FROM t RETURNING *) INSERT INTO u SELECT * FROM d"
            ),
            Some("INSERT")
        );
        for fine in [
            "UPDATE t SET a = 1 RETURNING a",
            "SELECT * FROM t FOR UPDATE",
            "WITH d AS (DELETE FROM t RETURNING id) SELECT count(*) FROM d",
            "SELECT 'update t' -- delete\n",
            "INSERT INTO t VALUES (1) ON CONFLICT (a) DO UPDATE SET b = 2 RETURNING a",
        ] {
            assert_eq!(changes_rows_without_returning(fine), None, "{fine}");
        }
    }

    #[test]
    fn write_targets_name_each_changed_relation_with_its_verb() {
        let target = |verb, relation: &str| WriteTarget {
            verb,
            relation: relation.to_owned(),
        };
        assert_eq!(
            write_targets("INSERT INTO rooms (name) VALUES ($1) RETURNING id"),
            vec![target("INSERT", "rooms")]
        );
        assert_eq!(
            write_targets(
                "WITH gone AS (DELETE FROM ONLY app.\"Old Rooms\" WHERE id = $1 RETURNING id) \
                 UPDATE public.rooms r SET n = n - 1 FROM gone WHERE r.id = gone.id RETURNING r.id"
            ),
            vec![
                target("DELETE", "app.\"Old Rooms\""),
                target("UPDATE", "public.rooms")
            ]
        );
        assert_eq!(
            write_targets(
                "INSERT INTO t AS x VALUES (1) ON CONFLICT (a) DO UPDATE SET b = 2 RETURNING a"
            ),
            vec![target("INSERT", "t"), target("UPDATE", "t")]
        );
        assert_eq!(
            write_targets(
                "MERGE INTO stock s USING delivery d ON s.item = d.item \
                 WHEN MATCHED THEN UPDATE SET qty = s.qty + d.qty \
                 WHEN NOT MATCHED THEN INSERT VALUES (d.item, d.qty) RETURNING s.item"
            ),
            vec![target("UPDATE", "stock"), target("INSERT", "stock")]
        );
    }

    #[test]
    fn qualifiers_are_the_names_before_a_dot() {
        assert_eq!(
            qualifiers("SELECT r.id FROM app.rooms r JOIN \"Odd\".x ON x.a = r.id -- b.c\n"),
            vec!["r", "app", "\"Odd\"", "x"]
        );
    }

    #[test]
    fn locking_clauses_literals_and_comments_are_no_write_targets() {
        for read in [
            "SELECT * FROM t FOR UPDATE",
            "SELECT * FROM t FOR NO KEY UPDATE OF t",
            "SELECT 'INSERT INTO t' -- DELETE FROM u\n",
            "SELECT /* UPDATE t */ 1, $$UPDATE t SET a = 1$$",
        ] {
            assert_eq!(write_targets(read), vec![], "{read}");
        }
    }

    #[test]
    fn array_slices_with_numbers_are_not_parameters() {
        let p = rewrite("SELECT arr[1:2] FROM t WHERE x = :x");
        assert_eq!(p.names, vec!["x"]);
        assert_eq!(p.sql, "SELECT arr[1:2] FROM t WHERE x = $1");
    }
}
