//! `show_chart`: the one tool the chat itself offers the model. Its arguments name an earlier
//! call of the same turn and the picture (mark, x, y, ...); [`draw`] builds a Vega-Lite spec
//! whose `data.values` are exactly that call's rows, checks it against an allow-list, and
//! refuses anything else with a sentence the model can act on. The model never types a number
//! into a chart: the rows are the server's.
//!
//! The model may add a `spec` fragment (more encodings, a few transforms, axis and legend
//! titles). Every key of it is on an allow-list, and the whole spec is then walked once more:
//! no `url` or `href` anywhere, no `image` mark, no expression strings (`expr`, `signal`,
//! `calculate`, a `filter` written as text), no string that is a web or data address, and
//! every `field` a column of the rows or a name a transform makes. A front end that renders
//! the spec with stock Vega (which compiles expressions with `Function`) so runs nothing the
//! model wrote, and fetches nothing.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::turn::conversation::Trace;
use crate::turn::llm::ToolDef;

/// The tool's name, as offered to the model.
pub const TOOL_NAME: &str = "show_chart";

/// The marks a chart may use.
const MARKS: &[&str] = &["bar", "line", "area", "point", "arc"];

/// `aggregate` values: what becomes of several rows at one x.
const AGGREGATES: &[&str] = &["sum", "mean", "median", "min", "max", "count"];

/// Longest `title`, in characters.
const MAX_TITLE_CHARS: usize = 200;

/// The Vega-Lite version the spec is written for; front ends read it to pick their compiler.
const SCHEMA: &str = "https://vega.github.io/schema/vega-lite/v6.json";

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
            "note": "The user sees this chart with your reply; do not repeat its numbers as a table.",
        })
    }
}

