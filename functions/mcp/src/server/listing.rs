//! How the engine's tools and prompts are published in `tools/list` and `prompts/list`: its
//! plain [`Listing`]s and [`PromptSpec`]s turned into rmcp's types, once at start-up.

use std::sync::Arc;

use parley_tools::catalog::PromptSpec;
use parley_tools::listing::Listing;
use rmcp::model::{Prompt, PromptArgument, Tool, ToolAnnotations};

/// A tool as `tools/list` shows it; every tool acts on the team's database only, so none is
/// open-world.
pub fn tool(listing: &Listing) -> Tool {
    let mut tool = Tool::new(
        listing.name.clone(),
        listing.description.clone(),
        Arc::new(listing.input_schema.clone()),
    )
    .with_raw_output_schema(Arc::new(listing.output_schema.clone()))
    .with_annotations(
        ToolAnnotations::new()
            .read_only(listing.hints.read_only)
            .destructive(listing.hints.destructive)
            .idempotent(listing.hints.idempotent)
            .open_world(false),
    );
    if let Some(title) = &listing.title {
        tool = tool.with_title(title.clone());
    }
    if !listing.meta.is_empty() {
        tool.meta = Some(listing.meta.clone().into());
    }
    tool
}

/// A prompt as `prompts/list` shows it.
pub fn prompt(spec: &PromptSpec) -> Prompt {
    let arguments = spec
        .arguments
        .iter()
        .map(|a| {
            let mut argument = PromptArgument::new(a.name.clone()).with_required(a.required);
            if let Some(d) = &a.description {
                argument = argument.with_description(d.clone());
            }
            argument
        })
        .collect::<Vec<_>>();
    let mut prompt = Prompt::new(
        spec.name.clone(),
        spec.description.clone(),
        (!arguments.is_empty()).then_some(arguments),
    );
    if let Some(title) = &spec.title {
        prompt = prompt.with_title(title.clone());
    }
    prompt
}
