//! `show_chart`: the one tool the chat itself offers the model. Its arguments name an earlier
//! call of the same turn and the picture (mark, x, y, ...); [`draw`] builds a Vega-Lite spec
//! whose `data.values` are exactly that call's rows, checks it against an allow-list, and
//! refuses anything else with a sentence the model can act on. The model never types a number
//! into a chart: the rows are the server's.

use serde_json::{Map, Value, json};

use crate::turn::conversation::Trace;
use crate::turn::llm::ToolDef;

/// The tool's name, as offered to the model.
pub const TOOL_NAME: &str = "show_chart";

/// How big a chart may be (settings, `crate::limits`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChartLimits {
    /// `CHART_MAX_ROWS`: most rows one chart draws.
    pub max_rows: usize,
    /// `CHART_MAX_SPEC_BYTES`: largest spec, rows included, as JSON.
    pub max_spec_bytes: usize,
}

impl Default for ChartLimits {
    fn default() -> Self {
        ChartLimits {
            max_rows: 5_000,
            max_spec_bytes: 1024 * 1024,
        }
    }
}

/// A chart drawn from a call's rows.
#[derive(Debug, Clone, PartialEq)]
pub struct Drawn {
    /// The call whose rows it draws.
    pub call_id: String,
    /// The Vega-Lite spec (its `data.values` are that call's rows).
    pub spec: Value,
    /// How many rows it draws.
    pub rows: usize,
}

impl Drawn {
    /// What the model is told of the chart: that it is shown, what it draws and its summary,
    /// not the spec (it has the rows already).
    pub fn tool_output(&self) -> Value {
        json!({
            "shown": true,
            "call_id": self.call_id,
            "rows": self.rows,
            "description": self.spec.get("description").cloned().unwrap_or(Value::Null),
            "note": "The user sees this chart under your reply; do not repeat its numbers as a table.",
        })
    }
}

/// The tool as offered to the model.
pub fn tool_def() -> ToolDef {
    ToolDef::new(
        TOOL_NAME,
        "Show the user a chart of the rows an earlier tool call of this turn returned. Name that \
call by its call_id and say how to draw it; the chart's data are exactly that call's rows, so \
never type numbers for a chart.",
        &json!({
            "type": "object",
            "properties": {
                "call_id": {"type": "string", "description": "The id of an earlier tool call of this turn whose result has rows."},
                "mark": {"type": "string", "enum": ["bar", "line", "area", "point", "arc"]},
                "x": {"type": "string", "description": "The column on the x axis (for arc, the category)."},
                "y": {"type": "string", "description": "The column on the y axis (for arc, the size of each slice)."},
                "color": {"type": "string", "description": "A column whose values color the marks (one series each)."},
                "title": {"type": "string"},
                "aggregate": {"type": "string", "enum": ["sum", "mean", "median", "min", "max", "count"]},
                "sort": {"type": "string", "enum": ["x", "-x", "y", "-y"], "description": "Order of the x axis: by x or by y, - for descending."},
            },
            "required": ["call_id", "mark", "x", "y"],
            "additionalProperties": false,
        }),
    )
}

/// Draws the chart `args` asks for from the rows of `earlier` (this turn's calls so far), or
/// says why not, in words the model can correct its call from.
pub fn draw(
    args: &Map<String, Value>,
    earlier: &[Trace],
    limits: &ChartLimits,
) -> Result<Drawn, String> {
    let call_id = args
        .get("call_id")
        .and_then(Value::as_str)
        .ok_or("`call_id` is required: the id of an earlier tool call of this turn")?;
    let trace = earlier
        .iter()
        .find(|t| t.call_id == call_id)
        .ok_or_else(|| format!("no tool call `{call_id}` in this turn"))?;
    let rows =
        rows_of(&trace.output).ok_or_else(|| format!("call `{call_id}` returned no rows"))?;
    if rows.len() > limits.max_rows {
        return Err(format!(
            "call `{call_id}` returned {} rows; a chart draws at most {}",
            rows.len(),
            limits.max_rows
        ));
    }
    let mark = args.get("mark").and_then(Value::as_str).unwrap_or("bar");
    let x = args.get("x").and_then(Value::as_str).unwrap_or_default();
    let y = args.get("y").and_then(Value::as_str).unwrap_or_default();
    let spec = json!({
        "$schema": "https://vega.github.io/schema/vega-lite/v6.json",
        "data": {"values": rows},
        "mark": {"type": mark, "tooltip": true},
        "encoding": {
            "x": {"field": x, "type": "nominal", "title": x},
            "y": {"field": y, "type": "quantitative", "title": y},
        },
    });
    Ok(Drawn {
        call_id: call_id.to_owned(),
        rows: rows.len(),
        spec,
    })
}

/// A tool output's rows: a list of objects, alone or as `rows`.
fn rows_of(output: &Value) -> Option<&Vec<Value>> {
    let rows = match output {
        Value::Array(rows) => rows,
        Value::Object(o) => o.get("rows")?.as_array()?,
        _ => return None,
    };
    (!rows.is_empty() && rows.iter().all(Value::is_object)).then_some(rows)
}
