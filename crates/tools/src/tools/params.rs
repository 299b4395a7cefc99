//! A tool's typed parameters: their JSON Schema for clients, and the checking of a call's
//! arguments into values ready to bind.
//!
//! Every argument is checked here, so the executor only ever sees values of the declared type
//! within the declared bounds. Parameters bound from the caller's verified token
//! ([`Source::Caller`]) are filled in by [`bind_caller`], those the server computes
//! ([`Source::Embedding`], [`Source::EmbedderModel`]) by `tools::embedding`; never from the
//! arguments.

use chrono::{DateTime, NaiveDate, Utc};
use parley_core::jwt::VerifiedClaims;
use serde_json::{Map, Value, json};
use tokio_postgres::types::{ToSql, Type};

/// The kinds of value a parameter can take, each bound as one Postgres type.
#[derive(Debug, Clone, PartialEq)]
pub enum ParamType {
    String {
        min_length: Option<u64>,
        max_length: Option<u64>,
    },
    Integer {
        minimum: Option<i64>,
        maximum: Option<i64>,
    },
    Number {
        minimum: Option<f64>,
        maximum: Option<f64>,
    },
    Boolean,
    /// `YYYY-MM-DD`.
    Date,
    /// RFC 3339, e.g. `2026-01-31T12:00:00Z`; a bare date means midnight UTC.
    Timestamp,
    Enum {
        values: Vec<String>,
    },
    /// A JSON array of strings, bound as `text[]`; the length bounds apply to each item.
    StringArray {
        max_items: Option<u64>,
        min_length: Option<u64>,
        max_length: Option<u64>,
    },
    /// A JSON object, bound as `jsonb` (e.g. search filters the SQL hands to a function).
    Object,
    /// An embedding the server computes ([`Source::Embedding`]), bound as `float4[]`; the SQL
    /// casts it (`:q::vector(384)`). Never an argument.
    Vector,
}

impl ParamType {
    pub fn pg_type(&self) -> Type {
        match self {
            ParamType::String { .. } | ParamType::Enum { .. } => Type::TEXT,
            ParamType::Integer { .. } => Type::INT8,
            ParamType::Number { .. } => Type::FLOAT8,
            ParamType::Boolean => Type::BOOL,
            ParamType::Date => Type::DATE,
            ParamType::Timestamp => Type::TIMESTAMPTZ,
            ParamType::StringArray { .. } => Type::TEXT_ARRAY,
            ParamType::Object => Type::JSONB,
            ParamType::Vector => Type::FLOAT4_ARRAY,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ParamSpec {
    pub name: String,
    pub description: Option<String>,
    pub ty: ParamType,
    /// Never NULL: an argument must be given (or, for a caller-bound parameter, the caller
    /// must carry the value).
    pub required: bool,
    /// Already checked against `ty` when the tools file was loaded.
    pub default: Option<SqlValue>,
    /// The audit stores a hash of the argument, not its value (`sensitive = true`).
    pub sensitive: bool,
    /// Where the value comes from.
    pub source: Source,
}

/// Where a parameter's value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The call's `arguments`, as the published input schema describes.
    Argument,
    /// The caller's verified token (`from = "caller.sub"` or `"caller.claims.<name>"`); absent
    /// from the input schema, and refused as an argument.
    Caller(CallerField),
    /// The embedding of the named string argument (`from = "embedding.<argument>"`), NULL
    /// when that argument is; absent from the input schema, and refused as an argument.
    Embedding(String),
    /// The embedder's model id, e.g. `all-MiniLM-L6-v2@384` (`from = "embedder.model"`), so
    /// SQL can refuse collections embedded by another model.
    EmbedderModel,
}

impl Source {
    /// `from = "..."`: the caller's token, an embedding or the embedder's model; `None` for
    /// anything else.
    pub fn parse(from: &str) -> Option<Self> {
        if from == "embedder.model" {
            return Some(Source::EmbedderModel);
        }
        if let Some(argument) = from.strip_prefix("embedding.") {
            let name_like = !argument.is_empty()
                && argument
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_');
            return name_like.then(|| Source::Embedding(argument.to_owned()));
        }
        CallerField::parse(from).map(Source::Caller)
    }

    /// Needs the embedder loaded at start-up.
    pub fn needs_embedder(&self) -> bool {
        matches!(self, Source::Embedding(_) | Source::EmbedderModel)
    }
}

/// Which part of the caller's token a caller-bound parameter takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallerField {
    /// The token's subject (`sub`).
    Sub,
    /// One claim of the token, by name.
    Claim(String),
}

impl CallerField {
    /// `caller.sub` or `caller.claims.<name>`; `None` for anything else.
    pub fn parse(from: &str) -> Option<Self> {
        if from == "caller.sub" {
            return Some(CallerField::Sub);
        }
        let claim = from.strip_prefix("caller.claims.")?;
        (!claim.is_empty() && !claim.contains(|c: char| c.is_control() || c.is_whitespace()))
            .then(|| CallerField::Claim(claim.to_owned()))
    }

