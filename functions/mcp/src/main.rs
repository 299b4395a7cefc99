//! `mcp`: the MCP function. Under Lambda it is the handler; elsewhere it serves plain HTTP on
//! `LISTEN_ADDR` (default 127.0.0.1:3001). All logic lives in the library.

use parley_core::config::Env;
use parley_mcp::config::McpConfig;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let env = Env::from_process();
    if let Err(e) = parley_core::telemetry::init(&env) {
        eprintln!("mcp: {e}");
        return std::process::ExitCode::from(2);
    }
    let result = async {
        let config = McpConfig::from_env(&env).map_err(|e| e.to_string())?;
        let router = parley_mcp::build(&config)
            .await
            .map_err(|e| e.to_string())?;
        parley_core::serve::run(router, &env, "127.0.0.1:3001")
            .await
            .map_err(|e| e.to_string())
    }
    .await;
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("mcp: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
