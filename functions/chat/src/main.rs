//! `chat`: the chat function. Under Lambda it is the handler; elsewhere it serves plain HTTP on
//! `LISTEN_ADDR` (default 127.0.0.1:3000). Logging first, then [`Application::build`]; all
//! logic lives in the library.

use parley_chat::Application;
use parley_core::config::Env;

// One thread: Lambda hands an instance one event at a time, and a turn's tasks (HTTP, Postgres
// connection, MCP client) then wake each other without crossing threads. Measured with
// `scripts/bench chat`: 1.54 -> 1.29 ms of CPU per turn, and more turns per second at c=4.
#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let env = Env::from_process();
    if let Err(e) = parley_core::telemetry::init_with_traces(&env, parley_chat::TRACES) {
        return parley_core::serve::exit("chat", Err(e));
    }
    let outcome = async {
        Application::build(env).await?.run_until_stopped().await?;
        Ok::<(), parley_chat::StartupError>(())
    }
    .await;
    parley_core::serve::exit("chat", outcome)
}