    /// The claim's name as a token calls it (`sub` for the subject).
    pub fn claim(&self) -> &str {
        match self {
            CallerField::Sub => "sub",
            CallerField::Claim(name) => name,
        }
    }
}

/// A checked argument, ready to bind. `Null` carries nothing: the statement was prepared with
/// the parameter's type, so Postgres knows what the NULL is.
#[derive(Debug, Clone, PartialEq)]
pub enum SqlValue {
    Null,
    Text(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    Date(NaiveDate),
    Timestamp(DateTime<Utc>),
    TextArray(Vec<String>),
    Json(Value),
    Vector(Vec<f32>),
}

impl SqlValue {
    pub fn as_sql(&self) -> &(dyn ToSql + Sync) {
        match self {
            SqlValue::Null => &Null,
            SqlValue::Text(v) => v,
            SqlValue::Int(v) => v,
            SqlValue::Float(v) => v,
            SqlValue::Bool(v) => v,
            SqlValue::Date(v) => v,
            SqlValue::Timestamp(v) => v,
            SqlValue::TextArray(v) => v,
            SqlValue::Json(v) => v,
            SqlValue::Vector(v) => v,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self {
            SqlValue::Int(v) => Some(*v),
            _ => None,
        }
    }
}

/// SQL NULL of whatever type the statement was prepared with (`Option<&str>` would refuse a
/// `date` or `int8` placeholder).
#[derive(Debug)]
struct Null;

impl ToSql for Null {
    fn to_sql(
        &self,
        _ty: &Type,
        _out: &mut bytes::BytesMut,
    ) -> Result<tokio_postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        Ok(tokio_postgres::types::IsNull::Yes)
    }

    fn accepts(_ty: &Type) -> bool {
        true
    }

    tokio_postgres::types::to_sql_checked!();
}

/// Why an argument was refused; the message names the parameter so a model can fix its call.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ArgumentError {
    #[error("missing required parameter `{0}`")]
    Missing(String),
    #[error("unknown parameter `{name}`; this tool takes: {known}")]
    Unknown { name: String, known: String },
    #[error("parameter `{name}` {problem}")]
    Invalid { name: String, problem: String },
    #[error(
        "parameter `{0}` is set from the caller's identity and cannot be passed as an argument"
    )]
    FromCaller(String),
    #[error("parameter `{0}` is computed by the server and cannot be passed as an argument")]
    Computed(String),
}

/// Why a caller-bound parameter has no value: the tool is never run with NULL in its place.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CallerError {
    #[error("`{tool}` acts for a signed-in user and this request carries no user token")]
    NoUser { tool: String },
    #[error("`{tool}` needs the caller's `{claim}` claim, which the token does not have")]
    MissingClaim { tool: String, claim: String },
    #[error("`{tool}` cannot use the caller's `{claim}` claim: {problem}")]
    BadClaim {
        tool: String,
        claim: String,
        problem: String,
    },
}

