//! A chart as `/v1` answers it: clients of the OpenAI API show text, not Vega-Lite, so each
//! chart of a turn becomes a Markdown table of the rows it draws (its `data.values`, at most
//! `V1_TABLE_ROWS` of them) and a line saying the chart itself is shown in the page. The table
//! leads with the columns the chart draws: a row's keys come in no meaningful order (they are
//! sorted, and stored as `jsonb`, which orders them its own way).

use std::fmt::Write as _;

use serde_json::{Map, Value};

use crate::turn::conversation::Chart;

/// The text that follows a reply for its charts: for each, its table and the line naming it,
/// each starting on a paragraph of its own; empty without charts.
pub fn tables(charts: &[Chart], max_rows: usize) -> String {
    let mut out = String::new();
    for chart in charts {
        out.push_str("\n\n");
        out.push_str(&table(chart, max_rows));
    }
    out
}

/// One chart's table, then the line saying what kind of chart is in the page.
fn table(chart: &Chart, max_rows: usize) -> String {
    let rows: Vec<&Map<String, Value>> = chart.spec["data"]["values"]
        .as_array()
        .map(|rows| rows.iter().filter_map(Value::as_object).collect())
        .unwrap_or_default();
    // The columns the chart draws first (x, y, ...), then every other key of the rows in the
    // order first seen.
    let encoding = &chart.spec["encoding"];
    let drawn = ["x", "y", "theta", "color"]
        .iter()
        .filter_map(|channel| encoding[*channel]["field"].as_str());
    let mut columns: Vec<&str> = Vec::new();
    for key in drawn.chain(rows.iter().flat_map(|row| row.keys().map(String::as_str))) {
        if !columns.contains(&key) && rows.iter().any(|row| row.contains_key(key)) {
            columns.push(key);
        }
    }
    let mut out = String::new();
    if !columns.is_empty() {
        let line = |cells: &mut dyn Iterator<Item = String>| {
            let cells: Vec<String> = cells.collect();
            format!("| {} |\n", cells.join(" | "))
        };
        out.push_str(&line(&mut columns.iter().map(|c| escape(c))));
        out.push_str(&line(&mut columns.iter().map(|_| "---".to_owned())));
        for row in rows.iter().take(max_rows) {
            out.push_str(&line(
                &mut columns
                    .iter()
                    .map(|c| row.get(*c).map(cell).unwrap_or_default()),
            ));
        }
        let more = rows.len().saturating_sub(max_rows);
        if more > 0 {
            let _ = writeln!(
                out,
                "\n… {more} more {}",
                if more == 1 { "row" } else { "rows" }
            );
        }
        out.push('\n');
    }
    out.push_str(&chart_line(&chart.spec));
    out
}

/// "A bar chart of these rows is available in the page.", with the chart's mark and title.
fn chart_line(spec: &Value) -> String {
    let mark = spec["mark"]
        .as_str()
        .or_else(|| spec["mark"]["type"].as_str())
        .filter(|m| m.chars().all(|c| c.is_ascii_alphabetic()));
    let kind = match mark {
        Some(mark) => format!("{mark} chart"),
        None => "chart".to_owned(),
    };
    let article = if kind.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "An"
    } else {
        "A"
    };
    let title = spec["title"]
        .as_str()
        .or_else(|| spec["title"]["text"].as_str())
        .map(|t| format!(", \"{}\",", one_line(t)))
        .unwrap_or_default();
    format!("{article} {kind}{title} of these rows is available in the page.")
}

/// A value as a table cell: text as it is, `null` empty, anything else as JSON.
fn cell(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(text) => escape(text),
        other => escape(&other.to_string()),
    }
}

/// Text that cannot break the table: a `|` (or a `\` before one) would end the cell, a line
/// break the row.
fn escape(text: &str) -> String {
    one_line(text).replace('\\', "\\\\").replace('|', "\\|")
}

fn one_line(text: &str) -> String {
    text.split(['\r', '\n']).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chart(spec: Value) -> Chart {
        Chart {
            id: "call_2".into(),
            call_id: "call_1".into(),
            spec,
        }
    }

    #[test]
    fn the_columns_the_chart_draws_come_first() {
        let c = chart(json!({
            "mark": "bar",
            "encoding": {"x": {"field": "key"}, "y": {"field": "count"},
                         "color": {"field": "absent"}},
            "data": {"values": [{"average": 2.5, "count": 3, "key": "roads"}]},
        }));
        assert!(
            tables(&[c], 50).starts_with("\n\n| key | count | average |\n"),
            "a column no row has is left out"
        );
    }

    #[test]
    fn rows_become_a_table_whose_columns_are_every_rows_keys_in_order() {
        let c = chart(json!({
            "mark": {"type": "bar"},
            "data": {"values": [
                {"district": "Leeds", "n": 3},
                {"district": "Bristol|Avon", "n": 2, "note": "two\nlines"},
                {"n": null, "district": "a\\|b"},
            ]},
        }));
        assert_eq!(
            tables(&[c], 50),
            "\n\n| district | n | note |\n| --- | --- | --- |\n| Leeds | 3 |  |\n\
             | Bristol\\|Avon | 2 | two lines |\n| a\\\\\\|b |  |  |\n\n\
             A bar chart of these rows is available in the page."
        );
    }

    #[test]
    fn a_long_table_is_cut_and_says_how_many_rows_are_left_out() {
        let rows: Vec<Value> = (0..5).map(|i| json!({"i": i})).collect();
        let c = chart(json!({"mark": "area", "title": "Items\nby day",
                             "data": {"values": rows}}));
        let text = tables(std::slice::from_ref(&c), 3);
        assert!(text.contains("| 2 |\n\n… 2 more rows\n\n"), "{text}");
        assert!(!text.contains("| 3 |"), "{text}");
        assert!(
            text.ends_with(
                "An area chart, \"Items by day\", of these rows is available in the page."
            ),
            "{text}"
        );
        assert!(tables(&[c], 4).contains("… 1 more row\n"));
        assert_eq!(tables(&[], 3), "");
    }
}