/// The tool as offered to the model.
pub fn tool_def() -> ToolDef {
    ToolDef::new(
        TOOL_NAME,
        "Show the user a chart of the rows an earlier tool call of this turn returned. Name \
that call by its call_id and say how to draw it: the chart's data are exactly that call's rows, \
so never type numbers for a chart. Use it when a trend, a ranking or a share reads better as a \
picture, or when the user asks for a chart.",
        &json!({
            "type": "object",
            "properties": {
                "call_id": {"type": "string", "description": "The id of an earlier tool call of this turn whose result has rows."},
                "mark": {"type": "string", "enum": MARKS, "description": "bar (compare categories), line or area (a trend over time), point (two measures), arc (shares of a whole)."},
                "x": {"type": "string", "description": "The column on the x axis (for arc, the category of each slice)."},
                "y": {"type": "string", "description": "The column of numbers on the y axis (for arc, the size of each slice)."},
                "color": {"type": "string", "description": "A column whose values color the marks, one series each."},
                "title": {"type": "string", "maxLength": MAX_TITLE_CHARS},
                "aggregate": {"type": "string", "enum": AGGREGATES, "description": "How rows sharing an x combine into one mark; leave it out when each row is one mark."},
                "sort": {"type": "string", "enum": ["x", "-x", "y", "-y"], "description": "The order along x: by x or by y, - for descending."},
                "spec": {"type": "object", "description": "Optional Vega-Lite additions: `encoding` channels (tooltip, opacity, size, shape, strokeDash, detail, order, text, xOffset, and axis/legend/scale/format/timeUnit/bin details of x, y and color), `transform` (filter with a field predicate, aggregate, bin, timeUnit, fold, window, joinaggregate), `width`, `height`, and mark properties. No data, urls or expressions."},
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
    let ask = Ask::parse(args)?;
    let trace = earlier
        .iter()
        .find(|t| t.call_id == ask.call_id)
        .ok_or_else(|| {
            let ids: Vec<&str> = earlier
                .iter()
                .filter(|t| !t.is_error && t.name != TOOL_NAME)
                .map(|t| t.call_id.as_str())
                .collect();
            format!(
                "no tool call `{}` in this turn; call_id must name an earlier call of this turn{}",
                ask.call_id,
                listed(" (its calls: ", &ids, ")")
            )
        })?;
    if trace.is_error {
        return Err(format!(
            "call `{}` failed, so it has no rows to draw",
            ask.call_id
        ));
    }
    let rows = rows_of(&trace.output).ok_or_else(|| {
        format!(
            "call `{}` ({}) returned no rows to draw",
            ask.call_id, trace.name
        )
    })?;
    if rows.len() > limits.max_rows {
        return Err(format!(
            "call `{}` returned {} rows; a chart draws at most {} (CHART_MAX_ROWS): call the tool \
again with fewer rows (a filter or an aggregate)",
            ask.call_id,
            rows.len(),
            limits.max_rows
        ));
    }
    let columns = columns_of(rows);
    let mut spec = build(&ask, rows, &columns)?;
    if let Some(fragment) = &ask.fragment {
        merge_fragment(&mut spec, fragment)?;
    }
    check_fields(&spec, &columns)?;
    check_walk(&spec, "spec")?;
    let size = serde_json::to_vec(&spec).map_or(usize::MAX, |v| v.len());
    if size > limits.max_spec_bytes {
        return Err(format!(
            "the chart would be {size} bytes of JSON, more than the {} a chart may be \
(CHART_MAX_SPEC_BYTES): draw fewer rows or leave out the spec additions",
            limits.max_spec_bytes
        ));
    }
    Ok(Drawn {
        call_id: ask.call_id,
        rows: rows.len(),
        spec,
    })
}

/// The arguments, read.
struct Ask {
    call_id: String,
    mark: &'static str,
    x: String,
    y: String,
    color: Option<String>,
    title: Option<String>,
    aggregate: Option<&'static str>,
    sort: Option<Sort>,
    fragment: Option<Map<String, Value>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sort {
    X { descending: bool },
    Y { descending: bool },
}

impl Ask {
    fn parse(args: &Map<String, Value>) -> Result<Ask, String> {
        if let Some(unknown) = args.keys().find(|k| {
            ![
                "call_id",
                "mark",
                "x",
                "y",
                "color",
                "title",
                "aggregate",
                "sort",
                "spec",
            ]
            .contains(&k.as_str())
        }) {
            return Err(format!(
                "unknown argument `{unknown}`: show_chart takes call_id, mark, x, y, color, title, \
aggregate, sort and spec"
            ));
        }
        let text = |name: &str, required: bool| -> Result<Option<String>, String> {
            match args.get(name) {
                None | Some(Value::Null) if !required => Ok(None),
                None | Some(Value::Null) => Err(format!("`{name}` is required")),
                Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.clone())),
                Some(_) => Err(format!("`{name}` must be a non-empty string")),
            }
        };
        let one_of = |name: &str,
                      allowed: &'static [&'static str]|
         -> Result<Option<&'static str>, String> {
            let Some(given) = text(name, false)? else {
                return Ok(None);
            };
            allowed
                .iter()
                .find(|a| **a == given)
                .copied()
                .map(Some)
                .ok_or_else(|| {
                    format!(
                        "{name} `{given}` is not allowed: use one of {}",
                        allowed.join(", ")
                    )
                })
        };
        let mark = one_of("mark", MARKS)?.ok_or("`mark` is required")?;
        let aggregate = one_of("aggregate", AGGREGATES)?;
        let sort = match text("sort", false)?.as_deref() {
            None => None,
            Some("x") => Some(Sort::X { descending: false }),
            Some("-x") => Some(Sort::X { descending: true }),
            Some("y") => Some(Sort::Y { descending: false }),
            Some("-y") => Some(Sort::Y { descending: true }),
            Some(other) => {
                return Err(format!("sort `{other}` is not allowed: use x, -x, y or -y"));
            }
        };
        let title = text("title", false)?;
        if let Some(title) = &title
            && title.chars().count() > MAX_TITLE_CHARS
        {
            return Err(format!(
                "`title` is longer than {MAX_TITLE_CHARS} characters"
            ));
        }
        let fragment = match args.get("spec") {
            None | Some(Value::Null) => None,
            Some(Value::Object(map)) => Some(map.clone()),
            Some(_) => return Err("`spec` must be an object of Vega-Lite additions".into()),
        };
        Ok(Ask {
            call_id: text("call_id", true)?.unwrap_or_default(),
            mark,
            x: text("x", true)?.unwrap_or_default(),
            y: text("y", true)?.unwrap_or_default(),
            color: text("color", false)?,
            title,
            aggregate,
            sort,
            fragment,
        })
    }
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

/// The rows' columns, in the order they first appear.
fn columns_of(rows: &[Value]) -> Vec<String> {
    let mut columns: Vec<String> = Vec::new();
    for row in rows.iter().filter_map(Value::as_object) {
        for key in row.keys() {
            if !columns.iter().any(|c| c == key) {
                columns.push(key.clone());
            }
        }
    }
    columns
}

/// What a column holds, as far as a chart cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Number,
    /// ISO 8601 dates or timestamps (`2012-05-01`, `2012-05-01T10:00:00`).
    Date,
    Text,
}

fn kind_of(rows: &[Value], column: &str) -> Kind {
    let values = || {
        rows.iter()
            .filter_map(|r| r.get(column))
            .filter(|v| !v.is_null())
    };
    if values().next().is_none() {
        return Kind::Text;
    }
    if values().all(Value::is_number) {
        Kind::Number
    } else if values().all(|v| v.as_str().is_some_and(is_iso_date)) {
        Kind::Date
    } else {
        Kind::Text
    }
}

/// `YYYY-MM-DD`, optionally followed by a time: what Postgres renders dates and timestamps as.
fn is_iso_date(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 10
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[5..7].iter().all(u8::is_ascii_digit)
        && b[7] == b'-'
        && b[8..10].iter().all(u8::is_ascii_digit)
        && (b.len() == 10 || b[10] == b'T' || b[10] == b' ')
}

/// The first value of `column` that is not a number, for the error that names it.
fn first_non_number<'a>(rows: &'a [Value], column: &str) -> Option<&'a Value> {
    rows.iter()
        .filter_map(|r| r.get(column))
        .find(|v| !v.is_null() && !v.is_number())
}

