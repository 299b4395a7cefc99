//! `mcp`: the MCP function. Under Lambda it is the handler; elsewhere it serves plain HTTP on
//! `LISTEN_ADDR` (default 127.0.0.1:3001). Start-up (logging, secrets, serving) is
//! `parley_core::serve::main`; all logic lives in the library.

use parley_mcp::config::McpConfig;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    parley_core::serve::main("mcp", "127.0.0.1:3001", |env, secrets| async move {
        let config = McpConfig::from_env(&env).map_err(|e| e.to_string())?;
        parley_mcp::build_with_secrets(&config, secrets)
            .await
            .map_err(|e| e.to_string())
    })
    .await
}
