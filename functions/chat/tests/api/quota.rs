//! What a turn costs and who may start one: the usage ledger (`chat.turn_usage`) each stored
//! turn leaves, and the per-user budgets and rate limits charged from it (`turn::quota`).

use parley_testkit::connect;
use parley_testkit::llm::Step;
use serde_json::json;

use crate::helpers::{Options, spawn};

/// A turn with a tool call that works, one that fails, and an answer, then a turn whose model
/// fails: each leaves exactly one ledger row, with what the model reported and what ran.
#[tokio::test]
async fn every_stored_turn_leaves_one_ledger_row_failed_ones_included() {
    let chat = spawn(Options {
        steps: vec![
            Step::calls([
                ("lad_by_ref", r#"{"ref":"Leeds"}"#),
                ("get_feedback", r#"{"id":"seven"}"#),
            ]),
            Step::text("Leeds is in West Yorkshire."),
            Step::error(500, "the scripted model is down"),
        ],
        extra_env: vec![("LLM_MAX_RETRIES", "0".into())],
        ..Options::default()
    })
    .await;
    let body = chat
        .turn("alice", json!({"message": "Tell me about Leeds"}))
        .await;
    let conversation = body["conversation_id"].as_str().unwrap().to_owned();
    // The scripted model reports 100 tokens in and 20 out per response.
    assert_eq!(
        body["usage"],
        json!({"input_tokens": 200, "output_tokens": 40, "total_tokens": 240})
    );
    let (status, failed) = chat
        .post(
            "alice",
            json!({"message": "And Bristol?", "conversation_id": conversation}),
        )
        .await;
    assert_eq!(status, 502, "{failed}");

    let db = connect(chat.db_url.as_deref().unwrap()).await;
    let rows = db
        .query(
            "SELECT owner, conversation_id::text, seq, model, model_calls, input_tokens,
                    output_tokens, tool_calls, tool_errors, outcome, error
             FROM chat.turn_usage ORDER BY seq",
            &[],
        )
        .await
        .unwrap();
    let ledger: Vec<_> = rows
        .iter()
        .map(|r| {
            json!({
                "owner": r.get::<_, String>(0),
                "conversation_id": r.get::<_, String>(1),
                "seq": r.get::<_, Option<i32>>(2),
                "model": r.get::<_, String>(3),
                "model_calls": r.get::<_, i32>(4),
                "input_tokens": r.get::<_, i64>(5),
                "output_tokens": r.get::<_, i64>(6),
                "tool_calls": r.get::<_, i32>(7),
                "tool_errors": r.get::<_, i32>(8),
                "outcome": r.get::<_, String>(9),
                "error": r.get::<_, bool>(10),
            })
        })
        .collect();
    // The assistant messages are the 2nd and 4th of the conversation.
    let seqs: Vec<i64> = chat
        .messages("alice", &conversation)
        .await
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(|m| m["seq"].as_i64().unwrap())
        .collect();
    assert_eq!(seqs, [2, 4]);
    assert_eq!(
        ledger,
        [
            json!({
                "owner": "alice", "conversation_id": conversation, "seq": 2,
                "model": "scripted-model", "model_calls": 2, "input_tokens": 200,
                "output_tokens": 40, "tool_calls": 2, "tool_errors": 1,
                "outcome": "answered", "error": false,
            }),
            // The model never answered: nothing to charge, but the turn is on record.
            json!({
                "owner": "alice", "conversation_id": conversation, "seq": 4,
                "model": "scripted-model", "model_calls": 0, "input_tokens": 0,
                "output_tokens": 0, "tool_calls": 0, "tool_errors": 0,
                "outcome": "llm_unavailable", "error": true,
            }),
        ]
    );
}