fn known_column(columns: &[String], name: &str, role: &str, call_id: &str) -> Result<(), String> {
    if columns.iter().any(|c| c == name) {
        return Ok(());
    }
    let names: Vec<&str> = columns.iter().map(String::as_str).collect();
    Err(format!(
        "{role} `{name}` is not a column of call `{call_id}`'s rows{}",
        listed(" (its columns: ", &names, ")")
    ))
}

/// The spec the arguments describe, before any fragment.
fn build(ask: &Ask, rows: &[Value], columns: &[String]) -> Result<Value, String> {
    let counting = ask.aggregate == Some("count");
    known_column(columns, &ask.x, "x", &ask.call_id)?;
    if !counting {
        known_column(columns, &ask.y, "y", &ask.call_id)?;
        if let Some(text) = first_non_number(rows, &ask.y) {
            return Err(format!(
                "y `{}` holds values that are not numbers (such as {text}); y must be a column \
of numbers (put `{}` on x or color, or use aggregate count)",
                ask.y, ask.y
            ));
        }
    }
    if let Some(color) = &ask.color {
        known_column(columns, color, "color", &ask.call_id)?;
    }
    let x_kind = kind_of(rows, &ask.x);
    // One bar or slice per distinct x: dates and numbers are categories there, in order.
    let x_type = match (ask.mark, x_kind) {
        ("bar" | "arc", Kind::Number | Kind::Date) => "ordinal",
        (_, Kind::Number) => "quantitative",
        (_, Kind::Date) => "temporal",
        (_, Kind::Text) => "nominal",
    };
    let mut measure = Map::new();
    if counting {
        measure.insert("aggregate".into(), json!("count"));
        measure.insert("title".into(), json!("count"));
    } else {
        measure.insert("field".into(), json!(ask.y));
        if let Some(aggregate) = ask.aggregate {
            measure.insert("aggregate".into(), json!(aggregate));
        }
        measure.insert("title".into(), json!(ask.y));
    }
    measure.insert("type".into(), json!("quantitative"));
    let mut encoding = Map::new();
    if ask.mark == "arc" {
        encoding.insert("theta".into(), Value::Object(measure));
        let mut slice = json!({"field": ask.x, "type": x_type, "title": ask.x});
        match ask.sort {
            Some(Sort::X { descending }) => slice["sort"] = json!(order(descending)),
            Some(Sort::Y { descending }) => {
                slice["sort"] = json!(if descending { "-theta" } else { "theta" });
            }
            None => {}
        }
        encoding.insert("color".into(), slice);
    } else {
        let mut x = json!({"field": ask.x, "type": x_type, "title": ask.x});
        match ask.sort {
            Some(Sort::X { descending }) => x["sort"] = json!(order(descending)),
            Some(Sort::Y { descending }) => x["sort"] = json!(if descending { "-y" } else { "y" }),
            None => {}
        }
        encoding.insert("x".into(), x);
        encoding.insert("y".into(), Value::Object(measure));
        if let Some(color) = &ask.color {
            let kind = kind_of(rows, color);
            let color_type = if kind == Kind::Number {
                "quantitative"
            } else {
                "nominal"
            };
            encoding.insert(
                "color".into(),
                json!({"field": color, "type": color_type, "title": color}),
            );
        }
    }
    let mut mark = json!({"type": ask.mark, "tooltip": true});
    // A line's rows are its points: one symbol each, so every row shows and can be pointed at.
    if matches!(ask.mark, "line" | "area") {
        mark["point"] = json!(true);
    }
    let mut spec = Map::new();
    spec.insert("$schema".into(), json!(SCHEMA));
    if let Some(title) = &ask.title {
        spec.insert("title".into(), json!(title));
    }
    spec.insert("description".into(), json!(summary(ask, rows)));
    spec.insert("width".into(), json!("container"));
    spec.insert("height".into(), json!(260));
    spec.insert("data".into(), json!({"values": rows}));
    spec.insert("mark".into(), mark);
    spec.insert("encoding".into(), Value::Object(encoding));
    Ok(Value::Object(spec))
}

fn order(descending: bool) -> &'static str {
    if descending {
        "descending"
    } else {
        "ascending"
    }
}

