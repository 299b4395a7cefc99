//! [`ScriptFile`]: a [`ScriptedLlm`](super::ScriptedLlm) script written as JSON, the form
//! `parley-llm-stub` reads, so the Python and shell runners script the same server the Rust
//! tests do. Only parsing lives here; what each step means is `Step`'s documentation.

use std::time::Duration;

use serde_json::{Map, Value};

use super::{Pace, Piece, Plan, Step, Usage};

/// A script file, parsed.
///
/// ```json
/// {
///   "plan": "per_turn",
///   "steps": [
///     {"calls": [{"name": "lad_by_ref", "arguments": {"ref": "Leeds"}}]},
///     {"text": "hello from the stub"}
///   ],
///   "pace": {"every_ms": 40, "chars": 4},
///   "usage": {"input_tokens": 1200, "output_tokens": 80}
/// }
/// ```
///
/// `plan` is `per_turn` (the default), `in_order` or `forever` (the one step). A step is one
/// of `{"text"}`, `{"calls": [{"name", "arguments"}], "text"?}` (arguments given as a string
/// are sent verbatim, anything else as its JSON), `{"status", "message"?, "body"?,
/// "retry_after"?}`, `{"delay_ms", "then": step}`, `{"stall": text}` and
/// `{"fail_mid_stream": {"text", "message"}}`. `pace` takes `every_ms` and `chars` or
/// `"words": true`, and `"arguments": false` to send call arguments at once.
#[derive(Debug, Clone)]
pub struct ScriptFile {
    pub plan: Plan,
    pub pace: Pace,
    pub usage: Usage,
}

#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    #[error("the script is not JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("{at}: {problem}")]
    Invalid { at: String, problem: String },
}

fn invalid(at: &str, problem: impl Into<String>) -> ScriptError {
    ScriptError::Invalid {
        at: at.to_owned(),
        problem: problem.into(),
    }
}

impl ScriptFile {
    pub fn parse(text: &str) -> Result<ScriptFile, ScriptError> {
        let value: Value = serde_json::from_str(text)?;
        let file = value
            .as_object()
            .ok_or_else(|| invalid("the script", "must be a JSON object"))?;
        known_keys("the script", file, &["plan", "steps", "pace", "usage"])?;
        let steps = file
            .get("steps")
            .and_then(Value::as_array)
            .ok_or_else(|| invalid("the script", "needs a `steps` array"))?
            .iter()
            .enumerate()
            .map(|(i, step)| parse_step(&format!("steps[{i}]"), step))
            .collect::<Result<Vec<Step>, ScriptError>>()?;
        let plan = match file.get("plan").map(|p| p.as_str()) {
            None | Some(Some("per_turn")) => Plan::PerTurn(steps),
            Some(Some("in_order")) => Plan::InOrder(steps),
            Some(Some("forever")) => match <[Step; 1]>::try_from(steps) {
                Ok([step]) => Plan::Forever(step),
                Err(_) => return Err(invalid("steps", "a `forever` plan has exactly one step")),
            },
            Some(_) => {
                return Err(invalid("plan", "is one of per_turn, in_order, forever"));
            }
        };
        Ok(ScriptFile {
            plan,
            pace: file
                .get("pace")
                .map(parse_pace)
                .transpose()?
                .unwrap_or_default(),
            usage: file
                .get("usage")
                .map(parse_usage)
                .transpose()?
                .unwrap_or_default(),
        })
    }
}

/// Refuses keys the format does not know: a misspelt `delay_ms` must not silently do nothing.
fn known_keys(at: &str, object: &Map<String, Value>, known: &[&str]) -> Result<(), ScriptError> {
    match object.keys().find(|k| !known.contains(&k.as_str())) {
        Some(key) => Err(invalid(
            at,
            format!("unknown key `{key}` (known: {})", known.join(", ")),
        )),
        None => Ok(()),
    }
}

fn string(at: &str, value: &Value) -> Result<String, ScriptError> {
    value
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| invalid(at, "must be a string"))
}

fn number(at: &str, value: &Value) -> Result<u64, ScriptError> {
    value
        .as_u64()
        .ok_or_else(|| invalid(at, "must be a whole number"))
}