impl ParamSpec {
    /// This parameter's JSON Schema property.
    pub fn schema(&self) -> Value {
        let mut s = Map::new();
        let mut put = |k: &str, v: Value| {
            s.insert(k.to_owned(), v);
        };
        match &self.ty {
            ParamType::String {
                min_length,
                max_length,
            } => {
                put("type", json!("string"));
                if let Some(n) = min_length {
                    put("minLength", json!(n));
                }
                if let Some(n) = max_length {
                    put("maxLength", json!(n));
                }
            }
            ParamType::Integer { minimum, maximum } => {
                put("type", json!("integer"));
                if let Some(n) = minimum {
                    put("minimum", json!(n));
                }
                if let Some(n) = maximum {
                    put("maximum", json!(n));
                }
            }
            ParamType::Number { minimum, maximum } => {
                put("type", json!("number"));
                if let Some(n) = minimum {
                    put("minimum", json!(n));
                }
                if let Some(n) = maximum {
                    put("maximum", json!(n));
                }
            }
            ParamType::Boolean => put("type", json!("boolean")),
            ParamType::Date => {
                put("type", json!("string"));
                put("format", json!("date"));
            }
            ParamType::Timestamp => {
                put("type", json!("string"));
                put("format", json!("date-time"));
            }
            ParamType::Enum { values } => {
                put("type", json!("string"));
                put("enum", json!(values));
            }
            ParamType::StringArray {
                max_items,
                min_length,
                max_length,
            } => {
                put("type", json!("array"));
                let mut items = Map::new();
                items.insert("type".into(), json!("string"));
                if let Some(n) = min_length {
                    items.insert("minLength".into(), json!(n));
                }
                if let Some(n) = max_length {
                    items.insert("maxLength".into(), json!(n));
                }
                put("items", Value::Object(items));
                if let Some(n) = max_items {
                    put("maxItems", json!(n));
                }
            }
            ParamType::Object => put("type", json!("object")),
            ParamType::Vector => {
                put("type", json!("array"));
                put("items", json!({"type": "number"}));
            }
        }
        if let Some(d) = &self.description {
            put("description", json!(d));
        }
        if let Some(d) = &self.default {
            put("default", d.to_json());
        }
        Value::Object(s)
    }

    /// Checks one JSON value against this parameter. `null` counts as "not given".
    pub fn parse(&self, value: Option<&Value>) -> Result<SqlValue, ArgumentError> {
        let value = match value {
            None | Some(Value::Null) => {
                return match (&self.default, self.required) {
                    (Some(d), _) => Ok(d.clone()),
                    (None, true) => Err(ArgumentError::Missing(self.name.clone())),
                    (None, false) => Ok(SqlValue::Null),
                };
            }
            Some(v) => v,
        };
        let invalid = |problem: String| ArgumentError::Invalid {
            name: self.name.clone(),
            problem,
        };
        match &self.ty {
            ParamType::String {
                min_length,
                max_length,
            } => {
                let s = value
                    .as_str()
                    .ok_or_else(|| invalid(format!("must be a string, got {}", kind(value))))?;
                check_text(s, *min_length, *max_length).map_err(invalid)?;
                Ok(SqlValue::Text(s.to_owned()))
            }
            ParamType::StringArray {
                max_items,
                min_length,
                max_length,
            } => {
                let items = value.as_array().ok_or_else(|| {
                    invalid(format!("must be an array of strings, got {}", kind(value)))
                })?;
                if let Some(max) = max_items
                    && items.len() as u64 > *max
                {
                    return Err(invalid(format!("must have at most {max} items")));
                }
                let mut texts = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    let s = item.as_str().ok_or_else(|| {
                        invalid(format!("item {i} must be a string, got {}", kind(item)))
                    })?;
                    check_text(s, *min_length, *max_length)
                        .map_err(|problem| invalid(format!("item {i} {problem}")))?;
                    texts.push(s.to_owned());
                }
                Ok(SqlValue::TextArray(texts))
            }
            ParamType::Integer { minimum, maximum } => {
                let n = integer(value)
                    .ok_or_else(|| invalid(format!("must be an integer, got {}", kind(value))))?;
                check_range(n, *minimum, *maximum).map_err(invalid)?;
                Ok(SqlValue::Int(n))
            }
            ParamType::Number { minimum, maximum } => {
                let n = value
                    .as_f64()
                    .filter(|n| n.is_finite())
                    .ok_or_else(|| invalid(format!("must be a number, got {}", kind(value))))?;
                check_range(n, *minimum, *maximum).map_err(invalid)?;
                Ok(SqlValue::Float(n))
            }
            ParamType::Boolean => value
                .as_bool()
                .map(SqlValue::Bool)
                .ok_or_else(|| invalid(format!("must be true or false, got {}", kind(value)))),
            ParamType::Date => {
                let date = value
                    .as_str()
                    .and_then(|s| NaiveDate::parse_from_str(s.trim(), "%Y-%m-%d").ok())
                    .ok_or_else(|| invalid("must be a date written YYYY-MM-DD".into()))?;
                check_storable(date).map_err(invalid)?;
                Ok(SqlValue::Date(date))
            }
            ParamType::Timestamp => {
                let time = value.as_str().and_then(parse_timestamp).ok_or_else(|| {
                    invalid("must be an RFC 3339 timestamp such as 2026-01-31T09:00:00Z".into())
                })?;
                check_storable(time.date_naive()).map_err(invalid)?;
                Ok(SqlValue::Timestamp(time))
            }
            ParamType::Enum { values } => {
                let s = value
                    .as_str()
                    .ok_or_else(|| invalid(format!("must be a string, got {}", kind(value))))?;
                if values.iter().any(|v| v == s) {
                    Ok(SqlValue::Text(s.to_owned()))
                } else {
                    Err(invalid(format!("must be one of: {}", values.join(", "))))
                }
            }
            ParamType::Object => {
                if !value.is_object() {
                    return Err(invalid(format!(
                        "must be a JSON object, got {}",
                        kind(value)
                    )));
                }
                // jsonb refuses \u0000 in any string, with an error the caller would not see.
                if has_nul(value) {
                    return Err(invalid("must not contain NUL characters".into()));
                }
                Ok(SqlValue::Json(value.clone()))
            }
            ParamType::Vector => Err(ArgumentError::Computed(self.name.clone())),
        }
    }
}

