//! The tools offered to the model, built from the servers' listings: their names as the model
//! sees them, where each call goes, whether a lost answer may be re-sent, and what the
//! instructions say about each tool ([`ToolTraits`]) and each server ([`ServerGuidance`]),
//! which of a tool's output columns make a source ([`Citation`]) and which tools run a verified
//! query. It reads listings only; it never calls a tool.

use std::collections::HashMap;
use std::sync::Arc;

use jsonschema::error::ValidationErrorKind;

use rmcp::model::Tool;
use serde_json::{Map, Value};

use crate::turn::approval::{About, Policy, ToolMarks, Why};
use crate::turn::llm::ToolDef;
use parley_wire::{
    Citation, META_APPROVAL, META_CITATION, META_CONTEXT, META_IDEMPOTENCY_KEY, META_VERIFIED,
};

/// The tools offered to the model, under the names the model uses.
#[derive(Debug, Default)]
pub struct Catalog {
    pub tools: Vec<ToolDef>,
    pub(super) routes: HashMap<String, Route>,
    /// Each listed server's `instructions` from its handshake, in configuration order.
    pub guidance: Vec<ServerGuidance>,
    /// A server could not be listed; its tools are missing and the next turn tries again.
    pub(super) incomplete: bool,
    /// Why servers that refused the chat's credentials (401/403) are missing, one sentence
    /// each naming the setting to check.
    pub(super) refused: Vec<String>,
}

#[derive(Debug, Clone)]
pub(super) struct Route {
    pub(super) server: usize,
    /// The server's configured name (`parley`, or its name in `MCP_SERVERS`).
    pub(super) server_name: String,
    pub(super) remote_name: String,
    pub(super) schema: ArgumentSchema,
    /// Sending the call again does no more than once: the server says the tool is read-only
    /// or idempotent, or it records the idempotency key every call carries.
    pub(super) resendable: bool,
    pub(super) traits: ToolTraits,
    /// The listing's description and title (the tool's, else its annotations'), for the
    /// user's approval card.
    pub(super) description: Option<String>,
    pub(super) title: Option<String>,
}

/// What the instructions say about one tool, from its listing's annotations and `_meta`.
/// Annotations are the server's hints: a tool without them is taken to write and destroy, as
/// MCP's defaults say.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolTraits {
    /// The name the model uses.
    pub name: String,
    /// Not annotated `readOnlyHint`: it may change data.
    pub writes: bool,
    /// It writes and is not annotated `destructiveHint: false`: it may delete or overwrite.
    pub destructive: bool,
    /// `_meta["parley/context"]`, as (UI context key, parameter) pairs.
    pub context: Vec<(String, String)>,
    /// `_meta["parley/citation"]`: its rows are sources the reply may cite.
    pub citation: Option<Citation>,
    /// `_meta["parley/verified"]`: the name of the verified query it runs; a reply after a
    /// successful call is answered from that query.
    pub verified: Option<String>,
    /// What decides whether its calls wait for the user's approval (`APPROVAL`).
    pub marks: ToolMarks,
}

/// A server's own guidance for models (its handshake's `instructions`).
#[derive(Debug, Clone, PartialEq)]
pub struct ServerGuidance {
    pub server: String,
    pub instructions: String,
}

/// One server's listing: its tools and its handshake's instructions.
pub(super) struct Listing {
    pub(super) server: usize,
    pub(super) server_name: String,
    pub(super) tools: Vec<Tool>,
    pub(super) instructions: Option<String>,
}

impl Catalog {
    pub fn contains(&self, name: &str) -> bool {
        self.routes.contains_key(name)
    }

    /// Some server could not be listed, so some tools may be missing.
    pub fn is_incomplete(&self) -> bool {
        self.incomplete
    }

    /// No tools, because listing them took longer than the turn may: calls become tool errors
    /// saying a server cannot be reached.
    pub fn unavailable() -> Self {
        Self {
            incomplete: true,
            ..Self::default()
        }
    }

    /// Which output columns of the tool the model calls `name` make a source, if any.
    pub fn citation(&self, name: &str) -> Option<&Citation> {
        self.routes.get(name)?.traits.citation.as_ref()
    }

    /// The verified query the tool the model calls `name` runs, if it runs one.
    pub fn verified(&self, name: &str) -> Option<&str> {
        self.routes.get(name)?.traits.verified.as_deref()
    }