fn parse_step(at: &str, value: &Value) -> Result<Step, ScriptError> {
    let step = value
        .as_object()
        .ok_or_else(|| invalid(at, "a step is a JSON object"))?;
    if let Some(text) = step.get("stall") {
        known_keys(at, step, &["stall"])?;
        return Ok(Step::Stall(string(&format!("{at}.stall"), text)?));
    }
    if let Some(fail) = step.get("fail_mid_stream") {
        known_keys(at, step, &["fail_mid_stream"])?;
        let at = format!("{at}.fail_mid_stream");
        let fail = fail
            .as_object()
            .ok_or_else(|| invalid(&at, "is an object with `text` and `message`"))?;
        known_keys(&at, fail, &["text", "message"])?;
        let field = |key: &str| {
            string(
                &format!("{at}.{key}"),
                fail.get(key).unwrap_or(&Value::Null),
            )
        };
        return Ok(Step::FailMidStream {
            text: field("text")?,
            message: field("message")?,
        });
    }
    if let Some(delay) = step.get("delay_ms") {
        known_keys(at, step, &["delay_ms", "then"])?;
        let delay = Duration::from_millis(number(&format!("{at}.delay_ms"), delay)?);
        let then = step
            .get("then")
            .ok_or_else(|| invalid(at, "`delay_ms` needs the step it delays in `then`"))?;
        return Ok(Step::delayed(
            delay,
            parse_step(&format!("{at}.then"), then)?,
        ));
    }
    if let Some(status) = step.get("status") {
        known_keys(at, step, &["status", "message", "body", "retry_after"])?;
        let status = u16::try_from(number(&format!("{at}.status"), status)?)
            .map_err(|_| invalid(at, "`status` is an HTTP status"))?;
        let body = match (step.get("body"), step.get("message")) {
            (Some(Value::String(body)), _) => body.clone(),
            (Some(body), _) => body.to_string(),
            (None, message) => {
                let message = message.and_then(Value::as_str).unwrap_or("scripted error");
                match Step::error(status, message) {
                    Step::Status { body, .. } => body,
                    _ => unreachable!("Step::error is a Status"),
                }
            }
        };
        let retry_after = step
            .get("retry_after")
            .map(|r| number(&format!("{at}.retry_after"), r))
            .transpose()?;
        return Ok(Step::Status {
            status,
            retry_after,
            body,
        });
    }
    known_keys(at, step, &["text", "calls"])?;
    let text = step
        .get("text")
        .map(|t| string(&format!("{at}.text"), t))
        .transpose()?;
    let calls = match step.get("calls") {
        None => None,
        Some(calls) => Some(
            calls
                .as_array()
                .ok_or_else(|| invalid(&format!("{at}.calls"), "must be an array"))?
                .iter()
                .enumerate()
                .map(|(i, call)| parse_call(&format!("{at}.calls[{i}]"), call))
                .collect::<Result<Vec<_>, _>>()?,
        ),
    };
    match (text, calls) {
        (Some(text), None) => Ok(Step::Text(text)),
        (None, Some(calls)) => Ok(Step::Calls(calls)),
        (Some(text), Some(calls)) => Ok(Step::TextAndCalls(text, calls)),
        (None, None) => Err(invalid(
            at,
            "a step has `text`, `calls`, `status`, `delay_ms`, `stall` or `fail_mid_stream`",
        )),
    }
}

fn parse_call(at: &str, value: &Value) -> Result<(String, String), ScriptError> {
    let call = value
        .as_object()
        .ok_or_else(|| invalid(at, "a call is an object with `name` and `arguments`"))?;
    known_keys(at, call, &["name", "arguments"])?;
    let name = string(
        &format!("{at}.name"),
        call.get("name").unwrap_or(&Value::Null),
    )?;
    let arguments = match call.get("arguments") {
        None => "{}".to_owned(),
        Some(Value::String(raw)) => raw.clone(),
        Some(value) => value.to_string(),
    };
    Ok((name, arguments))
}