impl SqlValue {
    fn to_json(&self) -> Value {
        match self {
            SqlValue::Null => Value::Null,
            SqlValue::Text(s) => json!(s),
            SqlValue::Int(n) => json!(n),
            SqlValue::Float(n) => json!(n),
            SqlValue::Bool(b) => json!(b),
            SqlValue::Date(d) => json!(d.format("%Y-%m-%d").to_string()),
            SqlValue::Timestamp(t) => json!(t.to_rfc3339()),
            SqlValue::TextArray(v) => json!(v),
            SqlValue::Json(v) => v.clone(),
            SqlValue::Vector(v) => json!(v),
        }
    }
}

/// Checks a whole `arguments` object: unknown names are refused rather than ignored, because a
/// misspelt filter silently dropped would give a wrong answer that looks right. Caller-bound
/// parameters are refused as arguments and come back as `Null`, for [`bind_caller`] to fill.
pub(crate) fn parse_arguments(
    params: &[ParamSpec],
    arguments: Option<&Map<String, Value>>,
) -> Result<Vec<SqlValue>, ArgumentError> {
    let empty = Map::new();
    let arguments = arguments.unwrap_or(&empty);
    if let Some(p) = params
        .iter()
        .find(|p| p.source != Source::Argument && arguments.contains_key(&p.name))
    {
        return Err(match p.source {
            Source::Caller(_) => ArgumentError::FromCaller(p.name.clone()),
            _ => ArgumentError::Computed(p.name.clone()),
        });
    }
    if let Some(name) = arguments
        .keys()
        .find(|k| !params.iter().any(|p| &p.name == *k))
    {
        let known = params
            .iter()
            .filter(|p| p.source == Source::Argument)
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        return Err(ArgumentError::Unknown {
            name: name.clone(),
            known: if known.is_empty() {
                "no parameters".into()
            } else {
                known
            },
        });
    }
    params
        .iter()
        .map(|p| match p.source {
            Source::Argument => p.parse(arguments.get(&p.name)),
            _ => Ok(SqlValue::Null),
        })
        .collect()
}

/// Fills in the caller-bound parameters of `tool` from the verified `user` (`None` for the
/// service). A tool that needs a user, called without one or without the claim, is refused:
/// its statement never runs with NULL in place of the caller.
pub(crate) fn bind_caller(
    tool: &str,
    params: &[ParamSpec],
    values: &mut [SqlValue],
    user: Option<&VerifiedClaims>,
) -> Result<(), CallerError> {
    for (p, value) in params.iter().zip(values.iter_mut()) {
        let Source::Caller(field) = &p.source else {
            continue;
        };
        let Some(user) = user else {
            return Err(CallerError::NoUser { tool: tool.into() });
        };
        let claim = match field {
            CallerField::Sub => Value::String(user.subject.clone()),
            CallerField::Claim(name) => user.claims.get(name).cloned().unwrap_or(Value::Null),
        };
        // A number or boolean claim bound to a string parameter is its JSON text.
        let claim = match (&p.ty, claim) {
            (ParamType::String { .. }, v @ (Value::Number(_) | Value::Bool(_))) => {
                Value::String(v.to_string())
            }
            (_, v) => v,
        };
        if claim.is_null() {
            return Err(CallerError::MissingClaim {
                tool: tool.into(),
                claim: field.claim().into(),
            });
        }
        *value = p.parse(Some(&claim)).map_err(|e| CallerError::BadClaim {
            tool: tool.into(),
            claim: field.claim().into(),
            problem: match e {
                ArgumentError::Invalid { problem, .. } => problem,
                other => other.to_string(),
            },
        })?;
    }
    Ok(())
}

