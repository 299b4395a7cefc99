//! Stored messages turned back into model input: earlier turns' questions, tool calls, tool
//! outputs (cut to a limit) and replies, in the order the model expects them, and the one text
//! form a tool output is given to the model as, in this turn or a later one. Source numbers
//! (`cite` fields, `[S<n>]` citations) are the earlier turn's own and are left out.

use serde_json::Value;

use crate::turn::conversation::{StoredMessage, Trace};
use crate::turn::llm::{Item, ToolCall};
use crate::turn::sources;

/// Turns stored messages into model input. Tool outputs of earlier turns are cut to
/// `replay_chars` characters: the model has already used them, and a fresh call is cheap.
pub fn replay(history: &[StoredMessage], replay_chars: usize) -> Vec<Item> {
    let mut items = Vec::new();
    for m in history {
        if m.role == "user" {
            items.push(Item::User(m.content.clone()));
            continue;
        }
        let mut step = 0;
        let mut outputs = Vec::new();
        for t in &with_approvals(m) {
            if t.step != step {
                items.append(&mut outputs);
                step = t.step;
            }
            items.push(Item::Call(ToolCall {
                call_id: t.call_id.clone(),
                name: t.name.clone(),
                arguments: match &t.args {
                    Value::String(raw) => raw.clone(),
                    other => other.to_string(),
                },
            }));
            outputs.push(Item::Output {
                call_id: t.call_id.clone(),
                output: truncate(&output_text(&sources::strip_cites(&t.output)), replay_chars),
            });
        }
        items.append(&mut outputs);
        if !m.content.is_empty() {
            items.push(Item::Assistant(sources::strip_citations(&m.content)));
        }
    }
    items
}

/// An assistant message's calls as the model made them: its traces, except the decided calls
/// a resumed turn carries (`approval` set), and the calls that waited for approval with their
/// outcomes, each in its step. So a call that waited is replayed once, where it was made, with
/// what became of it (its result, or that it was declined or expired).
fn with_approvals(m: &StoredMessage) -> Vec<Trace> {
    let mut traces: Vec<Trace> = m
        .traces
        .iter()
        .filter(|t| t.approval.is_none())
        .cloned()
        .collect();
    traces.extend(m.approvals.iter().map(Trace::of_approval));
    // Stable: within a step, the calls that ran come first, as they were stored.
    traces.sort_by_key(|t| t.step);
    traces
}

