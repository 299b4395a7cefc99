//! `chat`: the chat function. Under Lambda it is the handler; elsewhere it serves plain HTTP on
//! `LISTEN_ADDR` (default 127.0.0.1:3000). Start-up (logging, secrets, serving) is
//! `parley_core::serve::main`; all logic lives in the library.

use parley_chat::config::ChatConfig;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    parley_core::serve::main("chat", "127.0.0.1:3000", |env, secrets| async move {
        let config = ChatConfig::from_env(&env).map_err(|e| e.to_string())?;
        parley_chat::build_with_secrets(&config, secrets).map_err(|e| e.to_string())
    })
    .await
}
