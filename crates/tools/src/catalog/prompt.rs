//! A tools file's `[[prompt]]` tables: MCP prompts, message texts with `{{argument}}` slots,
//! checked at start-up (every slot a declared argument, every argument used) and rendered with
//! their arguments; the MCP edge publishes them in `prompts/list`.

use indexmap::IndexMap;
use serde::Deserialize;

use crate::tools::spec::{valid_name, valid_param_name};

/// One declared MCP prompt: a message text with `{{argument}}` slots.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptSpec {
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub text: String,
    pub arguments: Vec<PromptArgumentSpec>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PromptArgumentSpec {
    pub name: String,
    pub description: Option<String>,
    pub required: bool,
}

/// One `[[prompt]]` table as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPrompt {
    pub name: Option<String>,
    title: Option<String>,
    description: Option<String>,
    text: Option<String>,
    #[serde(default)]
    arguments: IndexMap<String, RawPromptArgument>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPromptArgument {
    description: Option<String>,
    #[serde(default)]
    required: bool,
}

/// One `[[prompt]]` checked; the error says what is wrong, the caller adds the prompt's name.
pub fn parse(raw: RawPrompt) -> Result<PromptSpec, String> {
    let Some(name) = raw.name else {
        return Err("needs a name (every [[prompt]] needs name and text)".into());
    };
    if !valid_name(&name) {
        return Err("name must be 1-64 characters of A-Z, a-z, 0-9, _ or -".into());
    }
    let text = raw.text.unwrap_or_default();
    if text.trim().is_empty() {
        return Err("needs text: the message the prompt gives the model".into());
    }
    let arguments = raw
        .arguments
        .into_iter()
        .map(|(name, a)| {
            if !valid_param_name(&name) {
                return Err(format!(
                    "argument `{name}`: names are letters, digits and _"
                ));
            }
            Ok(PromptArgumentSpec {
                name,
                description: a.description.map(|d| d.trim().to_owned()),
                required: a.required,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    for slot in template_slots(&text) {
        if !arguments.iter().any(|a| a.name == slot) {
            return Err(format!(
                "text uses {{{{{slot}}}}}, which is not a declared argument"
            ));
        }
    }
    if let Some(unused) = arguments
        .iter()
        .find(|a| !template_slots(&text).any(|slot| slot == a.name))
    {
        return Err(format!(
            "argument `{0}` is declared but the text never uses {{{{{0}}}}}",
            unused.name
        ));
    }
    Ok(PromptSpec {
        name,
        title: raw.title,
        description: raw.description.map(|d| d.trim().to_owned()),
        text,
        arguments,
    })
}

/// The names in `{{name}}` slots of a prompt text, in order.
fn template_slots(text: &str) -> impl Iterator<Item = &str> {
    text.split("{{").skip(1).filter_map(|rest| {
        let (name, _) = rest.split_once("}}")?;
        valid_param_name(name.trim()).then(|| name.trim())
    })
}

impl PromptSpec {
    /// The text with each `{{name}}` replaced by its argument, or by nothing when absent.
    pub fn render(&self, arguments: &IndexMap<String, String>) -> String {
        let mut out = String::with_capacity(self.text.len());
        let mut rest = self.text.as_str();
        while let Some(start) = rest.find("{{") {
            let after = &rest[start + 2..];
            match after.split_once("}}") {
                Some((name, tail)) if valid_param_name(name.trim()) => {
                    out.push_str(&rest[..start]);
                    if let Some(value) = arguments.get(name.trim()) {
                        out.push_str(value);
                    }
                    rest = tail;
                }
                _ => {
                    out.push_str(&rest[..start + 2]);
                    rest = after;
                }
            }
        }
        out.push_str(rest);
        out
    }
}