/// One sentence a screen reader reads for the chart, and a table-less client shows: what it
/// draws, from how many rows, and (one mark per row) where it peaks and dips.
fn summary(ask: &Ask, rows: &[Value]) -> String {
    let kind = match ask.mark {
        "bar" => "Bar chart",
        "line" => "Line chart",
        "area" => "Area chart",
        "point" => "Scatter plot",
        _ => "Pie chart",
    };
    let measure = match ask.aggregate {
        Some("count") => "the number of rows".to_owned(),
        Some(aggregate) => format!("the {aggregate} of {}", ask.y),
        None => ask.y.clone(),
    };
    let n = rows.len();
    let mut text = format!(
        "{kind} of {measure} by {}{}, from {n} row{}.",
        ask.x,
        ask.color
            .as_deref()
            .map(|c| format!(", colored by {c}"))
            .unwrap_or_default(),
        if n == 1 { "" } else { "s" }
    );
    if ask.aggregate.is_none() && ask.color.is_none() && n > 1 {
        let points: Vec<(f64, &Value)> = rows
            .iter()
            .filter_map(|r| Some((r.get(&ask.y)?.as_f64()?, r)))
            .collect();
        let high = points.iter().max_by(|a, b| a.0.total_cmp(&b.0));
        let low = points.iter().min_by(|a, b| a.0.total_cmp(&b.0));
        if let (Some(high), Some(low)) = (high, low) {
            let at = |r: &Value| match r.get(&ask.x) {
                Some(Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
                None => "?".into(),
            };
            let value = |r: &Value| r.get(&ask.y).map(Value::to_string).unwrap_or_default();
            text.push_str(&format!(
                " Highest: {} at {}; lowest: {} at {}.",
                value(high.1),
                at(high.1),
                value(low.1),
                at(low.1)
            ));
        }
    }
    text
}

/// The keys of a fragment's top level, and what each may hold.
const FRAGMENT_KEYS: &[&str] = &["encoding", "transform", "width", "height", "mark"];

/// Encoding channels a fragment may set or refine.
const CHANNELS: &[&str] = &[
    "x",
    "y",
    "color",
    "theta",
    "tooltip",
    "opacity",
    "size",
    "shape",
    "strokeDash",
    "detail",
    "order",
    "text",
    "xOffset",
    "yOffset",
];

/// What a channel definition may say.
const CHANNEL_KEYS: &[&str] = &[
    "field",
    "type",
    "aggregate",
    "bin",
    "timeUnit",
    "title",
    "sort",
    "stack",
    "format",
    "axis",
    "legend",
    "scale",
];

/// What an `axis`, `legend` or `scale` of a channel may say (no `labelExpr` and kin).
const PART_KEYS: &[(&str, &[&str])] = &[
    (
        "axis",
        &[
            "title",
            "format",
            "labelAngle",
            "grid",
            "tickCount",
            "labelLimit",
            "orient",
            "labels",
            "ticks",
        ],
    ),
    (
        "legend",
        &["title", "orient", "direction", "columns", "format"],
    ),
    (
        "scale",
        &[
            "type", "zero", "domain", "scheme", "reverse", "nice", "padding", "base", "exponent",
        ],
    ),
];

/// Mark properties a fragment may set (`type` stays the argument's).
const MARK_KEYS: &[&str] = &[
    "point",
    "interpolate",
    "strokeWidth",
    "opacity",
    "orient",
    "innerRadius",
    "outerRadius",
    "cornerRadius",
    "size",
    "filled",
];

/// Transforms a fragment may add, each with the keys it may have. None evaluates an expression.
const TRANSFORMS: &[(&str, &[&str])] = &[
    ("filter", &["filter"]),
    ("aggregate", &["aggregate", "groupby"]),
    ("bin", &["bin", "field", "as"]),
    ("timeUnit", &["timeUnit", "field", "as"]),
    ("fold", &["fold", "as"]),
    (
        "window",
        &["window", "frame", "groupby", "sort", "ignorePeers"],
    ),
    ("joinaggregate", &["joinaggregate", "groupby"]),
];

/// Predicates a `filter` may use, on one field each.
const PREDICATE_KEYS: &[&str] = &[
    "field", "equal", "lt", "lte", "gt", "gte", "range", "oneOf", "valid", "timeUnit",
];

fn refuse_keys(map: &Map<String, Value>, allowed: &[&str], at: &str) -> Result<(), String> {
    match map.keys().find(|k| !allowed.contains(&k.as_str())) {
        None => Ok(()),
        Some(key) => Err(format!(
            "`{at}.{key}` is not allowed in a chart: {at} may have {}",
            allowed.join(", ")
        )),
    }
}

/// Adds the model's `spec` fragment to the built spec, every key checked against its list.
fn merge_fragment(spec: &mut Value, fragment: &Map<String, Value>) -> Result<(), String> {
    refuse_keys(fragment, FRAGMENT_KEYS, "spec")?;
    for (key, value) in fragment {
        match key.as_str() {
            "width" | "height" => match value {
                Value::Number(n) if n.as_f64().is_some_and(|n| (10.0..=2000.0).contains(&n)) => {
                    spec[key] = value.clone();
                }
                Value::String(s) if s == "container" => spec[key] = value.clone(),
                _ => {
                    return Err(format!(
                        "`spec.{key}` must be a number of pixels from 10 to 2000, or \"container\""
                    ));
                }
            },
            "mark" => {
                let Value::Object(props) = value else {
                    return Err(
                        "`spec.mark` must be an object of mark properties (the mark itself is the `mark` argument)"
                            .into(),
                    );
                };
                refuse_keys(props, MARK_KEYS, "spec.mark")?;
                for (prop, v) in props {
                    spec["mark"][prop] = v.clone();
                }
            }
            "encoding" => {
                let Value::Object(channels) = value else {
                    return Err("`spec.encoding` must be an object of channels".into());
                };
                refuse_keys(channels, CHANNELS, "spec.encoding")?;
                for (channel, def) in channels {
                    merge_channel(&mut spec["encoding"], channel, def)?;
                }
            }
            "transform" => {
                let Value::Array(steps) = value else {
                    return Err("`spec.transform` must be a list of transforms".into());
                };
                for step in steps {
                    check_transform(step)?;
                }
                spec["transform"] = value.clone();
            }
            _ => unreachable!("refuse_keys let only FRAGMENT_KEYS through"),
        }
    }
    Ok(())
}

/// One channel of the fragment: a definition (or, for tooltip, a list of them) refining or
/// adding that channel.
fn merge_channel(encoding: &mut Value, channel: &str, def: &Value) -> Result<(), String> {
    let at = format!("spec.encoding.{channel}");
    let check = |def: &Value| -> Result<(), String> {
        let Value::Object(keys) = def else {
            return Err(format!(
                "`{at}` must be an object such as {{\"field\": \"name\"}}"
            ));
        };
        refuse_keys(keys, CHANNEL_KEYS, &at)?;
        for (part, allowed) in PART_KEYS {
            match keys.get(*part) {
                None | Some(Value::Null) => {}
                Some(Value::Object(inner)) => {
                    refuse_keys(inner, allowed, &format!("{at}.{part}"))?;
                }
                Some(_) => return Err(format!("`{at}.{part}` must be an object or null")),
            }
        }
        Ok(())
    };
    match def {
        Value::Array(defs) if channel == "tooltip" => {
            for d in defs {
                check(d)?;
            }
            encoding[channel] = def.clone();
        }
        Value::Object(keys) => {
            check(def)?;
            match encoding.get_mut(channel) {
                Some(Value::Object(existing)) => {
                    for (k, v) in keys {
                        existing.insert(k.clone(), v.clone());
                    }
                }
                _ => encoding[channel] = def.clone(),
            }
        }
        _ => {
            return Err(format!(
                "`{at}` must be an object such as {{\"field\": \"name\"}}"
            ));
        }
    }
    Ok(())
}

fn check_transform(step: &Value) -> Result<(), String> {
    let names: Vec<&str> = TRANSFORMS.iter().map(|(name, _)| *name).collect();
    let Value::Object(map) = step else {
        return Err("each of `spec.transform` must be an object".into());
    };
    let Some((name, keys)) = TRANSFORMS.iter().find(|(name, _)| map.contains_key(*name)) else {
        return Err(format!(
            "a transform of `spec.transform` is not allowed: use {}",
            names.join(", ")
        ));
    };
    refuse_keys(map, keys, &format!("spec.transform[{name}]"))?;
    if *name == "filter" {
        check_predicate(&map["filter"])?;
    }
    Ok(())
}

/// A filter must be a field predicate (or and/or/not of them): a text filter is an expression.
fn check_predicate(predicate: &Value) -> Result<(), String> {
    let Value::Object(map) = predicate else {
        return Err(
            "a filter must be a field predicate such as {\"field\": \"year\", \"gte\": 2010}, not an expression"
                .into(),
        );
    };
    for combinator in ["and", "or"] {
        if let Some(list) = map.get(combinator) {
            let Value::Array(parts) = list else {
                return Err(format!("a filter's `{combinator}` must be a list"));
            };
            if map.len() != 1 {
                return Err(format!("a filter's `{combinator}` stands alone"));
            }
            return parts.iter().try_for_each(check_predicate);
        }
    }
    if let Some(inner) = map.get("not") {
        return check_predicate(inner);
    }
    if !map.contains_key("field") {
        return Err("a filter predicate must name its `field`".into());
    }
    refuse_keys(map, PREDICATE_KEYS, "spec.transform[filter]")
}

/// Every `field` the spec names is a column of the rows or a name one of its transforms makes.
fn check_fields(spec: &Value, columns: &[String]) -> Result<(), String> {
    let mut known: BTreeSet<String> = columns.iter().cloned().collect();
    for step in spec
        .get("transform")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        made_by(step, &mut known);
    }
    let mut named = Vec::new();
    fields_in(spec.get("encoding"), &mut named);
    fields_in(spec.get("transform"), &mut named);
    match named.into_iter().find(|f| !known.contains(f)) {
        None => Ok(()),
        Some(field) => {
            let names: Vec<&str> = columns.iter().map(String::as_str).collect();
            Err(format!(
                "field `{field}` is not a column of the rows{}",
                listed(" (the columns: ", &names, ")")
            ))
        }
    }
}