/// The tool's whole input schema: caller-bound parameters are not in it.
pub fn input_schema(params: &[ParamSpec]) -> Map<String, Value> {
    let properties: Map<String, Value> = params
        .iter()
        .filter(|p| p.source == Source::Argument)
        .map(|p| (p.name.clone(), p.schema()))
        .collect();
    let required: Vec<&str> = params
        .iter()
        .filter(|p| p.required && p.source == Source::Argument)
        .map(|p| p.name.as_str())
        .collect();
    let mut schema = Map::new();
    schema.insert("type".into(), json!("object"));
    schema.insert("properties".into(), Value::Object(properties));
    if !required.is_empty() {
        schema.insert("required".into(), json!(required));
    }
    schema.insert("additionalProperties".into(), json!(false));
    schema
}

/// Whether a NUL character is in any key or string of `value`.
fn has_nul(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(has_nul),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        _ => false,
    }
}

/// A string's length bounds (in characters) and no NUL, which Postgres' text cannot hold.
fn check_text(s: &str, min_length: Option<u64>, max_length: Option<u64>) -> Result<(), String> {
    let chars = s.chars().count() as u64;
    if let Some(min) = min_length
        && chars < min
    {
        return Err(format!("must be at least {min} characters long"));
    }
    if let Some(max) = max_length
        && chars > max
    {
        return Err(format!("must be at most {max} characters long"));
    }
    if s.contains('\0') {
        return Err("must not contain NUL characters".into());
    }
    Ok(())
}

/// Integers may arrive as `5` or `5.0` (some models write floats); `5.5` is refused.
fn integer(value: &Value) -> Option<i64> {
    value.as_i64().or_else(|| {
        value
            .as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
            .map(|f| f as i64)
    })
}

fn check_range<T: PartialOrd + std::fmt::Display + Copy>(
    n: T,
    minimum: Option<T>,
    maximum: Option<T>,
) -> Result<(), String> {
    if let Some(min) = minimum
        && n < min
    {
        return Err(format!("must be at least {min}, got {n}"));
    }
    if let Some(max) = maximum
        && n > max
    {
        return Err(format!("must be at most {max}, got {n}"));
    }
    Ok(())
}

/// Postgres stores no date before Julian day 0, 24 November 4714 BC (ISO year -4713); the
/// latest dates chrono reads are within Postgres' range.
fn check_storable(date: NaiveDate) -> Result<(), String> {
    match NaiveDate::from_ymd_opt(-4713, 11, 24) {
        Some(earliest) if date < earliest => Err(format!(
            "must be on or after {earliest} (24 November 4714 BC), the earliest date Postgres stores"
        )),
        _ => Ok(()),
    }
}

