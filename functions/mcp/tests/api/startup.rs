//! The `mcp` binary as an operator starts it: a failed start-up prints one line naming the
//! problem, and the exit code tells a bad setting (2) from a failure at run time (1).

use std::process::{Command, Output};

/// Runs the binary with exactly `env` (plus a database nobody listens on).
fn mcp(env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mcp"))
        .env_clear()
        .env("DATABASE_URL", "postgres://u@127.0.0.1:9/none")
        .env("LISTEN_ADDR", "127.0.0.1:0")
        .env("LOG_FORMAT", "text")
        .env(
            "TOOLS_FILE",
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../domains/feedback/tools.toml"
            ),
        )
        .envs(env.iter().copied())
        .output()
        .expect("mcp runs")
}

#[test]
fn every_bad_setting_exits_2_with_one_line_naming_it() {
    for (var, value) in [
        ("LOG_FORMAT", "yaml"),
        ("TOOL_MAX_ROWS", "0"),
        ("MCP_ALLOWED_HOSTS", ""),
        ("DB_POOL_MAX_SIZE", "lots"),
    ] {
        let out = mcp(&[(var, value)]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{var}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{var}: printed once: {stderr}");
        assert!(
            stderr.starts_with(&format!("mcp: invalid setting {var}: ")),
            "{var}: {stderr}"
        );
    }
}

#[test]
fn without_tools_file_start_up_says_what_to_put_there() {
    let out = mcp(&[("TOOLS_FILE", "")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("mcp: invalid setting TOOLS_FILE: is required: the tools file(s)"),
        "{stderr}"
    );
}

#[test]
fn a_failure_at_run_time_exits_1_and_is_printed_once() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let out = mcp(&[("LISTEN_ADDR", &addr)]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr.matches("cannot listen on").count(),
        1,
        "printed once: {stderr}"
    );
    assert!(
        !stderr.contains('\u{1b}'),
        "no colour codes off a terminal: {stderr:?}"
    );
    assert!(
        stderr.ends_with(&format!(
            "mcp: cannot listen on {addr}: Address already in use (os error 98)\n"
        )),
        "{stderr}"
    );
}

#[test]
fn an_approval_that_is_not_always_or_never_stops_start_up_naming_file_tool_and_value() {
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(
        file.path(),
        "[[tool]]\nname = \"send_invoice\"\ndescription = \"Sends an invoice.\"\n\
         sql = \"SELECT 1 AS sent\"\napproval = \"sometimes\"\n",
    )
    .expect("write tools file");
    let path = file.path().display().to_string();
    let out = mcp(&[("TOOLS_FILE", &path)]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "printed once: {stderr}");
    assert!(
        stderr.contains(&format!(
            "tools file {path}: tool `send_invoice`: approval = \"sometimes\" is not \"always\""
        )),
        "{stderr}"
    );
}