    /// Whether a call of the tool the model calls `name` waits for the user's approval under
    /// `policy`. A name the catalog does not know runs (and fails as unknown).
    pub fn waits(&self, name: &str, policy: Policy) -> bool {
        self.why(name, policy).is_some()
    }

    /// Why a call of the tool the model calls `name` waits under `policy`, when it does.
    pub fn why(&self, name: &str, policy: Policy) -> Option<Why> {
        policy.why(self.routes.get(name)?.traits.marks)
    }

    /// What a waiting call of the tool the model calls `name` tells the user: why it waits
    /// under `policy` and what the tool does, as listed. `None` when its calls do not wait.
    pub fn about(&self, name: &str, policy: Policy) -> Option<About> {
        let route = self.routes.get(name)?;
        Some(About {
            why: Some(policy.why(route.traits.marks)?),
            description: route.description.clone(),
            title: route.title.clone(),
        })
    }

    /// Whether `args` fit the input schema of the tool the model calls `name` (see
    /// [`ArgumentSchema::check`]); a name the catalog does not know fits nothing here and
    /// fails as unknown when called.
    pub fn check_arguments(&self, name: &str, args: &Map<String, Value>) -> Result<(), String> {
        match self.routes.get(name) {
            Some(route) => route.schema.check(args),
            None => Ok(()),
        }
    }

    /// The configured name of the server offering the tool the model calls `name`.
    pub fn server_of(&self, name: &str) -> Option<&str> {
        self.routes.get(name).map(|r| r.server_name.as_str())
    }

    /// The traits of `offered` (tools of this catalog), in their order.
    pub fn traits<'a>(&'a self, offered: &[ToolDef]) -> Vec<&'a ToolTraits> {
        offered
            .iter()
            .filter_map(|t| self.routes.get(&t.name).map(|r| &r.traits))
            .collect()
    }

    /// Names are kept as the servers give them, except where two servers offer the same name:
    /// then each of those becomes `<server>__<tool>`.
    pub(super) fn build(listed: Vec<Listing>, incomplete: bool) -> Catalog {
        let mut seen: HashMap<String, usize> = HashMap::new();
        for listing in &listed {
            for t in &listing.tools {
                *seen.entry(t.name.to_string()).or_default() += 1;
            }
        }
        let mut catalog = Catalog {
            incomplete,
            ..Catalog::default()
        };
        for listing in listed {
            if let Some(instructions) = listing.instructions.filter(|i| !i.trim().is_empty()) {
                catalog.guidance.push(ServerGuidance {
                    server: listing.server_name.clone(),
                    instructions,
                });
            }
            for t in listing.tools {
                let remote_name = t.name.to_string();
                let name = if seen[&remote_name] > 1 {
                    format!("{}__{}", listing.server_name, remote_name)
                } else {
                    remote_name.clone()
                };
                let schema = Value::Object((*t.input_schema).clone());
                let hint = |get: fn(&rmcp::model::ToolAnnotations) -> Option<bool>| {
                    t.annotations.as_ref().and_then(get)
                };
                let read_only = hint(|a| a.read_only_hint) == Some(true);
                let idempotent = hint(|a| a.idempotent_hint) == Some(true);
                let meta = t.meta.as_ref().map(|m| &m.0);
                let keyed =
                    meta.and_then(|m| m.get(META_IDEMPOTENCY_KEY)) == Some(&Value::Bool(true));
                let traits = ToolTraits {
                    name: name.clone(),
                    writes: !read_only,
                    destructive: !read_only && hint(|a| a.destructive_hint) != Some(false),
                    context: context_pairs(meta),
                    citation: citation(&name, meta),
                    verified: verified(&name, meta),
                    marks: ToolMarks {
                        read_only,
                        destructive: hint(|a| a.destructive_hint) == Some(true),
                        always: meta.and_then(|m| m.get(META_APPROVAL))
                            == Some(&Value::String("always".into())),
                    },
                };
                catalog.tools.push(ToolDef::new(
                    name.clone(),
                    t.description.as_deref().unwrap_or_default(),
                    &schema,
                ));
                let checked = ArgumentSchema::new(&name, &schema);
                catalog.routes.insert(
                    name,
                    Route {
                        server: listing.server,
                        server_name: listing.server_name.clone(),
                        remote_name,
                        schema: checked,
                        // Every call carries an idempotency key, so a keyed tool replays.
                        resendable: read_only || idempotent || keyed,
                        traits,
                        description: t
                            .description
                            .as_deref()
                            .map(str::trim)
                            .filter(|d| !d.is_empty())
                            .map(str::to_owned),
                        title: t
                            .title
                            .clone()
                            .or_else(|| t.annotations.as_ref().and_then(|a| a.title.clone()))
                            .filter(|t| !t.trim().is_empty()),
                    },
                );
            }
        }
        catalog
    }
}

