//! The tool-calling loop end to end: tool calls through the real mcp function, parallel calls,
//! the step cap, bad arguments, LLM retries and failures, the MCP function down, both dialects.

use parley_testkit::TestDb;
use parley_testkit::llm::{ScriptedLlm, Step};
use serde_json::{Value, json};

use crate::helpers::{
    FEEDBACK_ROWS, Options, input_of, spawn, spawn_chat, spawn_chat_with_mcp_and_llm,
};

fn call(name: &str, args: &str) -> (String, String) {
    (name.to_owned(), args.to_owned())
}

#[tokio::test]
async fn a_turn_with_one_tool_call_answers_from_the_database() {
    let chat = spawn_chat(vec![
        Step::Calls(vec![call("lad_by_ref", r#"{"ref":"Leeds"}"#)]),
        Step::Text("Leeds (E08000035) is in West Yorkshire.".into()),
    ])
    .await;
    let body = chat
        .turn("alice", json!({"message": "Tell me about Leeds"}))
        .await;
    assert_eq!(body["reply"], "Leeds (E08000035) is in West Yorkshire.");
    assert_eq!(body["steps"], 1);
    let traces = body["traces"].as_array().unwrap();
    assert_eq!(traces.len(), 1);
    assert_eq!(traces[0]["name"], "lad_by_ref");
    assert_eq!(traces[0]["args"], json!({"ref": "Leeds"}));
    assert_eq!(traces[0]["is_error"], false);
    assert_eq!(traces[0]["output"]["rows"][0]["code"], "E08000035");
    assert!(traces[0]["duration_ms"].is_u64());
    // Usage sums both LLM calls (the scripted model reports 100 in, 20 out each).
    assert_eq!(
        body["usage"],
        json!({"input_tokens": 200, "output_tokens": 40, "total_tokens": 240})
    );

    // What the model was sent: the tools, the instructions, then the tool output.
    let requests = chat.llm.requests();
    assert_eq!(requests.len(), 2);
    let tools: Vec<&str> = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        tools.contains(&"search_feedback") && tools.contains(&"lad_by_ref"),
        "{tools:?}"
    );
    assert!(
        requests[0]["instructions"]
            .as_str()
            .unwrap()
            .contains("read-only")
    );
    assert_eq!(requests[0]["store"], false);
    let second = input_of(&requests[1]);
    let output = second
        .iter()
        .find(|i| i["type"] == "function_call_output")
        .expect("tool output sent back");
    let sent: Value = serde_json::from_str(output["output"].as_str().unwrap()).unwrap();
    assert_eq!(sent["rows"][0]["name"], "Leeds");
}

#[tokio::test]
async fn several_calls_in_one_response_all_get_outputs_in_order() {
    let chat = spawn_chat(vec![
        Step::Calls(vec![
            call("lad_by_ref", r#"{"ref":"Leeds"}"#),
            call("lad_by_ref", r#"{"ref":"Bristol"}"#),
            call("feedback_stats", r#"{"group_by":"sentiment"}"#),
        ]),
        Step::Text("Done.".into()),
    ])
    .await;
    let body = chat
        .turn("alice", json!({"message": "Compare Leeds and Bristol"}))
        .await;
    let traces = body["traces"].as_array().unwrap();
    let names: Vec<&str> = traces.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["lad_by_ref", "lad_by_ref", "feedback_stats"]);
    assert_eq!(traces[1]["output"]["rows"][0]["code"], "E06000023");
    let sent = input_of(&chat.llm.requests()[1]);
    let call_ids: Vec<&str> = sent
        .iter()
        .filter(|i| i["type"] == "function_call")
        .map(|i| i["call_id"].as_str().unwrap())
        .collect();
    let output_ids: Vec<&str> = sent
        .iter()
        .filter(|i| i["type"] == "function_call_output")
        .map(|i| i["call_id"].as_str().unwrap())
        .collect();
    assert_eq!(call_ids.len(), 3);
    assert_eq!(call_ids, output_ids, "every call has its output");
}

#[tokio::test]
async fn the_step_cap_ends_the_turn_with_a_clear_reply_and_the_traces_so_far() {
    let chat = spawn(Options {
        endless: Some(("lad_by_ref", r#"{"ref":"Leeds"}"#)),
        extra_env: vec![("MAX_TOOL_CALL_STEPS", "3".into())],
        ..Options::default()
    })
    .await;
    let body = chat.turn("alice", json!({"message": "loop forever"})).await;
    assert_eq!(body["steps"], 3);
    assert_eq!(body["traces"].as_array().unwrap().len(), 3);
    assert!(
        body["reply"]
            .as_str()
            .unwrap()
            .contains("stopped after 3 rounds"),
        "{body}"
    );
    assert_eq!(
        chat.llm.requests().len(),
        4,
        "three rounds, then the answer that would need a fourth"
    );
}

#[tokio::test]
async fn bad_arguments_become_tool_errors_the_model_sees() {
    let chat = spawn_chat(vec![
        Step::Calls(vec![
            call("lad_by_ref", r#"{"ref": "Leeds""#),
            call("search_feedback", r#"{"limit": 5}"#),
            call("get_feedback", r#"{"id": "seven"}"#),
            call("no_such_tool", r#"{}"#),
        ]),
        Step::Text("Sorry.".into()),
    ])
    .await;
    let body = chat.turn("alice", json!({"message": "break things"})).await;
    let traces = body["traces"].as_array().unwrap();
    assert!(traces.iter().all(|t| t["is_error"] == true), "{traces:?}");
    assert!(
        traces[0]["output"]
            .as_str()
            .unwrap()
            .contains("not valid JSON")
    );
    assert_eq!(
        traces[0]["args"], r#"{"ref": "Leeds""#,
        "invalid JSON is kept verbatim"
    );
    assert!(
        traces[1]["output"]
            .as_str()
            .unwrap()
            .contains("missing required parameter `query`")
    );
    assert!(traces[2]["output"].as_str().unwrap().contains("`id`"));
    assert!(
        traces[3]["output"]
            .as_str()
            .unwrap()
            .contains("unknown tool")
    );
    let sent = input_of(&chat.llm.requests()[1]);
    assert_eq!(
        sent.iter()
            .filter(|i| i["type"] == "function_call_output")
            .count(),
        4
    );
}

#[tokio::test]
async fn a_rate_limited_llm_is_retried_then_answers() {
    let chat = spawn_chat(vec![
        Step::Status {
            status: 429,
            retry_after: Some(0),
            body: r#"{"error":{"message":"slow down"}}"#.into(),
        },
        Step::Status {
            status: 503,
            retry_after: None,
            body: "{}".into(),
        },
        Step::Text("Hello.".into()),
    ])
    .await;
    let body = chat.turn("alice", json!({"message": "hi"})).await;
    assert_eq!(body["reply"], "Hello.");
    assert_eq!(chat.llm.requests().len(), 3);
}

#[tokio::test]
async fn an_llm_that_keeps_failing_gives_a_502_and_the_question_stays_on_record() {
    let chat = spawn(Options {
        steps: vec![
            Step::Status {
                status: 500,
                retry_after: None,
                body: "{}".into(),
            },
            Step::Status {
                status: 500,
                retry_after: None,
                body: "{}".into(),
            },
        ],
        extra_env: vec![("LLM_MAX_RETRIES", "1".into())],
        ..Options::default()
    })
    .await;
    let (status, body) = chat
        .post("alice", json!({"message": "are you there?"}))
        .await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["error"]["code"], "llm_unavailable");
    let (_, list) = chat.get(Some("alice"), "/api/conversations").await;
    let id = list["conversations"][0]["id"].as_str().unwrap().to_owned();
    let messages = chat.messages("alice", &id).await;
    assert_eq!(messages[0]["role"], "user");
    assert_eq!(messages[0]["content"], "are you there?");
    assert!(
        messages[1]["error"]
            .as_str()
            .unwrap()
            .starts_with("llm_unavailable:"),
        "{messages:?}"
    );
}

#[tokio::test]
async fn a_persistent_429_is_a_503_with_retry_after() {
    let chat = spawn(Options {
        steps: vec![
            Step::Status {
                status: 429,
                retry_after: Some(0),
                body: "{}".into(),
            },
            Step::Status {
                status: 429,
                retry_after: Some(7),
                body: "{}".into(),
            },
        ],
        extra_env: vec![("LLM_MAX_RETRIES", "1".into())],
        ..Options::default()
    })
    .await;
    let (status, body) = chat.post("alice", json!({"message": "hi"})).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "llm_rate_limited");
}

#[tokio::test]
async fn with_the_mcp_function_down_the_turn_still_completes_with_a_tool_error() {
    let chat = spawn(Options {
        mcp_down: true,
        steps: vec![
            Step::Calls(vec![call("lad_by_ref", r#"{"ref":"Leeds"}"#)]),
            Step::Text("I could not look that up.".into()),
        ],
        ..Options::default()
    })
    .await;
    let body = chat.turn("alice", json!({"message": "Leeds?"})).await;
    assert_eq!(body["reply"], "I could not look that up.");
    let trace = &body["traces"][0];
    assert_eq!(trace["is_error"], true);
    assert!(
        trace["output"].as_str().unwrap().contains("unavailable"),
        "{trace}"
    );
}

#[tokio::test]
async fn an_mcp_function_that_dies_mid_conversation_is_a_tool_error_not_a_failed_turn() {
    let chat = spawn_chat(vec![
        Step::Calls(vec![call("lad_by_ref", r#"{"ref":"Leeds"}"#)]),
        Step::Text("one".into()),
        Step::Calls(vec![call("lad_by_ref", r#"{"ref":"York"}"#)]),
        Step::Text("two".into()),
    ])
    .await;
    let first = chat.turn("alice", json!({"message": "Leeds?"})).await;
    assert_eq!(first["traces"][0]["is_error"], false);
    chat.mcp().stop();
    let second = chat
        .turn(
            "alice",
            json!({"message": "York?", "conversation_id": first["conversation_id"]}),
        )
        .await;
    assert_eq!(second["reply"], "two");
    assert_eq!(second["traces"][0]["is_error"], true);
    assert!(
        second["traces"][0]["output"]
            .as_str()
            .unwrap()
            .contains("unavailable"),
        "{second}"
    );
}

#[tokio::test]
async fn warm_turns_cost_one_mcp_request_per_tool_call() {
    let chat = spawn_chat(vec![
        Step::Calls(vec![call("lad_by_ref", r#"{"ref":"Leeds"}"#)]),
        Step::Text("one".into()),
        Step::Calls(vec![
            call("lad_by_ref", r#"{"ref":"York"}"#),
            call("lad_by_ref", r#"{"ref":"Hull"}"#),
        ]),
        Step::Text("two".into()),
    ])
    .await;
    let first = chat.turn("alice", json!({"message": "Leeds?"})).await;
    let after_cold = chat.mcp().requests();
    assert!(
        after_cold >= 2,
        "the cold turn connects, lists and calls: {after_cold}"
    );
    chat.turn(
        "alice",
        json!({"message": "York and Hull?", "conversation_id": first["conversation_id"]}),
    )
    .await;
    assert_eq!(
        chat.mcp().requests() - after_cold,
        2,
        "no handshake, no re-listing, one request per call"
    );
}

#[tokio::test]
async fn a_request_can_narrow_the_tools_offered() {
    let chat = spawn_chat(vec![Step::Text("ok".into())]).await;
    chat.turn(
        "alice",
        json!({"message": "hi", "tools": ["lad_by_ref", "get_feedback"]}),
    )
    .await;
    let offered: Vec<String> = chat.llm.requests()[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(offered, ["lad_by_ref", "get_feedback"]);
}

#[tokio::test]
async fn a_call_to_a_tool_the_request_left_out_is_refused() {
    let chat = spawn_chat(vec![
        Step::Calls(vec![call("search_feedback", r#"{"query":"noise"}"#)]),
        Step::Text("ok".into()),
    ])
    .await;
    let body = chat
        .turn("alice", json!({"message": "hi", "tools": ["lad_by_ref"]}))
        .await;
    let trace = &body["traces"][0];
    assert_eq!(trace["is_error"], true);
    assert!(
        trace["output"]
            .as_str()
            .unwrap()
            .contains("not available in this conversation turn"),
        "{trace}"
    );
}

/// The instructions of the first model request of a turn with a selected district.
async fn instructions_with_a_district() -> String {
    let chat = spawn_chat(vec![Step::Text("ok".into())]).await;
    chat.turn(
        "alice",
        json!({"message": "How is it doing?", "context": {"district": {"code": "E06000023", "label": "Bristol"}}}),
    )
    .await;
    chat.llm.requests()[0]["instructions"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn ui_context_and_server_guidance_reach_the_instructions_quoted() {
    let instructions = instructions_with_a_district().await;
    assert!(instructions.contains("not authoritative"));
    assert!(
        instructions.contains(r#"{"district":{"code":"E06000023","label":"Bristol"}}"#),
        "{instructions}"
    );
    // The mcp function's handshake instructions, as its own words.
    assert!(
        instructions.contains("Guidance from the tool servers, in their own words")
            && instructions.contains("- `parley`: \""),
        "{instructions}"
    );
    assert!(instructions.contains("The tools are read-only"));
}

#[tokio::test]
async fn a_context_key_a_tool_resolves_asks_for_that_call_first() {
    let instructions = instructions_with_a_district().await;
    assert!(
        instructions.contains(r#"The user's screen refers to district "Bristol" ("E06000023")."#),
        "{instructions}"
    );
    assert!(
        instructions.contains(r#"call `lad_by_ref` with ref "E06000023""#),
        "{instructions}"
    );
}

#[tokio::test]
async fn chat_completions_dialect_runs_the_same_loop() {
    let chat = spawn(Options {
        api: "chat-completions",
        steps: vec![
            Step::Calls(vec![
                call("lad_by_ref", r#"{"ref":"Cardiff"}"#),
                call("lad_by_ref", r#"{"ref":"Leeds"}"#),
            ]),
            Step::Text("Cardiff is Welsh.".into()),
        ],
        ..Options::default()
    })
    .await;
    let body = chat.turn("alice", json!({"message": "Cardiff?"})).await;
    assert_eq!(body["reply"], "Cardiff is Welsh.");
    assert_eq!(body["traces"][0]["output"]["rows"][0]["code"], "W06000015");
    let requests = chat.llm.requests();
    assert!(chat.llm.paths()[0].ends_with("/chat/completions"));
    let messages = requests[1]["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "system");
    let assistant = messages.iter().find(|m| m["role"] == "assistant").unwrap();
    assert_eq!(assistant["tool_calls"].as_array().unwrap().len(), 2);
    assert_eq!(messages.iter().filter(|m| m["role"] == "tool").count(), 2);
    assert_eq!(body["usage"]["total_tokens"], 240);
}

#[tokio::test]
async fn sampling_settings_reach_the_model_in_both_dialects_only_when_set() {
    let sampling = || {
        vec![
            ("LLM_TEMPERATURE", "0.3".to_owned()),
            ("LLM_TOP_P", "0.8".to_owned()),
            ("LLM_MAX_OUTPUT_TOKENS", "256".to_owned()),
        ]
    };
    for (api, cap) in [
        ("responses", "max_output_tokens"),
        ("chat-completions", "max_tokens"),
    ] {
        for extra_env in [sampling(), Vec::new()] {
            let set = !extra_env.is_empty();
            let chat = spawn(Options {
                api,
                steps: vec![
                    Step::Calls(vec![call("lad_by_ref", r#"{"ref":"Leeds"}"#)]),
                    Step::Text("Leeds.".into()),
                ],
                extra_env,
                ..Options::default()
            })
            .await;
            let body = chat.turn("alice", json!({"message": "Leeds?"})).await;
            assert_eq!(body["reply"], "Leeds.", "{api}: {body}");
            let requests = chat.llm.requests();
            assert_eq!(requests.len(), 2, "{api}");
            for request in &requests {
                let sent = |key: &str| request.get(key).cloned();
                if set {
                    assert_eq!(sent("temperature"), Some(json!(0.3)), "{api}");
                    assert_eq!(sent("top_p"), Some(json!(0.8)), "{api}");
                    assert_eq!(sent(cap), Some(json!(256)), "{api}");
                } else {
                    for key in ["temperature", "top_p", cap] {
                        assert_eq!(sent(key), None, "{api}: {key} sent though unset");
                    }
                }
            }
        }
    }
}

#[tokio::test]
async fn a_model_that_hangs_is_cut_short_at_the_deadline_and_the_partial_reply_is_stored() {
    let chat = spawn(Options {
        steps: vec![
            Step::TextAndCalls(
                "Let me look Leeds up.".into(),
                vec![call("lad_by_ref", r#"{"ref":"Leeds"}"#)],
            ),
            Step::delayed(
                std::time::Duration::from_secs(120),
                Step::Text("too late".into()),
            ),
        ],
        // Without the deadline the hang would end as LLM_TIMEOUT_MS's 503.
        extra_env: vec![
            ("TURN_DEADLINE_MS", "4000".into()),
            ("LLM_TIMEOUT_MS", "10000".into()),
            ("LLM_MAX_RETRIES", "0".into()),
        ],
        ..Options::default()
    })
    .await;
    let body = chat
        .turn("alice", json!({"message": "Tell me about Leeds"}))
        .await;
    assert_eq!(body["cut_short"], true, "{body}");
    let reply = body["reply"].as_str().unwrap();
    assert!(reply.contains("ran out of time"), "{reply}");
    assert!(reply.contains("Let me look Leeds up."), "{reply}");
    assert_eq!(body["traces"][0]["output"]["rows"][0]["code"], "E08000035");

    let id = body["conversation_id"].as_str().unwrap();
    let messages = chat.messages("alice", id).await;
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert_eq!(messages[0]["content"], "Tell me about Leeds");
    assert_eq!(messages[1]["content"], reply);
    assert_eq!(messages[1]["cut_short"], true);
    assert_eq!(messages[1]["traces"][0]["name"], "lad_by_ref");
    assert!(messages[1].get("error").is_none(), "{messages:?}");
}

#[tokio::test]
async fn a_complete_turn_is_not_marked_cut_short() {
    let chat = spawn_chat(vec![Step::Text("Hello.".into())]).await;
    let body = chat.turn("alice", json!({"message": "hi"})).await;
    assert_eq!(body["cut_short"], false);
    let messages = chat
        .messages("alice", body["conversation_id"].as_str().unwrap())
        .await;
    assert!(messages[1].get("cut_short").is_none(), "{messages:?}");
}

#[tokio::test]
async fn a_model_response_over_the_byte_cap_is_a_502_naming_the_cause() {
    let chat = spawn(Options {
        steps: vec![Step::Text("x".repeat(8 * 1024))],
        extra_env: vec![("LLM_MAX_RESPONSE_BYTES", "4096".into())],
        ..Options::default()
    })
    .await;
    let (status, body) = chat.post("alice", json!({"message": "hi"})).await;
    assert_eq!(status, 502, "{}", body["error"]);
    assert_eq!(body["error"]["code"], "llm_response_too_large");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("LLM_MAX_RESPONSE_BYTES"),
        "{body}"
    );
    assert_eq!(chat.llm.requests().len(), 1, "not retried");
}

#[tokio::test]
async fn a_rejected_key_is_not_retried_and_the_error_names_llm_api_key() {
    let chat = spawn(Options {
        steps: vec![
            Step::error(401, "Incorrect API key provided: sk-test-not-a-real-key."),
            Step::Text("unreachable".into()),
        ],
        extra_env: vec![("LLM_MAX_RETRIES", "3".into())],
        ..Options::default()
    })
    .await;
    let (status, body) = chat.post("alice", json!({"message": "hi"})).await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["error"]["code"], "llm_key_rejected");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("LLM_API_KEY") && !message.contains("retry"),
        "{message}"
    );
    assert_eq!(chat.llm.requests().len(), 1, "a 401 is not retried");
}

#[tokio::test]
async fn without_a_key_a_401_says_llm_api_key_is_not_set() {
    let chat = spawn(Options {
        steps: vec![Step::error(401, "You didn't provide an API key.")],
        extra_env: vec![("LLM_API_KEY", String::new())],
        ..Options::default()
    })
    .await;
    let (status, body) = chat.post("alice", json!({"message": "hi"})).await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["error"]["code"], "llm_key_missing");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("LLM_API_KEY is not set"),
        "{body}"
    );
    assert_eq!(chat.llm.authorizations(), vec![None]);
}

#[tokio::test]
async fn calls_past_the_per_step_cap_are_not_run_and_the_model_is_told() {
    let chat = spawn(Options {
        steps: vec![
            Step::Calls(vec![
                call("lad_by_ref", r#"{"ref":"Leeds"}"#),
                call("lad_by_ref", r#"{"ref":"Bristol"}"#),
                call("lad_by_ref", r#"{"ref":"York"}"#),
            ]),
            Step::Text("Two of three.".into()),
        ],
        extra_env: vec![("MAX_TOOL_CALLS_PER_STEP", "2".into())],
        ..Options::default()
    })
    .await;
    let body = chat.turn("alice", json!({"message": "Three places"})).await;
    let traces = body["traces"].as_array().unwrap();
    assert_eq!(traces.len(), 3, "every call has an output");
    assert_eq!(traces[0]["is_error"], false);
    assert_eq!(traces[1]["is_error"], false);
    assert_eq!(traces[2]["is_error"], true);
    let output = traces[2]["output"].as_str().unwrap();
    assert!(
        output.contains("not run") && output.contains("at most 2"),
        "{output}"
    );
    let sent = input_of(&chat.llm.requests()[1]);
    let outputs: Vec<&str> = sent
        .iter()
        .filter(|i| i["type"] == "function_call_output")
        .map(|i| i["output"].as_str().unwrap())
        .collect();
    assert_eq!(outputs.len(), 3);
    assert!(outputs[2].contains("not run"), "{outputs:?}");
}

#[tokio::test]
async fn the_same_call_id_in_two_steps_is_two_calls_and_both_writes_happen() {
    // Servers that number calls per response send `call_0` in every step: the second write is
    // a new call, not a replay of the first.
    let db = TestDb::with_demo_data(FEEDBACK_ROWS).await;
    let llm = ScriptedLlm::numbering_calls_per_response(vec![
        Step::call(
            "create_task",
            r#"{"title":"Call the plumber about call_0"}"#,
        ),
        Step::call("create_task", r#"{"title":"Call the roofer about call_0"}"#),
        Step::text("Added both."),
    ])
    .await;
    let tools = parley_testkit::domains::all_tools();
    let chat = spawn_chat_with_mcp_and_llm(&db, &[("TOOLS_FILE", &tools)], llm).await;
    let body = chat
        .turn("alice", json!({"message": "Add two tasks"}))
        .await;
    let traces = body["traces"].as_array().unwrap();
    assert_eq!(traces.len(), 2, "{body}");
    for trace in traces {
        assert_eq!(trace["call_id"], "call_0", "{body}");
        assert_eq!(trace["is_error"], false, "{body}");
    }
    assert_eq!(
        traces[1]["output"]["rows"][0]["title"], "Call the roofer about call_0",
        "{body}"
    );
    let titles: Vec<String> = db
        .client()
        .await
        .query(
            "SELECT title FROM tasks WHERE title LIKE '%about call_0' ORDER BY title",
            &[],
        )
        .await
        .expect("tasks")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        titles,
        [
            "Call the plumber about call_0",
            "Call the roofer about call_0"
        ]
    );
    // The keys the mcp function saw differ, and each names its step.
    let keys: Vec<String> = chat
        .mcp
        .as_ref()
        .unwrap()
        .posts("tools/call")
        .iter()
        .map(|p| {
            p.meta["parley/idempotency_key"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(keys.len(), 2);
    assert_ne!(keys[0], keys[1]);
}

#[tokio::test]
async fn without_a_key_for_openai_a_turn_answers_llm_key_missing_at_once_and_stores_nothing() {
    let chat = spawn(Options {
        extra_env: vec![
            ("LLM_API_KEY", String::new()),
            // OpenAI's own, the default: nothing must be sent there.
            ("LLM_BASE_URL", String::new()),
            ("LLM_MAX_RETRIES", "0".into()),
            ("LLM_TIMEOUT_MS", "2000".into()),
        ],
        ..Options::default()
    })
    .await;
    let (status, body) = chat
        .post("alice", json!({"message": "What is in my data?"}))
        .await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["error"]["code"], "llm_key_missing", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    for named in ["LLM_API_KEY", "LLM_BASE_URL", "OpenAI-compatible server"] {
        assert!(message.contains(named), "{named} in {message}");
    }
    assert!(!message.contains("retry"), "{message}");
    let (_, listed) = chat.get(Some("alice"), "/api/conversations").await;
    assert_eq!(listed["conversations"], json!([]), "no conversation for it");

    // The page says so when it loads, before anyone types.
    let (_, page) = chat.get(None, "/api/page").await;
    assert_eq!(page["model_problem"], message, "{page}");
    let (_, configured) = spawn_chat(Vec::new()).await.get(None, "/api/page").await;
    assert_eq!(configured["model_problem"], Value::Null);
}

#[tokio::test]
async fn a_tool_server_that_refuses_the_chats_token_is_named_as_refusing_not_unreachable() {
    let chat = spawn(Options {
        steps: vec![
            Step::Calls(vec![call("lad_by_ref", r#"{"ref":"Leeds"}"#)]),
            Step::Text("I could not look that up.".into()),
        ],
        extra_env: vec![("MCP_AUTH_TOKEN", "not-the-mcp-functions-token".into())],
        ..Options::default()
    })
    .await;
    let body = chat.turn("alice", json!({"message": "Leeds?"})).await;
    let trace = &body["traces"][0];
    assert_eq!(trace["is_error"], true, "{body}");
    let output = trace["output"].as_str().unwrap();
    assert!(
        output.contains("refused the chat's credentials") && output.contains("MCP_AUTH_TOKEN"),
        "{output}"
    );
    assert!(!output.contains("cannot be reached"), "{output}");
    assert!(
        !output.contains("not-the-mcp"),
        "the token stays out: {output}"
    );
}
