//! `parley-llm-stub`, the scripted LLM the Python and shell runners start: it serves a script
//! file on the port it prints, answers each turn by the script and logs each request.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use parley_testkit::raw_http::RawConnection;
use serde_json::{Value, json};

/// The stub, killed when dropped.
struct Stub(Child);

impl Drop for Stub {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(args: &[&str]) -> (Stub, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_parley-llm-stub"))
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting parley-llm-stub");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("its first line");
    (Stub(child), line.trim().to_owned())
}

async fn post(base_url: &str, body: &Value) -> Value {
    let origin = base_url.trim_end_matches("/v1");
    let mut conn = RawConnection::open(origin).await;
    let body = body.to_string();
    let request = format!(
        "POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.send(request.as_bytes()).await.expect("send");
    let head = conn.read_head().await.expect("an answer");
    assert_eq!(head.status, 200);
    serde_json::from_slice(&conn.read_body(&head).await).expect("a JSON body")
}

#[tokio::test]
async fn the_stub_serves_its_script_per_turn_on_the_url_it_prints_and_logs_each_request() {
    let dir = std::env::temp_dir().join(format!("parley-llm-stub-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("script.json");
    std::fs::write(
        &script,
        json!({"steps": [
            {"calls": [{"name": "look", "arguments": {"q": "Leeds"}}]},
            {"text": "Leeds it is."}
        ], "usage": {"input_tokens": 7, "output_tokens": 3}})
        .to_string(),
    )
    .unwrap();
    let (log, url_file) = (dir.join("requests.jsonl"), dir.join("url"));
    let (_stub, url) = start(&[
        "--script",
        script.to_str().unwrap(),
        "--requests",
        log.to_str().unwrap(),
        "--url-file",
        url_file.to_str().unwrap(),
    ]);
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/v1"),
        "{url}"
    );
    assert_eq!(std::fs::read_to_string(&url_file).unwrap().trim(), url);

    let tools = json!([{"type": "function", "name": "look"}]);
    let user = json!({"role": "user", "content": "Where?"});
    let first = post(
        &url,
        &json!({"model": "m", "tools": tools, "input": [user]}),
    )
    .await;
    assert_eq!(first["output"][0]["name"], "look");
    assert_eq!(first["output"][0]["arguments"], r#"{"q":"Leeds"}"#);
    let output = json!({"type": "function_call_output", "call_id": "call_1", "output": "[]"});
    let second = json!({"model": "m", "tools": tools, "input": [user, first["output"][0], output]});
    let second = post(&url, &second).await;
    assert_eq!(second["output"][0]["content"][0]["text"], "Leeds it is.");
    assert_eq!(second["usage"]["total_tokens"], 10);

    let logged: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(logged.len(), 2);
    assert_eq!(logged[1]["input"][2]["type"], "function_call_output");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_script_with_a_misspelt_key_stops_the_stub_naming_the_file_and_the_key() {
    let script =
        std::env::temp_dir().join(format!("parley-llm-stub-{}.json", uuid::Uuid::new_v4()));
    std::fs::write(&script, r#"{"steps": [{"txt": "hi"}]}"#).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_parley-llm-stub"))
        .args(["--script", script.to_str().unwrap()])
        .output()
        .expect("running parley-llm-stub");
    let _ = std::fs::remove_file(&script);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("steps[0]: unknown key `txt`"), "{stderr}");
    assert!(out.stdout.is_empty(), "no URL printed: {:?}", out.stdout);
}
