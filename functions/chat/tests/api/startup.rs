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
