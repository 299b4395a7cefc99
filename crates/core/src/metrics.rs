//! CloudWatch metrics in the embedded metric format (EMF): each [`Document`] becomes one JSON
//! line on stdout, which CloudWatch Logs turns into metrics with no agent and no API call. The
//! functions name what they measure (docs/metrics.md lists it); this module only writes it.
//!
//! Dimension values must come from bounded sets (declared tool names, stable codes, HTTP
//! statuses): never user text, arguments or ids, which would leak into metrics and make one
//! CloudWatch series per value.

use std::io::Write;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value, json};

use crate::config::{ConfigError, Env};

/// The unit of a metric, as CloudWatch names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Count,
    Milliseconds,
}

impl Unit {
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Count => "Count",
            Unit::Milliseconds => "Milliseconds",
        }
    }
}

/// `METRICS` and `METRICS_NAMESPACE`, read once at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsConfig {
    /// `METRICS`: `emf` writes documents, `off` none. Default `emf` under Lambda
    /// (`AWS_LAMBDA_FUNCTION_NAME` set), else `off`, so local runs and tests stay quiet.
    pub emf: bool,
    /// `METRICS_NAMESPACE` (default `Parley`): the CloudWatch namespace of every metric.
    pub namespace: String,
}

/// The namespace when `METRICS_NAMESPACE` is not set.
pub const DEFAULT_NAMESPACE: &str = "Parley";

impl MetricsConfig {
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let emf = match env.get("METRICS").map(str::to_ascii_lowercase).as_deref() {
            None => env.is_set("AWS_LAMBDA_FUNCTION_NAME"),
            Some("emf") => true,
            Some("off") => false,
            Some(_) => return Err(ConfigError::new("METRICS", "must be emf or off")),
        };
        let namespace = env.get("METRICS_NAMESPACE").unwrap_or(DEFAULT_NAMESPACE);
        check_namespace(namespace).map_err(|p| ConfigError::new("METRICS_NAMESPACE", p))?;
        Ok(Self {
            emf,
            namespace: namespace.to_owned(),
        })
    }
}

/// CloudWatch's rules for a namespace: 1-255 characters from `0-9A-Za-z.-_/#: `, at least one
/// not a space, and not under `AWS/` (reserved for AWS services).
fn check_namespace(namespace: &str) -> Result<(), String> {
    if namespace.len() > 255 {
        return Err("must be at most 255 characters".into());
    }
    if let Some(c) = namespace
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || ".-_/#: ".contains(*c)))
    {
        return Err(format!(
            "may hold only letters, digits and . - _ / # : or spaces, not {c:?}"
        ));
    }
    if namespace.trim().is_empty() {
        return Err("must not be blank".into());
    }
    if namespace.starts_with("AWS/") {
        return Err("must not start with AWS/, which AWS services keep for themselves".into());
    }
    Ok(())
}

/// Where documents go: stdout in the functions, memory in tests.
#[derive(Debug, Clone)]
pub enum Sink {
    Stdout,
    Memory(Recorded),
}

/// The documents a [`Sink::Memory`] received, one JSON line each, in order.
#[derive(Debug, Clone, Default)]
pub struct Recorded(Arc<Mutex<Vec<String>>>);

impl Recorded {
    /// Each line as it would have been written to stdout, without its newline.
    pub fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Each line parsed.
    pub fn documents(&self) -> Vec<Value> {
        self.lines()
            .iter()
            .map(|line| serde_json::from_str(line).expect("a recorded line is JSON"))
            .collect()
    }

    /// The documents that carry metric `name`.
    pub fn with_metric(&self, name: &str) -> Vec<Value> {
        self.documents()
            .into_iter()
            .filter(|d| metric_names(d).iter().any(|n| n == name))
            .collect()
    }
}

/// The names of the metrics a document declares.
pub fn metric_names(document: &Value) -> Vec<String> {
    document["_aws"]["CloudWatchMetrics"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|d| d["Metrics"].as_array().into_iter().flatten())
        .filter_map(|m| m["Name"].as_str().map(str::to_owned))
        .collect()
}

/// The recorder a function holds in its state: cheap to clone, and a no-op when `METRICS=off`.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    to: Option<Arc<Target>>,
}

#[derive(Debug)]
struct Target {
    namespace: String,
    sink: Sink,
}

impl Metrics {
    /// Documents to `sink` when `config` turns EMF on, else nowhere.
    pub fn new(config: &MetricsConfig, sink: Sink) -> Self {
        Self {
            to: config.emf.then(|| {
                Arc::new(Target {
                    namespace: config.namespace.clone(),
                    sink,
                })
            }),
        }
    }

