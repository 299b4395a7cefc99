//! Clients nobody here wrote, run as child processes against the chat under test: Node 22 with
//! the AI SDK, and Python with the official `openai` package. Both are installed by
//! `tests/interop/run --deps-only`, which `scripts/test` runs before the Rust tests.

use serde_json::Value;

const INTEROP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/interop");
const VENV_PYTHON: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../.parley/venv-interop/bin/python"
);

/// Runs `tests/interop/<script>` under Node 22 and parses what it prints as JSON.
pub async fn node(script: &str, args: &[&str]) -> Value {
    let node = format!("{INTEROP}/node_modules/node/bin/node");
    run(&node, &format!("{INTEROP}/{script}"), args).await
}

/// Runs `tests/interop/<script>` under the interop venv's Python and parses its JSON output.
pub async fn python(script: &str, args: &[&str]) -> Value {
    run(VENV_PYTHON, &format!("{INTEROP}/{script}"), args).await
}

async fn run(program: &str, script: &str, args: &[&str]) -> Value {
    assert!(
        std::path::Path::new(program).exists(),
        "{program} is missing: install the test clients with `tests/interop/run --deps-only` \
         (scripts/test does)"
    );
    let output = tokio::process::Command::new(program)
        .arg(script)
        .args(args)
        .kill_on_drop(true)
        .output()
        .await
        .expect("the client runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{script} failed ({}):\n{}\n{stdout}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("{script} printed no JSON ({e}):\n{stdout}"))
}
