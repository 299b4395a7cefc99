//! `mcp`: the MCP function. Under Lambda it is the handler; elsewhere it serves plain HTTP on
//! `LISTEN_ADDR` (default 127.0.0.1:3001). Logging first, then [`Application::build`]; all
//! logic lives in the library.

use parley_core::config::Env;
use parley_mcp::Application;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let env = Env::from_process();
    if let Err(e) = parley_core::telemetry::init(&env) {
        return parley_core::serve::exit("mcp", Err(e));
    }
    let outcome = async {
        Application::build(env).await?.run_until_stopped().await?;
        Ok::<(), parley_mcp::StartupError>(())
    }
    .await;
    parley_core::serve::exit("mcp", outcome)
}