/// The text a tool output is given to the model as.
pub fn output_text(output: &Value) -> String {
    match output {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn truncate(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        None => text.to_owned(),
        Some((cut, _)) => {
            let rest = text[cut..].chars().count();
            format!(
                "{}… [truncated from an earlier turn: {rest} more characters; call the tool again if you need them]",
                &text[..cut]
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::turn::approval::{Approval, ApprovalId, Decision};
    use chrono::Utc;
    use serde_json::json;

    fn trace(call_id: &str, step: u32, output: Value) -> Trace {
        Trace {
            call_id: call_id.into(),
            step,
            name: "lad_by_ref".into(),
            args: json!({"ref": "Leeds"}),
            output,
            is_error: false,
            duration_ms: 3,
            approval: None,
        }
    }

    fn msg(role: &str, content: &str, traces: Vec<Trace>) -> StoredMessage {
        StoredMessage {
            seq: 0,
            role: role.into(),
            content: content.into(),
            context: None,
            traces,
            usage: None,
            steps: None,
            error: None,
            cut_short: false,
            interrupted: false,
            sources: None,
            charts: None,
            created_at: Utc::now(),
            approvals: Vec::new(),
            feedback: None,
        }
    }

    fn approval(call_id: &str, step: u32, decision: Decision, result: Option<Value>) -> Approval {
        Approval {
            id: ApprovalId::new(),
            step,
            call_id: call_id.into(),
            server: "parley".into(),
            tool: "delete_task".into(),
            arguments: json!({"id": 7}),
            created_at: Utc::now(),
            expires_at: Utc::now(),
            decision,
            decided_by: None,
            decided_at: None,
            reason: None,
            result,
            result_is_error: decision != Decision::Approved,
            about: Default::default(),
            idempotency_key: "k".into(),
        }
    }

    fn outputs(items: &[Item]) -> Vec<(String, String)> {
        items
            .iter()
            .filter_map(|i| match i {
                Item::Output { call_id, output } => Some((call_id.clone(), output.clone())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_call_that_waited_is_replayed_once_where_it_was_made_with_its_outcome() {
        let mut paused = msg("assistant", "", vec![trace("a", 1, json!("listed"))]);
        let approved = approval("d", 1, Decision::Approved, Some(json!("deleted")));
        paused.approvals = vec![approved.clone()];
        // The resumed turn's record repeats the decided call; replay must not.
        let mut repeat = trace("d", 1, json!("deleted"));
        repeat.approval = Some(approved.id);
        let resumed = msg(
            "assistant",
            "Done.",
            vec![repeat, trace("e", 2, json!("ok"))],
        );
        let items = replay(&[msg("user", "q", vec![]), paused, resumed], 1000);
        assert_eq!(
            outputs(&items),
            [
                ("a".to_owned(), "listed".to_owned()),
                ("d".to_owned(), "deleted".to_owned()),
                ("e".to_owned(), "ok".to_owned())
            ]
        );
        assert!(
            matches!(&items[2], Item::Call(c) if c.call_id == "d"),
            "{items:?}"
        );
    }

    #[test]
    fn a_declined_or_unanswered_call_is_replayed_as_not_run() {
        let mut paused = msg("assistant", "", vec![]);
        paused.approvals = vec![
            approval(
                "d",
                1,
                Decision::Denied,
                Some(json!("not run: the user declined this call")),
            ),
            approval("p", 1, Decision::Pending, None),
        ];
        let items = replay(&[msg("user", "q", vec![]), paused], 1000);
        assert_eq!(
            outputs(&items),
            [
                (
                    "d".to_owned(),
                    "not run: the user declined this call".to_owned()
                ),
                ("p".to_owned(), "not run: it was never approved".to_owned())
            ]
        );
    }

    #[test]
    fn replay_keeps_each_call_before_its_output_step_by_step() {
        let history = [
            msg("user", "How is Leeds?", vec![]),
            msg(
                "assistant",
                "Leeds is fine.",
                vec![
                    trace("a", 1, json!({"rows": []})),
                    trace("b", 1, json!("x")),
                    trace("c", 2, json!("y")),
                ],
            ),
        ];
        let items = replay(&history, 1000);
        let kinds: Vec<String> = items
            .iter()
            .map(|i| match i {
                Item::User(_) => "user".into(),
                Item::Assistant(_) => "assistant".into(),
                Item::Call(c) => format!("call {}", c.call_id),
                Item::Output { call_id, .. } => format!("output {call_id}"),
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "user",
                "call a",
                "call b",
                "output a",
                "output b",
                "call c",
                "output c",
                "assistant"
            ]
        );
    }

    #[test]
    fn earlier_tool_outputs_are_cut_to_the_replay_limit() {
        let long = "x".repeat(500);
        let history = [
            msg("user", "q", vec![]),
            msg("assistant", "a", vec![trace("a", 1, Value::String(long))]),
        ];
        let items = replay(&history, 100);
        let Item::Output { output, .. } = &items[2] else {
            panic!("{items:?}")
        };
        assert!(output.starts_with(&"x".repeat(100)));
        assert!(output.contains("400 more characters"));
    }

    #[test]
    fn an_earlier_turns_source_numbers_are_not_replayed() {
        let history = [
            msg("user", "q", vec![]),
            msg(
                "assistant",
                "It is so [S1].",
                vec![trace("a", 1, json!({"rows": [{"id": 4, "cite": "S1"}]}))],
            ),
        ];
        let items = replay(&history, 1000);
        let Item::Output { output, .. } = &items[2] else {
            panic!("{items:?}")
        };
        assert_eq!(output, r#"{"rows":[{"id":4}]}"#);
        let Item::Assistant(reply) = &items[3] else {
            panic!("{items:?}")
        };
        assert_eq!(reply, "It is so.");
    }

    #[test]
    fn invalid_json_arguments_are_replayed_verbatim() {
        let mut t = trace("a", 1, json!("err"));
        t.args = Value::String("{not json".into());
        let items = replay(
            &[msg("user", "q", vec![]), msg("assistant", "", vec![t])],
            100,
        );
        let Item::Call(call) = &items[1] else {
            panic!()
        };
        assert_eq!(call.arguments, "{not json");
        assert_eq!(items.len(), 3, "an empty reply is not replayed");
    }
}