/// The names a transform adds to the rows it passes on.
fn made_by(step: &Value, known: &mut BTreeSet<String>) {
    let mut add = |v: Option<&Value>| match v {
        Some(Value::String(s)) => {
            known.insert(s.clone());
        }
        Some(Value::Array(list)) => {
            known.extend(list.iter().filter_map(Value::as_str).map(str::to_owned));
        }
        _ => {}
    };
    if step.get("fold").is_some() {
        match step.get("as") {
            Some(names) => add(Some(names)),
            None => add(Some(&json!(["key", "value"]))),
        }
        return;
    }
    add(step.get("as"));
    for list in ["aggregate", "window", "joinaggregate"] {
        for op in step
            .get(list)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            add(op.get("as"));
        }
    }
}

/// Every value of a `field` key under `value`, except inside `data`.
fn fields_in(value: Option<&Value>, out: &mut Vec<String>) {
    match value {
        Some(Value::Object(map)) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("field", Value::String(s)) => out.push(s.clone()),
                    ("groupby" | "fold", Value::Array(list)) => {
                        out.extend(list.iter().filter_map(Value::as_str).map(str::to_owned));
                    }
                    _ => fields_in(Some(v), out),
                }
            }
        }
        Some(Value::Array(list)) => list.iter().for_each(|v| fields_in(Some(v), out)),
        _ => {}
    }
}

