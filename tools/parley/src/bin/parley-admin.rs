//! `parley-admin`: the Lambda function that runs `parley` for a deployment, as a CloudFormation
//! custom resource (migrations, demo data, login roles on each deploy) or with `aws lambda
//! invoke`. Logging and the shared state first; all logic lives in `parley_cli::admin`.

use std::time::SystemTime;

use lambda_runtime::{Error, LambdaEvent, service_fn};
use parley_cli::admin::{Admin, time_left};
use parley_core::config::Env;
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let env = Env::from_process();
    // A bad LOG_FORMAT or RUST_LOG must not stop the function: an init error leaves a custom
    // resource unanswered, and CloudFormation waits an hour. Default logging, saying why.
    if let Err(e) = parley_core::telemetry::init(&env) {
        parley_core::telemetry::init(&Env::default())?;
        tracing::warn!(error = %e, "logging with the defaults");
    }
    let admin = Admin::new(env)?;
    lambda_runtime::run(service_fn(|event: LambdaEvent<Value>| {
        let admin = admin.clone();
        async move {
            let time_left = time_left(event.context.deadline, SystemTime::now());
            Ok::<Value, Error>(admin.handle(event.payload, time_left).await?)
        }
    }))
    .await
}
