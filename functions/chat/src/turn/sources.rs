//! Sources: the rows of tools that declare a citation (`_meta["parley/citation"]`), numbered
//! `S1`, `S2`, ... across one turn, and the `[S<n>]` citations a reply makes to them.
//!
//! Each distinct source (keyed by its citation's id column and that column's value) gets one
//! number, the first time a tool returns it; every row of it, in any call of the turn, gains
//! `"cite": "S<n>"` in what the model sees and the trace stores. The turn's [`Source`] list puts
//! the ones the reply cites first, in the order it first cites them. Numbers are the turn's own:
//! [`strip_cites`] and [`strip_citations`] take them out of what earlier turns replay, so a
//! later reply cannot cite an old number that now means another row.
//!
//! A successful call of a tool that runs a verified query (`_meta["parley/verified"]`) makes
//! that query a source of the reply that follows: `verified: <name>`, listed first, once per
//! query however often it ran. Knows no tool or domain.

use std::collections::HashMap;

use parley_wire::Citation;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The field added to each source row: its number in this turn (`"S3"`).
pub const CITE_FIELD: &str = "cite";

/// What a verified query's source id and title start with: `verified:top_artists` and
/// `verified: top_artists`.
pub const VERIFIED_PREFIX: &str = "verified:";

/// One source of a reply, as `POST /api/chat` returns it and `chat.messages.sources` stores it.
/// A column the tool's citation does not name, or a row does not have, is `null`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Source {
    /// `S<n>`: the `cite` the model was given, and cites as `[S<n>]`.
    pub id: String,
    pub title: Option<String>,
    pub uri: Option<String>,
    pub snippet: Option<String>,
    pub score: Option<f64>,
    /// The tool, and the call of this turn, that first returned it.
    pub tool: String,
    pub call_id: String,
    /// The reply cites it; for a verified query, the turn has a reply that follows its call.
    pub cited: bool,
    /// The verified query the reply was answered from, for its source (whose `id` is
    /// `verified:<name>`); absent for a row. Turns stored before verified queries lack it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified: Option<String>,
}

/// The sources of one turn so far, in the order the tools returned them.
#[derive(Debug, Default)]
pub struct Sources {
    found: Vec<Source>,
    /// (id column, the value's JSON text) → index in `found`.
    index: HashMap<(String, String), usize>,
    /// The verified queries that answered, each once, in the order they first did.
    verified: Vec<Source>,
}

impl Sources {
    /// Numbers the rows of one call's `output` (`{"rows": [{...}, ...], ...}`) in place: each
    /// row with a value in the citation's id column gains `cite`. A row of a source seen before
    /// in the turn gets that source's number, and fills in what its first row lacked.
    pub fn cite_rows(
        &mut self,
        citation: &Citation,
        tool: &str,
        call_id: &str,
        output: &mut Value,
    ) {
        let Some(rows) = output.get_mut("rows").and_then(Value::as_array_mut) else {
            return;
        };
        for row in rows.iter_mut().filter_map(Value::as_object_mut) {
            let Some(key) = row
                .get(&citation.id)
                .filter(|v| !v.is_null())
                .map(|v| (citation.id.clone(), v.to_string()))
            else {
                continue;
            };
            let at = match self.index.get(&key) {
                Some(&at) => {
                    fill_in(&mut self.found[at], citation, row);
                    at
                }
                None => {
                    let at = self.found.len();
                    self.found
                        .push(source(format!("S{}", at + 1), citation, row, tool, call_id));
                    self.index.insert(key, at);
                    at
                }
            };
            row.insert(CITE_FIELD.into(), Value::String(self.found[at].id.clone()));
        }
    }

    /// Notes a successful call (`call_id`, of `tool`) that ran the verified query `name`: the
    /// reply that follows is answered from it. A query that answered before keeps its first call.
    pub fn verified(&mut self, name: &str, tool: &str, call_id: &str) {
        if self
            .verified
            .iter()
            .any(|s| s.verified.as_deref() == Some(name))
        {
            return;
        }
        self.verified.push(Source {
            id: format!("{VERIFIED_PREFIX}{name}"),
            title: Some(format!("{VERIFIED_PREFIX} {name}")),
            uri: None,
            snippet: None,
            score: None,
            tool: tool.to_owned(),
            call_id: call_id.to_owned(),
            cited: false,
            verified: Some(name.to_owned()),
        });
    }

