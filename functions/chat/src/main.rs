//! `chat`: the chat function. Under Lambda it is the handler; elsewhere it serves plain HTTP on
//! `LISTEN_ADDR` (default 127.0.0.1:3000). All logic lives in the library.

use parley_chat::config::ChatConfig;
use parley_core::config::Env;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let env = Env::from_process();
    if let Err(e) = parley_core::telemetry::init(&env) {
        eprintln!("chat: {e}");
        return std::process::ExitCode::from(2);
    }
    let result = async {
        let config = ChatConfig::from_env(&env).map_err(|e| e.to_string())?;
        let router = parley_chat::build(&config).map_err(|e| e.to_string())?;
        parley_core::serve::run(router, &env, "127.0.0.1:3000")
            .await
            .map_err(|e| e.to_string())
    }
    .await;
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("chat: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
