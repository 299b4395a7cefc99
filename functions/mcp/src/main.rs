//! `mcp`: the MCP function. Under Lambda it is the handler; elsewhere it serves plain HTTP on
//! `LISTEN_ADDR` (default 127.0.0.1:3001). Logging first, then [`Application::build`]; all
//! logic lives in the library.

use parley_core::config::Env;
use parley_mcp::Application;

// One thread: Lambda hands an instance one event at a time, and a request's tasks (HTTP,
// Postgres connection) then wake each other without crossing threads. Measured with
// `scripts/bench mcp --only peers` (wrk 2x8, pool 4, 100k rows, host load ~5), alternating
// builds: 2089 and 1826 requests/s against 2006 and 1772 multi-threaded, p99 10.0 and 12.3 ms
// against 10.9 and 14.6 ms: a small gain, within this host's noise, never a loss.
#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let env = Env::from_process();
    if let Err(e) = parley_core::telemetry::init_with_traces(&env, parley_mcp::TRACES) {
        return parley_core::serve::exit("mcp", Err(e));
    }
    let outcome = async {
        Application::build(env).await?.run_until_stopped().await?;
        Ok::<(), parley_mcp::StartupError>(())
    }
    .await;
    parley_core::serve::exit("mcp", outcome)
}