    /// The turn's sources for `reply`: first the verified queries it was answered from (marked
    /// `cited` when there is a reply), then the rows it cites, in the order of their first
    /// citation, marked `cited`, then the other rows in the order the tools returned them.
    /// Citations of numbers the turn never gave are ignored.
    pub fn for_reply(self, reply: &str) -> Vec<Source> {
        let answered = !reply.trim().is_empty();
        let mut ordered: Vec<Source> = self
            .verified
            .into_iter()
            .map(|s| Source {
                cited: answered,
                ..s
            })
            .collect();
        let mut found: Vec<Option<Source>> = self.found.into_iter().map(Some).collect();
        ordered.reserve(found.len());
        for n in citations(reply) {
            if let Some(mut source) = found.get_mut(n as usize - 1).and_then(Option::take) {
                source.cited = true;
                ordered.push(source);
            }
        }
        ordered.extend(found.into_iter().flatten());
        ordered
    }
}

fn source(id: String, c: &Citation, row: &Map<String, Value>, tool: &str, call_id: &str) -> Source {
    Source {
        id,
        title: text(row, c.title.as_deref()),
        uri: text(row, c.uri.as_deref()),
        snippet: text(row, c.snippet.as_deref()),
        score: number(row, c.score.as_deref()),
        tool: tool.to_owned(),
        call_id: call_id.to_owned(),
        cited: false,
        verified: None,
    }
}

/// A later row of a known source (say, the document read after a search found it) may name
/// columns the first one did not.
fn fill_in(s: &mut Source, c: &Citation, row: &Map<String, Value>) {
    s.title = s.title.take().or_else(|| text(row, c.title.as_deref()));
    s.uri = s.uri.take().or_else(|| text(row, c.uri.as_deref()));
    s.snippet = s.snippet.take().or_else(|| text(row, c.snippet.as_deref()));
    s.score = s.score.or_else(|| number(row, c.score.as_deref()));
}