/// `_meta["parley/context"]` as pairs; entries that are not strings are ignored.
fn context_pairs(meta: Option<&Map<String, Value>>) -> Vec<(String, String)> {
    meta.and_then(|m| m.get(META_CONTEXT))
        .and_then(Value::as_object)
        .map(|map| {
            map.iter()
                .filter_map(|(key, param)| Some((key.clone(), param.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// `_meta["parley/citation"]`; a malformed one is logged and ignored, so the tool is still
/// offered, only without sources.
fn citation(tool: &str, meta: Option<&Map<String, Value>>) -> Option<Citation> {
    let declared = meta?.get(META_CITATION)?;
    match Citation::from_meta(declared) {
        Ok(citation) => Some(citation),
        Err(why) => {
            tracing::warn!(
                tool,
                why = %why,
                "ignoring the tool's malformed `_meta[\"{META_CITATION}\"]`"
            );
            None
        }
    }
}

/// `_meta["parley/verified"]`, trimmed; one that is not a non-blank string is logged and
/// ignored, so the tool is still offered, only without its source.
fn verified(tool: &str, meta: Option<&Map<String, Value>>) -> Option<String> {
    match meta?.get(META_VERIFIED)? {
        Value::String(name) if !name.trim().is_empty() => Some(name.trim().to_owned()),
        _ => {
            tracing::warn!(
                tool,
                "ignoring the tool's `_meta[\"{META_VERIFIED}\"]`: not the name of a query"
            );
            None
        }
    }
}

/// A tool's input schema, compiled once per catalog: what a call's arguments must be before
/// the call is sent or waits for the user's approval.
#[derive(Debug, Clone)]
pub struct ArgumentSchema(Option<Arc<jsonschema::Validator>>);

impl ArgumentSchema {
    /// `schema` compiled; one that does not compile (an unknown draft, a `$ref` to elsewhere)
    /// checks nothing here, and the server checks the call as it always does.
    pub fn new(tool: &str, schema: &Value) -> Self {
        match jsonschema::validator_for(schema) {
            Ok(validator) => Self(Some(Arc::new(validator))),
            Err(e) => {
                tracing::warn!(tool, error = %e.masked(), "the tool's input schema does not compile; its calls are checked by its server only");
                Self(None)
            }
        }
    }

    /// Whether `args` fit the schema. A `null` argument counts as absent, as Parley's own
    /// server takes it (models send `null` for optional parameters they leave out). The
    /// message names the parameter and what is wrong, for the model to correct the call.
    pub fn check(&self, args: &Map<String, Value>) -> Result<(), String> {
        let Some(validator) = &self.0 else {
            return Ok(());
        };
        let given = Value::Object(
            args.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        );
        let Some(e) = validator.iter_errors(&given).next() else {
            return Ok(());
        };
        Err(match e.kind() {
            ValidationErrorKind::Required { property } => format!(
                "missing required parameter `{}`",
                property.as_str().unwrap_or_default()
            ),
            ValidationErrorKind::AdditionalProperties { unexpected } => {
                format!("unknown parameter `{}`", unexpected.join("`, `"))
            }
            _ => {
                let path = e.instance_path().to_string();
                let name = path.trim_start_matches('/').replace('/', ".");
                if name.is_empty() {
                    e.to_string()
                } else {
                    format!("parameter `{name}`: {e}")
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rmcp::model::{MetaObject, ToolAnnotations};
    use serde_json::json;

    use super::*;

    fn schema() -> ArgumentSchema {
        ArgumentSchema::new(
            "search",
            &json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "minLength": 1},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 50},
                    "order": {"enum": ["new", "old"]}
                },
                "required": ["query"],
                "additionalProperties": false
            }),
        )
    }

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn arguments_missing_a_required_name_are_refused() {
        let e = schema().check(&args(json!({"limit": 3}))).unwrap_err();
        assert_eq!(e, "missing required parameter `query`");
        let e = schema().check(&args(json!({"query": null}))).unwrap_err();
        assert_eq!(e, "missing required parameter `query`");
    }

    #[test]
    fn unknown_names_wrong_types_and_values_out_of_range_are_refused() {
        let check = |v: Value| schema().check(&args(v));
        assert_eq!(
            check(json!({"query": "x", "lim": 1})).unwrap_err(),
            "unknown parameter `lim`"
        );
        let e = check(json!({"query": "x", "limit": "5"})).unwrap_err();
        assert!(
            e.starts_with("parameter `limit`: ") && e.contains("integer"),
            "{e}"
        );
        let e = check(json!({"query": "x", "limit": 500})).unwrap_err();
        assert!(
            e.starts_with("parameter `limit`: ") && e.contains("50"),
            "{e}"
        );
        let e = check(json!({"query": "x", "order": "sideways"})).unwrap_err();
        assert!(e.starts_with("parameter `order`: "), "{e}");
        assert!(check(json!({"query": ""})).is_err());
        assert!(check(json!({"query": "x", "limit": 5, "order": "new"})).is_ok());
        // Left out as `null`: the way models skip an optional parameter.
        assert!(check(json!({"query": "x", "limit": null})).is_ok());
    }

    #[test]
    fn a_schema_that_does_not_compile_checks_nothing() {
        let odd = ArgumentSchema::new("odd", &json!({"type": 12}));
        assert!(odd.check(&args(json!({"anything": 1}))).is_ok());
    }

    /// A listed tool with annotations (read-only, destructive, idempotent) and `_meta`.
    fn tool(
        name: &'static str,
        hints: (Option<bool>, Option<bool>, Option<bool>),
        meta: Value,
    ) -> Tool {
        let mut t = Tool::new(name, "d", Arc::new(Map::new()));
        let mut a = ToolAnnotations::default();
        (a.read_only_hint, a.destructive_hint, a.idempotent_hint) = hints;
        t.annotations = Some(a);
        t.meta = meta.as_object().cloned().map(MetaObject);
        t
    }

    fn listing(server: usize, tools: Vec<Tool>, instructions: Option<&str>) -> Listing {
        Listing {
            server,
            server_name: ["parley", "docs"][server].to_owned(),
            tools,
            instructions: instructions.map(str::to_owned),
        }
    }

    #[test]
    fn annotations_and_meta_become_traits_and_resending_rules() {
        let catalog = Catalog::build(
            vec![listing(
                0,
                vec![
                    tool(
                        "lookup",
                        (Some(true), None, None),
                        json!({META_CONTEXT: {"project": "code", "bad": 1}}),
                    ),
                    tool(
                        "create",
                        (Some(false), Some(false), Some(false)),
                        json!({META_IDEMPOTENCY_KEY: true}),
                    ),
                    tool("remove", (Some(false), None, Some(true)), json!({})),
                    tool("send", (Some(false), Some(false), Some(false)), json!({})),
                    tool(
                        "search",
                        (Some(true), None, None),
                        json!({META_CITATION: {"id": "doc", "title": "name"}}),
                    ),
                    tool(
                        "broken",
                        (Some(true), None, None),
                        json!({META_CITATION: {"title": "name"}}),
                    ),
                    tool(
                        "verified_top_artists",
                        (Some(true), None, None),
                        json!({META_VERIFIED: " top_artists "}),
                    ),
                    tool(
                        "verified_blank",
                        (Some(true), None, None),
                        json!({META_VERIFIED: ""}),
                    ),
                ],
                Some("Guidance."),
            )],
            false,
        );
        let t = |name: &str| &catalog.routes[name];
        assert!(!t("lookup").traits.writes);
        assert_eq!(
            t("lookup").traits.context,
            [("project".to_owned(), "code".to_owned())]
        );
        assert!(t("create").traits.writes && !t("create").traits.destructive);
        // destructiveHint defaults to true for a tool that writes.
        assert!(t("remove").traits.destructive);
        assert!(t("lookup").resendable && t("create").resendable && t("remove").resendable);
        assert!(!t("send").resendable);
        let search = catalog.citation("search").expect("a citation");
        assert_eq!(
            (search.id.as_str(), search.title.as_deref()),
            ("doc", Some("name"))
        );
        assert_eq!(catalog.citation("broken"), None, "no `id`: ignored");
        assert!(catalog.contains("broken"), "the tool is still offered");
        assert_eq!(catalog.citation("lookup"), None);
        assert_eq!(
            catalog.verified("verified_top_artists"),
            Some("top_artists")
        );
        assert_eq!(catalog.verified("verified_blank"), None, "blank: ignored");
        assert!(
            catalog.contains("verified_blank"),
            "the tool is still offered"
        );
        assert_eq!(catalog.verified("lookup"), None);
        assert_eq!(
            catalog.guidance,
            [ServerGuidance {
                server: "parley".into(),
                instructions: "Guidance.".into()
            }]
        );
        let offered = &catalog.tools[1..2];
        assert_eq!(catalog.traits(offered)[0].name, "create");
    }

    #[test]
    fn only_an_explicit_destructive_hint_or_approval_always_makes_calls_wait() {
        let catalog = Catalog::build(
            vec![
                listing(
                    0,
                    vec![
                        tool("delete", (Some(false), Some(true), None), json!({})),
                        // MCP's default says destructive, but the server did not say so.
                        tool("unsaid", (Some(false), None, None), json!({})),
                        tool("add", (Some(false), Some(false), None), json!({})),
                        tool("read", (Some(true), None, None), json!({})),
                    ],
                    None,
                ),
                listing(
                    1,
                    vec![
                        tool(
                            "mail",
                            (Some(false), Some(false), None),
                            json!({META_APPROVAL: "always"}),
                        ),
                        tool(
                            "peek",
                            (Some(true), None, None),
                            json!({META_APPROVAL: "never"}),
                        ),
                    ],
                    None,
                ),
            ],
            false,
        );
        let waiting = |policy: Policy| -> Vec<&str> {
            ["delete", "unsaid", "add", "read", "mail", "peek", "missing"]
                .into_iter()
                .filter(|name| catalog.waits(name, policy))
                .collect()
        };
        assert_eq!(waiting(Policy::Destructive), ["delete", "mail"]);
        assert_eq!(waiting(Policy::Writes), ["delete", "unsaid", "add", "mail"]);
        assert!(waiting(Policy::Off).is_empty());
        assert_eq!(catalog.server_of("mail"), Some("docs"));
        assert_eq!(catalog.server_of("delete"), Some("parley"));
    }

    #[test]
    fn a_waiting_calls_card_says_why_and_what_the_tool_does_as_listed() {
        let mut delete = tool("delete", (Some(false), Some(true), None), json!({}));
        delete.description = Some(" Deletes one task by id. ".into());
        delete.annotations.as_mut().unwrap().title = Some("Delete a task".into());
        let mut mail = tool(
            "mail",
            (Some(false), Some(false), None),
            json!({META_APPROVAL: "always"}),
        );
        mail.title = Some("Send an e-mail".into());
        mail.description = Some(String::new().into());
        let add = tool("add", (Some(false), Some(false), None), json!({}));
        let catalog = Catalog::build(vec![listing(0, vec![delete, mail, add], None)], false);
        let about = catalog.about("delete", Policy::Destructive).unwrap();
        assert_eq!(about.why, Some(Why::Destructive));
        assert_eq!(
            about.description.as_deref(),
            Some("Deletes one task by id.")
        );
        assert_eq!(about.title.as_deref(), Some("Delete a task"));
        let about = catalog.about("mail", Policy::Writes).unwrap();
        assert_eq!(about.why, Some(Why::Always));
        assert_eq!(
            (about.description, about.title.as_deref()),
            (None, Some("Send an e-mail"))
        );
        assert_eq!(catalog.about("add", Policy::Destructive), None);
        assert_eq!(catalog.why("add", Policy::Writes), Some(Why::Writes));
        assert_eq!(catalog.about("missing", Policy::Writes), None);
    }

    #[test]
    fn a_name_two_servers_share_is_prefixed_with_each_server() {
        let catalog = Catalog::build(
            vec![
                listing(
                    0,
                    vec![tool("search", (Some(true), None, None), json!({}))],
                    None,
                ),
                listing(
                    1,
                    vec![tool("search", (Some(true), None, None), json!({}))],
                    Some(" "),
                ),
            ],
            false,
        );
        assert!(catalog.contains("parley__search") && catalog.contains("docs__search"));
        assert!(catalog.guidance.is_empty());
    }
}