fn parse_pace(value: &Value) -> Result<Pace, ScriptError> {
    let pace = value
        .as_object()
        .ok_or_else(|| invalid("pace", "is an object with `every_ms`"))?;
    known_keys("pace", pace, &["every_ms", "chars", "words", "arguments"])?;
    let every = pace
        .get("every_ms")
        .map(|v| number("pace.every_ms", v))
        .transpose()?
        .unwrap_or(0);
    let piece = match (pace.get("chars"), pace.get("words")) {
        (Some(_), Some(_)) => return Err(invalid("pace", "`chars` or `words`, not both")),
        (_, Some(Value::Bool(true))) => Piece::Words,
        (Some(chars), _) => Piece::Chars(number("pace.chars", chars)?.max(1) as usize),
        _ => Pace::default().piece,
    };
    let arguments = match pace.get("arguments") {
        None => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(invalid("pace.arguments", "must be true or false")),
    };
    Ok(Pace {
        every: Duration::from_millis(every),
        piece,
        arguments,
    })
}

fn parse_usage(value: &Value) -> Result<Usage, ScriptError> {
    let usage = value.as_object().ok_or_else(|| {
        invalid(
            "usage",
            "is an object with `input_tokens` and `output_tokens`",
        )
    })?;
    known_keys("usage", usage, &["input_tokens", "output_tokens"])?;
    let field = |key: &str| {
        usage
            .get(key)
            .map(|v| number(&format!("usage.{key}"), v))
            .transpose()
    };
    let default = Usage::default();
    Ok(Usage {
        input: field("input_tokens")?.unwrap_or(default.input),
        output: field("output_tokens")?.unwrap_or(default.output),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_per_turn_script_with_calls_pace_and_usage_parses() {
        let file = ScriptFile::parse(
            r#"{"steps": [
                {"calls": [{"name": "lad_by_ref", "arguments": {"ref": "Leeds"}},
                           {"name": "raw", "arguments": "{not json"}]},
                {"delay_ms": 1000, "then": {"text": "done"}}
               ],
               "pace": {"every_ms": 40, "words": true, "arguments": false},
               "usage": {"input_tokens": 1200, "output_tokens": 80}}"#,
        )
        .unwrap();
        let Plan::PerTurn(steps) = file.plan else {
            panic!("per_turn is the default: {:?}", file.plan)
        };
        assert_eq!(
            steps[0].tool_calls(),
            [
                ("lad_by_ref".to_owned(), r#"{"ref":"Leeds"}"#.to_owned()),
                ("raw".to_owned(), "{not json".to_owned())
            ]
        );
        assert!(
            matches!(&steps[1], Step::Delay(d, inner) if *d == Duration::from_secs(1)
                && matches!(&**inner, Step::Text(t) if t == "done"))
        );
        assert_eq!(
            file.pace,
            Pace {
                every: Duration::from_millis(40),
                piece: Piece::Words,
                arguments: false
            }
        );
        assert_eq!((file.usage.input, file.usage.output), (1200, 80));
    }

    #[test]
    fn a_status_step_without_a_body_gets_an_openai_shaped_error() {
        let file = ScriptFile::parse(
            r#"{"plan": "in_order", "steps": [{"status": 429, "message": "slow down", "retry_after": 2}]}"#,
        )
        .unwrap();
        let Plan::InOrder(steps) = file.plan else {
            panic!("{:?}", file.plan)
        };
        let Step::Status {
            status,
            retry_after,
            body,
        } = &steps[0]
        else {
            panic!("{:?}", steps[0])
        };
        assert_eq!((*status, *retry_after), (429, Some(2)));
        let body: Value = serde_json::from_str(body).unwrap();
        assert_eq!(body["error"]["message"], "slow down");
    }

    #[test]
    fn a_misspelt_key_is_refused_with_where_it_is() {
        let err =
            ScriptFile::parse(r#"{"steps": [{"text": "a"}, {"delay": 5, "then": {"text": "b"}}]}"#)
                .unwrap_err()
                .to_string();
        assert!(err.starts_with("steps[1]: unknown key `delay`"), "{err}");
        let err = ScriptFile::parse(r#"{"plan": "forever", "steps": []}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("exactly one step"), "{err}");
    }
}