    /// A recorder that writes nothing (tools and tests that measure nothing).
    pub fn off() -> Self {
        Self::default()
    }

    /// Writes `document` stamped with the current time, as one line.
    pub fn emit(&self, document: Document) {
        let Some(to) = &self.to else {
            return;
        };
        let timestamp = chrono::Utc::now().timestamp_millis();
        let mut line = document.to_json(&to.namespace, timestamp).to_string();
        match &to.sink {
            Sink::Stdout => {
                line.push('\n');
                // One write on the locked handle: the line never interleaves with another
                // writer's, and CloudWatch reads each line as one event.
                let mut out = std::io::stdout().lock();
                if let Err(e) = out.write_all(line.as_bytes()).and_then(|()| out.flush()) {
                    tracing::warn!(error = %e, "could not write a metrics line");
                }
            }
            Sink::Memory(recorded) => recorded
                .0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(line),
        }
    }
}

/// One EMF document: metrics with their values, under the empty dimension set (so an alarm can
/// address a metric with no dimensions) plus one set per [`Document::dimension`].
#[derive(Debug, Clone, Default)]
pub struct Document {
    dimensions: Vec<(&'static str, String)>,
    metrics: Vec<(&'static str, Unit, f64)>,
}

impl Document {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the dimension set `[name]` with its value. `value` must come from a bounded set
    /// (see the module's documentation).
    pub fn dimension(mut self, name: &'static str, value: impl Into<String>) -> Self {
        let mut value = value.into();
        // CloudWatch refuses an empty value and one over 1024 characters.
        if value.is_empty() {
            value.push_str("none");
        }
        let mut end = value.len().min(1024);
        while !value.is_char_boundary(end) {
            end -= 1;
        }
        value.truncate(end);
        self.dimensions.push((name, value));
        self
    }

    pub fn metric(mut self, name: &'static str, unit: Unit, value: f64) -> Self {
        self.metrics.push((name, unit, value));
        self
    }

    /// A duration in milliseconds to the microsecond (`8.223468`, not `8.223467999999999`).
    pub fn millis(self, name: &'static str, elapsed: std::time::Duration) -> Self {
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        self.metric(name, Unit::Milliseconds, micros as f64 / 1000.0)
    }

    pub fn count(self, name: &'static str, value: u64) -> Self {
        self.metric(name, Unit::Count, value as f64)
    }

    fn to_json(&self, namespace: &str, timestamp_ms: i64) -> Value {
        let mut sets: Vec<Vec<&str>> = vec![Vec::new()];
        sets.extend(self.dimensions.iter().map(|(name, _)| vec![*name]));
        let definitions: Vec<Value> = self
            .metrics
            .iter()
            .map(|(name, unit, _)| json!({"Name": name, "Unit": unit.as_str()}))
            .collect();
        let mut root = Map::new();
        root.insert(
            "_aws".into(),
            json!({
                "Timestamp": timestamp_ms,
                "CloudWatchMetrics": [{
                    "Namespace": namespace,
                    "Dimensions": sets,
                    "Metrics": definitions,
                }],
            }),
        );
        for (name, value) in &self.dimensions {
            root.insert((*name).into(), Value::String(value.clone()));
        }
        for (name, _, value) in &self.metrics {
            root.insert((*name).into(), number(*value));
        }
        Value::Object(root)
    }
}

/// Whole numbers as integers (`1`, not `1.0`); a value JSON cannot hold (NaN) as 0.
fn number(value: f64) -> Value {
    if value.fract() == 0.0 && (0.0..9.0e15).contains(&value) {
        Value::from(value as u64)
    } else {
        serde_json::Number::from_f64(value).map_or(Value::from(0), Value::Number)
    }
}

/// Why a document is not what the EMF specification requires.
#[derive(Debug, thiserror::Error)]
#[error("not an EMF document: {0}")]
pub struct NotEmf(String);

/// The units CloudWatch accepts.
const UNITS: &[&str] = &[
    "Seconds",
    "Microseconds",
    "Milliseconds",
    "Bytes",
    "Kilobytes",
    "Megabytes",
    "Gigabytes",
    "Terabytes",
    "Bits",
    "Kilobits",
    "Megabits",
    "Gigabits",
    "Terabits",
    "Percent",
    "Count",
    "Bytes/Second",
    "Kilobytes/Second",
    "Megabytes/Second",
    "Gigabytes/Second",
    "Terabytes/Second",
    "Bits/Second",
    "Kilobits/Second",
    "Megabits/Second",
    "Gigabits/Second",
    "Terabits/Second",
    "Count/Second",
    "None",
];

/// Checks `document` against the structure the EMF specification requires: `_aws` with a
/// numeric `Timestamp` and `CloudWatchMetrics` directives, each with a `Namespace`, dimension
/// sets of at most 30 names each naming a string member, and 1-100 metrics each with a `Name`,
/// an optional known `Unit` and a numeric member (or an array of at most 100 numbers). What
/// tests of every function use on what they recorded, and on a real binary's stdout.
pub fn check_emf(document: &Value) -> Result<(), NotEmf> {
    let fail = |why: String| Err(NotEmf(why));
    let Some(root) = document.as_object() else {
        return fail("the root is not an object".into());
    };
    let Some(aws) = root.get("_aws").and_then(Value::as_object) else {
        return fail("no _aws object".into());
    };
    if !aws.get("Timestamp").is_some_and(Value::is_i64) {
        return fail("_aws.Timestamp is not a whole number of milliseconds".into());
    }
    let Some(directives) = aws.get("CloudWatchMetrics").and_then(Value::as_array) else {
        return fail("no _aws.CloudWatchMetrics array".into());
    };
    if directives.is_empty() {
        return fail("_aws.CloudWatchMetrics is empty".into());
    }
    for directive in directives {
        let namespace = directive["Namespace"].as_str().unwrap_or_default();
        if namespace.is_empty() || namespace.len() > 1024 {
            return fail(format!("bad Namespace in {directive}"));
        }
        let Some(sets) = directive["Dimensions"].as_array() else {
            return fail(format!("no Dimensions array in {directive}"));
        };
        for set in sets {
            let Some(names) = set.as_array() else {
                return fail(format!("a dimension set is not an array: {set}"));
            };
            if names.len() > 30 {
                return fail(format!("more than 30 dimensions in {set}"));
            }
            for name in names {
                let member = name.as_str().and_then(|n| root.get(n));
                let value = member.and_then(Value::as_str).unwrap_or_default();
                if value.is_empty() || value.len() > 1024 {
                    return fail(format!("dimension {name} has no string value of 1-1024"));
                }
            }
        }
        let Some(metrics) = directive["Metrics"].as_array() else {
            return fail(format!("no Metrics array in {directive}"));
        };
        if metrics.is_empty() || metrics.len() > 100 {
            return fail(format!("{} metrics in one directive", metrics.len()));
        }
        for metric in metrics {
            let name = metric["Name"].as_str().unwrap_or_default();
            if name.is_empty() || name.len() > 1024 {
                return fail(format!("bad metric Name in {metric}"));
            }
            if let Some(unit) = metric.get("Unit")
                && !unit.as_str().is_some_and(|u| UNITS.contains(&u))
            {
                return fail(format!("unknown Unit in {metric}"));
            }
            let numeric = match root.get(name) {
                Some(Value::Number(_)) => true,
                Some(Value::Array(values)) => {
                    values.len() <= 100 && values.iter().all(Value::is_number)
                }
                _ => false,
            };
            if !numeric {
                return fail(format!("metric {name} has no numeric value"));
            }
        }
    }
    Ok(())
}

/// `name`'s value in `document`, as a number.
pub fn value_of(document: &Value, name: &str) -> Option<f64> {
    document.get(name).and_then(Value::as_f64)
}

/// The dimension sets of a document's first directive, as lists of names.
pub fn dimension_sets(document: &Value) -> Vec<Vec<String>> {
    document["_aws"]["CloudWatchMetrics"][0]["Dimensions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|set| {
            set.as_array()
                .into_iter()
                .flatten()
                .filter_map(|n| n.as_str().map(str::to_owned))
                .collect()
        })
        .collect()
}

/// The unit each metric of a document's first directive declares, by name.
pub fn units(document: &Value) -> Vec<(String, String)> {
    document["_aws"]["CloudWatchMetrics"][0]["Metrics"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            (
                m["Name"].as_str().unwrap_or_default().to_owned(),
                m["Unit"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Env {
        Env::from_pairs(pairs.iter().copied())
    }

    fn recording(namespace: &str) -> (Metrics, Recorded) {
        let recorded = Recorded::default();
        let config = MetricsConfig {
            emf: true,
            namespace: namespace.to_owned(),
        };
        (
            Metrics::new(&config, Sink::Memory(recorded.clone())),
            recorded,
        )
    }

    #[test]
    fn metrics_are_on_under_lambda_and_off_elsewhere_unless_set() {
        let local = MetricsConfig::from_env(&env(&[])).unwrap();
        assert!(!local.emf);
        assert_eq!(local.namespace, "Parley");
        let lambda = MetricsConfig::from_env(&env(&[("AWS_LAMBDA_FUNCTION_NAME", "chat")]));
        assert!(lambda.unwrap().emf);
        let off = env(&[("AWS_LAMBDA_FUNCTION_NAME", "chat"), ("METRICS", "off")]);
        assert!(!MetricsConfig::from_env(&off).unwrap().emf);
        let on = MetricsConfig::from_env(&env(&[("METRICS", "EMF")])).unwrap();
        assert!(on.emf);
    }

    #[test]
    fn an_unknown_mode_stops_start_up_naming_the_variable() {
        let e = MetricsConfig::from_env(&env(&[("METRICS", "statsd")])).unwrap_err();
        assert_eq!(e.var, "METRICS");
        assert_eq!(e.to_string(), "invalid setting METRICS: must be emf or off");
    }

    #[test]
    fn the_namespace_follows_cloudwatch_rules() {
        let set = env(&[("METRICS_NAMESPACE", "Parley/my-stack_2")]);
        assert_eq!(
            MetricsConfig::from_env(&set).unwrap().namespace,
            "Parley/my-stack_2"
        );
        for bad in ["Parley{x}", "AWS/Lambda", &"x".repeat(256), "Parléy"] {
            let e = MetricsConfig::from_env(&env(&[("METRICS_NAMESPACE", bad)])).unwrap_err();
            assert_eq!(e.var, "METRICS_NAMESPACE", "{bad}");
        }
    }

    #[test]
    fn a_document_has_the_structure_emf_requires() {
        let (metrics, recorded) = recording("Parley/test");
        metrics.emit(
            Document::new()
                .dimension("Outcome", "answered")
                .count("Turns", 1)
                .millis("TurnDuration", Duration::from_nanos(8_223_468_123)),
        );
        let lines = recorded.lines();
        assert_eq!(lines.len(), 1);
        assert!(!lines[0].contains('\n'));
        let doc: Value = serde_json::from_str(&lines[0]).unwrap();
        check_emf(&doc).unwrap();
        let directive = &doc["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(directive["Namespace"], "Parley/test");
        assert_eq!(directive["Dimensions"], json!([[], ["Outcome"]]));
        assert_eq!(
            directive["Metrics"],
            json!([
                {"Name": "Turns", "Unit": "Count"},
                {"Name": "TurnDuration", "Unit": "Milliseconds"}
            ])
        );
        assert_eq!(doc["Outcome"], "answered");
        assert_eq!(doc["Turns"], json!(1));
        assert_eq!(lines[0].matches("8223.468").count(), 1, "{}", lines[0]);
        assert_eq!(doc["TurnDuration"], json!(8223.468));
        let now = chrono::Utc::now().timestamp_millis();
        let stamped = doc["_aws"]["Timestamp"].as_i64().unwrap();
        assert!((now - 60_000..=now).contains(&stamped), "{stamped}");
    }

    #[test]
    fn the_check_refuses_what_cloudwatch_would_drop() {
        let good = Document::new()
            .dimension("Tool", "lad_by_ref")
            .count("ToolCalls", 1)
            .to_json("Parley", 1_700_000_000_000);
        check_emf(&good).unwrap();
        let broken = |edit: &dyn Fn(&mut Value)| {
            let mut doc = good.clone();
            edit(&mut doc);
            check_emf(&doc).unwrap_err()
        };
        broken(&|d| d["_aws"]["Timestamp"] = json!("now"));
        broken(&|d| d["_aws"]["CloudWatchMetrics"] = json!([]));
        broken(&|d| {
            d.as_object_mut().unwrap().remove("Tool");
        });
        broken(&|d| d["ToolCalls"] = json!("1"));
        broken(&|d| d["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Unit"] = json!("Calls"));
        broken(&|d| d["_aws"]["CloudWatchMetrics"][0]["Namespace"] = json!(""));
    }

    #[test]
    fn off_writes_nothing() {
        let recorded = Recorded::default();
        let config = MetricsConfig::from_env(&env(&[])).unwrap();
        let metrics = Metrics::new(&config, Sink::Memory(recorded.clone()));
        metrics.emit(Document::new().count("Turns", 1));
        Metrics::off().emit(Document::new().count("Turns", 1));
        assert!(recorded.lines().is_empty());
    }

    #[test]
    fn dimension_values_cloudwatch_would_refuse_are_made_acceptable() {
        let doc = Document::new()
            .dimension("Status", "")
            .dimension("Tool", "é".repeat(600))
            .count("ModelCalls", 1)
            .to_json("Parley", 0);
        check_emf(&doc).unwrap();
        assert_eq!(doc["Status"], "none");
        assert!(doc["Tool"].as_str().unwrap().len() <= 1024);
    }
}