fn parse_timestamp(s: &str) -> Option<DateTime<Utc>> {
    let s = s.trim();
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .ok()
        .or_else(|| {
            NaiveDate::parse_from_str(s, "%Y-%m-%d")
                .ok()
                .and_then(|d| d.and_hms_opt(0, 0, 0))
                .map(|t| t.and_utc())
        })
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param(name: &str, ty: ParamType, required: bool) -> ParamSpec {
        ParamSpec {
            name: name.into(),
            description: None,
            ty,
            required,
            default: None,
            sensitive: false,
            source: Source::Argument,
        }
    }

    fn limit() -> ParamSpec {
        ParamSpec {
            default: Some(SqlValue::Int(10)),
            ..param(
                "limit",
                ParamType::Integer {
                    minimum: Some(1),
                    maximum: Some(50),
                },
                false,
            )
        }
    }

    #[test]
    fn a_missing_required_argument_names_the_parameter() {
        let p = [param(
            "query",
            ParamType::String {
                min_length: Some(1),
                max_length: None,
            },
            true,
        )];
        let err = parse_arguments(&p, None).unwrap_err();
        assert_eq!(err.to_string(), "missing required parameter `query`");
    }

    #[test]
    fn an_object_argument_is_published_as_an_object_and_refuses_anything_else() {
        let p = [param("filters", ParamType::Object, false)];
        assert_eq!(p[0].schema(), json!({"type": "object"}));
        let args = json!({"filters": {"year": {"gte": 2024}, "tags": ["a"]}});
        assert_eq!(
            parse_arguments(&p, args.as_object()).unwrap(),
            vec![SqlValue::Json(
                json!({"year": {"gte": 2024}, "tags": ["a"]})
            )]
        );
        assert_eq!(parse_arguments(&p, None).unwrap(), vec![SqlValue::Null]);
        for (bad, problem) in [
            (
                json!("{\"year\": 2024}"),
                "must be a JSON object, got a string",
            ),
            (
                json!([{"year": 2024}]),
                "must be a JSON object, got an array",
            ),
            (json!({"a": ["x\u{0}y"]}), "must not contain NUL characters"),
            (json!({"a\u{0}": 1}), "must not contain NUL characters"),
        ] {
            let args = json!({ "filters": bad });
            let err = parse_arguments(&p, args.as_object()).unwrap_err();
            assert_eq!(err.to_string(), format!("parameter `filters` {problem}"));
        }
    }

    #[test]
    fn defaults_fill_in_and_bounds_are_enforced() {
        let p = [limit()];
        assert_eq!(parse_arguments(&p, None).unwrap(), vec![SqlValue::Int(10)]);
        let args = json!({"limit": 51});
        let err = parse_arguments(&p, args.as_object()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "parameter `limit` must be at most 50, got 51"
        );
        let args = json!({"limit": 5.0});
        assert_eq!(
            parse_arguments(&p, args.as_object()).unwrap(),
            vec![SqlValue::Int(5)]
        );
        let args = json!({"limit": 5.5});
        assert!(parse_arguments(&p, args.as_object()).is_err());
    }

    #[test]
    fn unknown_arguments_are_refused_with_the_known_names() {
        let args = json!({"limt": 5});
        let err = parse_arguments(&[limit()], args.as_object()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown parameter `limt`; this tool takes: limit"
        );
    }

    #[test]
    fn enums_list_their_values_when_refused() {
        let p = [param(
            "sentiment",
            ParamType::Enum {
                values: vec!["negative".into(), "positive".into()],
            },
            false,
        )];
        let args = json!({"sentiment": "angry"});
        let err = parse_arguments(&p, args.as_object()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "parameter `sentiment` must be one of: negative, positive"
        );
    }

    #[test]
    fn dates_and_timestamps_are_parsed_strictly() {
        let d = param("from", ParamType::Date, false);
        assert_eq!(
            d.parse(Some(&json!("2025-02-01"))).unwrap(),
            SqlValue::Date(NaiveDate::from_ymd_opt(2025, 2, 1).unwrap())
        );
        assert!(d.parse(Some(&json!("01/02/2025"))).is_err());
        let t = param("since", ParamType::Timestamp, false);
        assert!(t.parse(Some(&json!("2025-02-01T10:00:00+01:00"))).is_ok());
        assert!(t.parse(Some(&json!("2025-02-01"))).is_ok());
        assert!(t.parse(Some(&json!("yesterday"))).is_err());
    }

    #[test]
    fn dates_postgres_cannot_store_are_refused_naming_the_parameter_and_the_range() {
        let d = param("from", ParamType::Date, false);
        let err = d.parse(Some(&json!("-5000-01-01"))).unwrap_err();
        assert_eq!(
            err.to_string(),
            "parameter `from` must be on or after -4713-11-24 (24 November 4714 BC), the earliest date Postgres stores"
        );
        assert!(d.parse(Some(&json!("-4713-11-24"))).is_ok());
        let t = param("since", ParamType::Timestamp, false);
        let err = t.parse(Some(&json!("-5000-01-01"))).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("parameter `since` must be on or after")
        );
    }

    #[test]
    fn null_means_not_given() {
        let p = param(
            "district",
            ParamType::String {
                min_length: None,
                max_length: None,
            },
            false,
        );
        assert_eq!(p.parse(Some(&Value::Null)).unwrap(), SqlValue::Null);
    }

    #[test]
    fn the_schema_declares_types_bounds_and_required_names() {
        let p = [
            param(
                "query",
                ParamType::String {
                    min_length: Some(1),
                    max_length: Some(200),
                },
                true,
            ),
            limit(),
        ];
        let schema = Value::Object(input_schema(&p));
        assert_eq!(
            schema,
            json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "minLength": 1, "maxLength": 200},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10}
                },
                "required": ["query"],
                "additionalProperties": false
            })
        );
    }

    fn claims(sub: &str, extra: Value) -> VerifiedClaims {
        let mut claims = extra.as_object().cloned().unwrap_or_default();
        claims.insert("sub".into(), json!(sub));
        VerifiedClaims {
            subject: sub.into(),
            claims,
        }
    }

    fn owner(field: CallerField, ty: ParamType) -> ParamSpec {
        ParamSpec {
            sensitive: false,
            source: Source::Caller(field),
            ..param("owner", ty, true)
        }
    }

    fn text() -> ParamType {
        ParamType::String {
            min_length: None,
            max_length: None,
        }
    }

    #[test]
    fn caller_bound_parameters_are_not_published_and_not_taken_as_arguments() {
        let p = [owner(CallerField::Sub, text()), limit()];
        let schema = Value::Object(input_schema(&p));
        assert_eq!(schema["properties"].as_object().unwrap().len(), 1);
        assert!(schema.get("required").is_none(), "{schema}");
        let args = json!({"owner": "someone-else"});
        assert_eq!(
            parse_arguments(&p, args.as_object())
                .unwrap_err()
                .to_string(),
            "parameter `owner` is set from the caller's identity and cannot be passed as an argument"
        );
        let args = json!({"ownr": "x"});
        assert_eq!(
            parse_arguments(&p, args.as_object())
                .unwrap_err()
                .to_string(),
            "unknown parameter `ownr`; this tool takes: limit"
        );
    }

    #[test]
    fn caller_bound_values_come_from_the_verified_claims() {
        let p = [
            owner(CallerField::Sub, text()),
            ParamSpec {
                name: "org".into(),
                ..owner(CallerField::Claim("org_id".into()), text())
            },
        ];
        let mut values = parse_arguments(&p, None).unwrap();
        assert_eq!(values, [SqlValue::Null, SqlValue::Null]);
        let user = claims("u1", json!({"org_id": 42}));
        bind_caller("t", &p, &mut values, Some(&user)).unwrap();
        assert_eq!(
            values,
            [SqlValue::Text("u1".into()), SqlValue::Text("42".into())]
        );
    }

    #[test]
    fn a_call_without_the_user_or_the_claim_is_refused_never_run_with_null() {
        let p = [owner(CallerField::Claim("email".into()), text())];
        let mut values = vec![SqlValue::Null];
        assert_eq!(
            bind_caller("list_tasks", &p, &mut values, None)
                .unwrap_err()
                .to_string(),
            "`list_tasks` acts for a signed-in user and this request carries no user token"
        );
        assert_eq!(
            bind_caller("list_tasks", &p, &mut values, Some(&claims("u", json!({}))))
                .unwrap_err()
                .to_string(),
            "`list_tasks` needs the caller's `email` claim, which the token does not have"
        );
        let p = [owner(
            CallerField::Claim("org".into()),
            ParamType::Integer {
                minimum: None,
                maximum: None,
            },
        )];
        let err = bind_caller(
            "t",
            &p,
            &mut values,
            Some(&claims("u", json!({"org": "x"}))),
        )
        .unwrap_err();
        assert!(matches!(err, CallerError::BadClaim { .. }), "{err}");
        assert_eq!(values, [SqlValue::Null]);
    }

    #[test]
    fn string_arrays_check_item_count_type_and_length() {
        let p = param(
            "tags",
            ParamType::StringArray {
                max_items: Some(2),
                min_length: Some(1),
                max_length: Some(5),
            },
            false,
        );
        assert_eq!(
            p.parse(Some(&json!(["a", "bc"]))).unwrap(),
            SqlValue::TextArray(vec!["a".into(), "bc".into()])
        );
        for (bad, why) in [
            (json!("a"), "must be an array of strings, got a string"),
            (json!(["a", "b", "c"]), "must have at most 2 items"),
            (json!(["a", 1]), "item 1 must be a string, got a number"),
            (
                json!(["toolong"]),
                "item 0 must be at most 5 characters long",
            ),
            (json!([""]), "item 0 must be at least 1 characters long"),
        ] {
            assert_eq!(
                p.parse(Some(&bad)).unwrap_err().to_string(),
                format!("parameter `tags` {why}")
            );
        }
        assert_eq!(
            p.schema(),
            json!({"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 5}, "maxItems": 2})
        );
    }
}
