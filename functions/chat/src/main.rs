//! `chat`: the chat function. Under Lambda it is the handler; elsewhere it serves plain HTTP on
//! `LISTEN_ADDR` (default 127.0.0.1:3000). Start-up (logging, secrets, serving) is
//! `parley_core::serve::main`; all logic lives in the library.

use parley_chat::config::ChatConfig;

// One thread: Lambda hands an instance one event at a time, and a turn's tasks (HTTP, Postgres
// connection, MCP client) then wake each other without crossing threads. Measured with
// `scripts/bench chat`: 1.54 -> 1.29 ms of CPU per turn, and more turns per second at c=4.
#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    parley_core::serve::main("chat", "127.0.0.1:3000", |env, secrets| async move {
        let config = ChatConfig::from_env(&env).map_err(|e| e.to_string())?;
        parley_chat::build_with_secrets(&config, secrets).map_err(|e| e.to_string())
    })
    .await
}
