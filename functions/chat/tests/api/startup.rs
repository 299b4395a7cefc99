//! The `chat` binary as an operator starts it: a bad setting is printed once, naming the
//! variable, and exits with 2 (the same rule as the mcp function's).

use std::process::Command;

#[test]
fn a_bad_setting_exits_2_with_one_line_naming_it() {
    let out = Command::new(env!("CARGO_BIN_EXE_chat"))
        .env_clear()
        .env("DATABASE_URL", "postgres://u@127.0.0.1:9/none")
        .env("MCP_URL", "http://127.0.0.1:9/mcp")
        .env("LISTEN_ADDR", "127.0.0.1:0")
        .env("CHAT_AUTH", "sometimes")
        .output()
        .expect("chat runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr, "chat: invalid setting CHAT_AUTH: must be jwt or none\n",
        "printed once"
    );
}

#[test]
fn user_tokens_without_the_mcp_token_stop_start_up_naming_both_settings() {
    // The mcp function given the same JWT_SECRET requires a token; the chat would list no
    // tools and every turn would run without them.
    let mut child = Command::new(env!("CARGO_BIN_EXE_chat"))
        .env_clear()
        .env("DATABASE_URL", "postgres://u@127.0.0.1:9/none")
        .env("MCP_URL", "http://127.0.0.1:9/mcp")
        .env("LISTEN_ADDR", "127.0.0.1:0")
        .env("JWT_SECRET", "test-secret-0123456789abcdef0123456789abcdef")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("chat runs");
    // A chat that accepts the settings serves until stopped: 20 s is far past a refusal.
    let started = std::time::Instant::now();
    while child.try_wait().expect("waiting").is_none() {
        if started.elapsed() > std::time::Duration::from_secs(20) {
            child.kill().expect("stopping the chat");
            panic!("the chat started with JWT_SECRET and no MCP_AUTH_TOKEN");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("chat's output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("chat: invalid setting MCP_AUTH_TOKEN: must be set when JWT_SECRET is"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}