/// Keys that load, link or evaluate, wherever they are.
const FORBIDDEN_KEYS: &[&str] = &[
    "url",
    "labelExpr",
    "test",
    "condition",
    "param",
    "selection",
    "href",
    "expr",
    "signal",
    "calculate",
    "params",
    "datasets",
    "usermeta",
    "config",
    "image",
];

/// The whole spec, once more: nothing that loads, links or runs, and only the rows as data.
fn check_walk(value: &Value, at: &str) -> Result<(), String> {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                if FORBIDDEN_KEYS.contains(&key.as_str()) {
                    return Err(format!(
                        "`{at}.{key}` is not allowed in a chart: a chart loads nothing, links \
nowhere and evaluates no expression; its data are the call's rows"
                    ));
                }
                // The rows are the database's: any text in them is data, not an address.
                if at == "spec" && key == "data" {
                    continue;
                }
                if at == "spec" && key == "$schema" {
                    if v != SCHEMA {
                        return Err("`$schema` is the server's".into());
                    }
                    continue;
                }
                if (key == "type" || key == "mark") && v == "image" {
                    return Err(
                        "the image mark is not allowed: use bar, line, area, point or arc".into(),
                    );
                }
                check_walk(v, &format!("{at}.{key}"))?;
            }
            Ok(())
        }
        Value::Array(list) => list.iter().try_for_each(|v| check_walk(v, at)),
        Value::String(s) => {
            let lower = s.trim_start().to_ascii_lowercase();
            if ["http:", "https:", "data:", "javascript:", "file:", "//"]
                .iter()
                .any(|p| lower.starts_with(p))
            {
                return Err(format!(
                    "`{at}` holds an address ({}); a chart loads and links nothing",
                    s.chars().take(60).collect::<String>()
                ));
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// `prefix` + the names joined + `suffix`, or nothing for no names (at most 20 named).
fn listed(prefix: &str, names: &[&str], suffix: &str) -> String {
    if names.is_empty() {
        return String::new();
    }
    let shown: Vec<&str> = names.iter().take(20).copied().collect();
    let more = if names.len() > shown.len() {
        format!(", and {} more", names.len() - shown.len())
    } else {
        String::new()
    };
    format!("{prefix}{}{more}{suffix}", shown.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(call_id: &str, output: Value) -> Trace {
        Trace {
            call_id: call_id.into(),
            step: 1,
            name: "sales_by_month".into(),
            args: json!({}),
            output,
            is_error: false,
            duration_ms: 1,
            approval: None,
        }
    }

    fn sales() -> Vec<Trace> {
        vec![trace(
            "c1",
            json!({"rows": [
                {"month": "2012-01-01", "genre": "Rock", "total": 120.5},
                {"month": "2012-02-01", "genre": "Jazz", "total": 98},
                {"month": "2012-03-01", "genre": "Rock", "total": 143.25},
            ], "row_count": 3, "truncated": false}),
        )]
    }

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn drawn(v: Value) -> Drawn {
        draw(&args(v), &sales(), &ChartLimits::default()).unwrap()
    }

    fn refused(v: Value) -> String {
        draw(&args(v), &sales(), &ChartLimits::default()).unwrap_err()
    }

    #[test]
    fn the_data_are_exactly_the_calls_rows() {
        let chart = drawn(json!({"call_id": "c1", "mark": "bar", "x": "month", "y": "total"}));
        assert_eq!(chart.spec["data"]["values"], sales()[0].output["rows"]);
        assert_eq!(chart.rows, 3);
        assert_eq!(chart.call_id, "c1");
        assert_eq!(chart.spec["encoding"]["x"]["field"], "month");
        assert_eq!(chart.spec["encoding"]["x"]["title"], "month");
        // One bar per month: dates are categories for bars.
        assert_eq!(chart.spec["encoding"]["x"]["type"], "ordinal");
        assert_eq!(chart.spec["encoding"]["y"]["type"], "quantitative");
        assert_eq!(chart.spec["$schema"], SCHEMA);
    }

    #[test]
    fn a_line_over_dates_is_temporal_with_a_point_per_row() {
        let chart = drawn(
            json!({"call_id": "c1", "mark": "line", "x": "month", "y": "total",
                                 "title": "Sales", "sort": "x"}),
        );
        assert_eq!(chart.spec["encoding"]["x"]["type"], "temporal");
        assert_eq!(chart.spec["encoding"]["x"]["sort"], "ascending");
        assert_eq!(chart.spec["mark"]["point"], true);
        assert_eq!(chart.spec["title"], "Sales");
    }

    #[test]
    fn the_summary_names_the_peak_and_the_dip() {
        let chart = drawn(json!({"call_id": "c1", "mark": "bar", "x": "month", "y": "total"}));
        assert_eq!(
            chart.spec["description"],
            "Bar chart of total by month, from 3 rows. Highest: 143.25 at 2012-03-01; lowest: 98 at 2012-02-01."
        );
        let chart = drawn(
            json!({"call_id": "c1", "mark": "bar", "x": "genre", "y": "total", "aggregate": "sum", "sort": "-y"}),
        );
        assert_eq!(
            chart.spec["description"],
            "Bar chart of the sum of total by genre, from 3 rows."
        );
        assert_eq!(chart.spec["encoding"]["x"]["sort"], "-y");
        assert_eq!(chart.spec["encoding"]["y"]["aggregate"], "sum");
    }

    #[test]
    fn an_arc_puts_the_measure_on_theta_and_the_category_on_color() {
        let chart = drawn(
            json!({"call_id": "c1", "mark": "arc", "x": "genre", "y": "total", "aggregate": "sum"}),
        );
        assert_eq!(chart.spec["encoding"]["theta"]["field"], "total");
        assert_eq!(chart.spec["encoding"]["color"]["field"], "genre");
        assert!(chart.spec["encoding"].get("x").is_none());
    }

    #[test]
    fn count_needs_no_numbers() {
        let chart = drawn(
            json!({"call_id": "c1", "mark": "bar", "x": "genre", "y": "genre", "aggregate": "count"}),
        );
        assert_eq!(chart.spec["encoding"]["y"]["aggregate"], "count");
        assert!(chart.spec["encoding"]["y"].get("field").is_none());
    }

    #[test]
    fn what_the_model_can_correct_is_refused_in_words() {
        let e = refused(json!({"call_id": "c9", "mark": "bar", "x": "month", "y": "total"}));
        assert!(e.contains("no tool call `c9`") && e.contains("c1"), "{e}");
        let e = refused(json!({"call_id": "c1", "mark": "bar", "x": "month", "y": "amount"}));
        assert!(
            e.contains("y `amount` is not a column") && e.contains("genre, month, total"),
            "{e}"
        );
        let e = refused(json!({"call_id": "c1", "mark": "image", "x": "month", "y": "total"}));
        assert!(
            e.contains("mark `image` is not allowed") && e.contains("bar, line"),
            "{e}"
        );
        let e = refused(json!({"call_id": "c1", "mark": "bar", "x": "month", "y": "genre"}));
        assert!(e.contains("not numbers") && e.contains("\"Rock\""), "{e}");
        let e = refused(
            json!({"call_id": "c1", "mark": "bar", "x": "month", "y": "total", "colour": "x"}),
        );
        assert!(e.contains("unknown argument `colour`"), "{e}");
        let e = refused(json!({"call_id": "c1", "mark": "bar", "x": "month"}));
        assert_eq!(e, "`y` is required");
    }

    #[test]
    fn a_spec_fragment_may_refine_but_not_load_link_or_evaluate() {
        let chart = drawn(
            json!({"call_id": "c1", "mark": "bar", "x": "genre", "y": "total",
            "spec": {"encoding": {"tooltip": [{"field": "month"}, {"field": "total"}],
                                  "y": {"axis": {"format": ",.2f"}}},
                     "transform": [{"filter": {"field": "total", "gte": 100}}],
                     "mark": {"cornerRadius": 2}}}),
        );
        assert_eq!(chart.spec["encoding"]["y"]["axis"]["format"], ",.2f");
        assert_eq!(chart.spec["encoding"]["y"]["field"], "total");
        assert_eq!(chart.spec["mark"]["cornerRadius"], 2);
        assert_eq!(chart.spec["transform"][0]["filter"]["gte"], 100);

        let base = json!({"call_id": "c1", "mark": "bar", "x": "genre", "y": "total"});
        let with = |fragment: Value| {
            let mut a = base.clone();
            a["spec"] = fragment;
            refused(a)
        };
        let e = with(json!({"data": {"url": "https://example.org/x.csv"}}));
        assert!(e.contains("`spec.data` is not allowed"), "{e}");
        let e = with(json!({"encoding": {"x": {"field": "genre", "axis": {"labelExpr": "1"}}}}));
        assert!(
            e.contains("`spec.encoding.x.axis.labelExpr` is not allowed"),
            "{e}"
        );
        let e = with(json!({"transform": [{"calculate": "datum.total * 2", "as": "t2"}]}));
        assert!(e.contains("not allowed"), "{e}");
        let e = with(json!({"transform": [{"filter": "datum.total > 1"}]}));
        assert!(e.contains("not an expression"), "{e}");
        let e = with(json!({"encoding": {"href": {"field": "genre"}}}));
        assert!(e.contains("spec.encoding.href"), "{e}");
        let e = with(json!({"encoding": {"tooltip": {"field": "price"}}}));
        assert!(e.contains("field `price` is not a column"), "{e}");
        let e = with(json!({"encoding": {"x": {"scale": {"scheme": "https://evil.example/x"}}}}));
        assert!(e.contains("holds an address"), "{e}");
        let e = with(json!({"encoding": {"x": {"legend": {"url": "x"}}}}));
        assert!(
            e.contains("`spec.encoding.x.legend.url` is not allowed"),
            "{e}"
        );
        let e = with(json!({"encoding": {"y": {"axis": {"labelColor": "red"}}}}));
        assert!(e.contains("spec.encoding.y.axis may have title"), "{e}");
    }

    #[test]
    fn a_fold_makes_its_names_known() {
        let chart = drawn(
            json!({"call_id": "c1", "mark": "bar", "x": "genre", "y": "total",
            "spec": {"transform": [{"fold": ["total"], "as": ["measure", "amount"]}],
                     "encoding": {"color": {"field": "measure", "type": "nominal"}}}}),
        );
        assert_eq!(chart.spec["encoding"]["color"]["field"], "measure");
    }

    #[test]
    fn text_in_the_rows_is_data_not_an_address() {
        let traces = vec![trace(
            "c1",
            json!([{"site": "https://example.org", "visits": 3}, {"site": "data:x", "visits": 1}]),
        )];
        let a = args(json!({"call_id": "c1", "mark": "bar", "x": "site", "y": "visits"}));
        assert!(draw(&a, &traces, &ChartLimits::default()).is_ok());
    }

    #[test]
    fn size_and_row_limits_hold() {
        let a = args(json!({"call_id": "c1", "mark": "bar", "x": "month", "y": "total"}));
        let small = ChartLimits {
            max_rows: 2,
            max_spec_bytes: 1 << 20,
        };
        let e = draw(&a, &sales(), &small).unwrap_err();
        assert!(e.contains("3 rows") && e.contains("CHART_MAX_ROWS"), "{e}");
        let tiny = ChartLimits {
            max_rows: 100,
            max_spec_bytes: 200,
        };
        let e = draw(&a, &sales(), &tiny).unwrap_err();
        assert!(e.contains("CHART_MAX_SPEC_BYTES"), "{e}");
        // A 10 MB fragment is refused for its size before anyone draws it.
        let mut big = args(json!({"call_id": "c1", "mark": "bar", "x": "month", "y": "total"}));
        big.insert("title".into(), json!("x".repeat(10 * 1024 * 1024)));
        assert!(
            draw(&big, &sales(), &ChartLimits::default())
                .unwrap_err()
                .contains("title")
        );
    }

    #[test]
    fn a_failed_call_or_one_without_rows_has_nothing_to_draw() {
        let mut failed = trace("c1", json!("relation does not exist"));
        failed.is_error = true;
        let a = args(json!({"call_id": "c1", "mark": "bar", "x": "a", "y": "b"}));
        assert!(
            draw(&a, &[failed], &ChartLimits::default())
                .unwrap_err()
                .contains("failed")
        );
        let empty = trace(
            "c1",
            json!({"rows": [], "row_count": 0, "truncated": false}),
        );
        assert!(
            draw(&a, &[empty], &ChartLimits::default())
                .unwrap_err()
                .contains("no rows")
        );
    }
}