/// A column's value as text: strings as they are, other values as JSON, null as `None`.
fn text(row: &Map<String, Value>, column: Option<&str>) -> Option<String> {
    match row.get(column?)? {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// A column's value as a number; a numeric string (how some types render) counts.
fn number(row: &Map<String, Value>, column: Option<&str>) -> Option<f64> {
    match row.get(column?)? {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok().filter(|f: &f64| f.is_finite()),
        _ => None,
    }
}

/// The source numbers `text` cites, each once, in the order of their first citation. A
/// citation is a bracket holding only `S<n>` ids, separated by commas, semicolons or spaces:
/// `[S1]`, `[S1][S2]`, `[S1, S2]`. `S0`, leading zeros and other brackets (`[see S1]`,
/// `[1]`) are not citations.
pub fn citations(text: &str) -> Vec<u32> {
    let mut seen = Vec::new();
    for (_, ids) in brackets(text) {
        for n in ids {
            if !seen.contains(&n) {
                seen.push(n);
            }
        }
    }
    seen
}

/// `text` without its citations, for replaying an earlier turn's reply: its numbers meant
/// that turn's sources. Whitespace left before a removed citation at the end of a sentence
/// goes too.
pub fn strip_citations(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = 0;
    for (range, _) in brackets(text) {
        let before = &text[rest..range.start];
        let follows = text[range.end..].chars().next();
        if follows.is_none_or(|c| c.is_ascii_punctuation() || c.is_whitespace()) {
            out.push_str(before.trim_end_matches([' ', '\t']));
        } else {
            out.push_str(before);
        }
        rest = range.end;
    }
    out.push_str(&text[rest..]);
    out
}

/// `output` without the `cite` fields of its rows, for replaying an earlier turn's tool output.
pub fn strip_cites(output: &Value) -> Value {
    let mut output = output.clone();
    if let Some(rows) = output.get_mut("rows").and_then(Value::as_array_mut) {
        for row in rows.iter_mut().filter_map(Value::as_object_mut) {
            row.remove(CITE_FIELD);
        }
    }
    output
}

/// Every citation bracket of `text`: its byte range and the numbers it holds.
fn brackets(text: &str) -> Vec<(std::ops::Range<usize>, Vec<u32>)> {
    /// Longer than any list of ids a reply would put in one bracket.
    const MAX_INSIDE: usize = 64;
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(open) = text[from..].find('[').map(|i| from + i) {
        from = open + 1;
        let Some(close) = text[from..]
            .char_indices()
            .take(MAX_INSIDE)
            .find(|(_, c)| matches!(c, ']' | '['))
            .filter(|(_, c)| *c == ']')
            .map(|(i, _)| from + i)
        else {
            continue;
        };
        let ids: Option<Vec<u32>> = text[from..close]
            .split(|c: char| c == ',' || c == ';' || c.is_whitespace())
            .filter(|t| !t.is_empty())
            .map(source_number)
            .collect();
        if let Some(ids) = ids.filter(|ids| !ids.is_empty()) {
            found.push((open..close + 1, ids));
            from = close + 1;
        }
    }
    found
}

/// `S<n>` with n ≥ 1 written without leading zeros.
fn source_number(token: &str) -> Option<u32> {
    let digits = token.strip_prefix('S')?;
    if digits.starts_with('0') || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn citation() -> Citation {
        Citation::from_meta(&json!({
            "id": "note_id", "title": "title", "uri": "uri", "snippet": "snippet", "score": "score"
        }))
        .unwrap()
    }

    fn cites(output: &Value) -> Vec<Option<&str>> {
        output["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r[CITE_FIELD].as_str())
            .collect()
    }

    #[test]
    fn one_citation_and_several_adjacent_ones_are_found_in_order() {
        assert_eq!(citations("Use SET TRANSACTION [S2]."), [2]);
        assert_eq!(citations("Both say so [S3][S1]. Again [S3]."), [3, 1]);
        assert_eq!(
            citations("Listed [S1, S2] and [S4;S3] and [S5 S6]."),
            [1, 2, 4, 3, 5, 6]
        );
    }

    #[test]
    fn s12_is_not_s1() {
        assert_eq!(citations("See [S12] and [S1]."), [12, 1]);
        assert_eq!(citations("See [S12]."), [12]);
    }

    #[test]
    fn brackets_that_are_not_only_source_ids_are_not_citations() {
        for text in [
            "no citations",
            "[1] is a footnote",
            "[see S1]",
            "[S1 above]",
            "[s1] lower case",
            "[S0] and [S01]",
            "[S]",
            "[]",
            "S1 without brackets",
            "[S1 never closed",
            "[S1x]",
        ] {
            assert_eq!(citations(text), Vec::<u32>::new(), "{text}");
        }
        // A stray bracket does not hide the citation after it.
        assert_eq!(citations("a [ b [S2]"), [2]);
        assert_eq!(citations("[[S4]]"), [4]);
    }

    #[test]
    fn rows_are_numbered_across_calls_and_a_source_seen_again_keeps_its_number() {
        let c = citation();
        let mut sources = Sources::default();
        let mut first = json!({"rows": [
            {"note_id": 1, "title": "One", "uri": "n/1", "snippet": "a", "score": 0.9},
            {"note_id": 2, "title": "Two", "uri": "n/2", "snippet": "b", "score": "0.5"},
        ], "row_count": 2, "truncated": false});
        sources.cite_rows(&c, "search_notes", "call_1", &mut first);
        assert_eq!(cites(&first), [Some("S1"), Some("S2")]);
        assert_eq!(first["row_count"], 2, "the rest of the output is kept");

        let mut second = json!({"rows": [
            {"note_id": 2, "title": "Two"},
            {"note_id": 3, "title": "Three"},
            {"note_id": null, "title": "No id"},
            "not an object",
        ]});
        sources.cite_rows(&c, "search_notes", "call_2", &mut second);
        assert_eq!(cites(&second), [Some("S2"), Some("S3"), None, None]);

        let listed = sources.for_reply("");
        assert_eq!(listed.len(), 3);
        assert_eq!(listed[1].call_id, "call_1", "first seen in call_1");
        assert_eq!(listed[1].score, Some(0.5));
        assert_eq!(listed[2].snippet, None, "a column the row lacks is null");
        assert!(listed.iter().all(|s| !s.cited));
    }

    #[test]
    fn a_later_row_fills_in_what_the_first_lacked() {
        let mut sources = Sources::default();
        let reader = Citation::from_meta(&json!({"id": "note_id", "title": "title"})).unwrap();
        let mut read = json!({"rows": [{"note_id": 7, "title": "Seven", "score": 3}]});
        sources.cite_rows(&reader, "read_note", "call_1", &mut read);
        let mut found =
            json!({"rows": [{"note_id": 7, "title": "Other", "snippet": "s", "score": 0.25}]});
        sources.cite_rows(&citation(), "search_notes", "call_2", &mut found);
        let s = &sources.for_reply("[S1]")[0];
        assert_eq!(
            (
                s.title.as_deref(),
                s.snippet.as_deref(),
                s.score,
                s.tool.as_str()
            ),
            (Some("Seven"), Some("s"), Some(0.25), "read_note")
        );
    }

    #[test]
    fn cited_sources_come_first_in_citation_order_and_unknown_ids_are_ignored() {
        let mut sources = Sources::default();
        let mut output = json!({"rows": [
            {"note_id": "a"}, {"note_id": "b"}, {"note_id": "c"}, {"note_id": "d"}
        ]});
        sources.cite_rows(&citation(), "search_notes", "call_1", &mut output);
        let listed = sources.for_reply("First [S3], then [S9] and [S1][S3].");
        let ids: Vec<(&str, bool)> = listed.iter().map(|s| (s.id.as_str(), s.cited)).collect();
        assert_eq!(
            ids,
            [("S3", true), ("S1", true), ("S2", false), ("S4", false)]
        );
    }

    #[test]
    fn a_verified_query_that_answered_comes_first_once_and_stores_as_it_was() {
        let mut sources = Sources::default();
        let mut output = json!({"rows": [{"note_id": "a"}]});
        sources.cite_rows(&citation(), "search_notes", "call_1", &mut output);
        sources.verified("top_artists", "verified_top_artists", "call_2");
        sources.verified("top_artists", "verified_top_artists", "call_3");
        let listed = sources.for_reply("AC/DC sold most [S1].");
        let ids: Vec<(&str, bool)> = listed.iter().map(|s| (s.id.as_str(), s.cited)).collect();
        assert_eq!(ids, [("verified:top_artists", true), ("S1", true)]);
        let verified = &listed[0];
        assert_eq!(verified.title.as_deref(), Some("verified: top_artists"));
        assert_eq!(verified.call_id, "call_2", "its first call");
        let stored = serde_json::to_value(verified).unwrap();
        assert_eq!(stored["verified"], "top_artists");
        assert_eq!(serde_json::from_value::<Source>(stored).unwrap(), *verified);
        let row = serde_json::to_value(&listed[1]).unwrap();
        assert!(row.get("verified").is_none(), "a row says nothing of it");
        assert_eq!(serde_json::from_value::<Source>(row).unwrap(), listed[1]);

        let mut failed = Sources::default();
        failed.verified("top_artists", "verified_top_artists", "call_1");
        assert!(!failed.for_reply("")[0].cited, "no reply followed it");
    }

    #[test]
    fn replayed_turns_lose_their_numbers() {
        assert_eq!(
            strip_citations("Use it [S2]. See [S1, S3] too [S4][S5]"),
            "Use it. See too"
        );
        assert_eq!(strip_citations("a [S1]b [x]"), "a b [x]");
        let output = json!({"rows": [{"n": 1, "cite": "S1"}, 2], "row_count": 2});
        assert_eq!(
            strip_cites(&output),
            json!({"rows": [{"n": 1}, 2], "row_count": 2})
        );
        assert_eq!(strip_cites(&json!("text")), json!("text"));
    }
}
