//! `ingest`: the Lambda function behind the documents bucket's S3 events. Logging and the
//! shared state first; all logic lives in the library (`parley_ingest_function`).

use std::time::SystemTime;

use lambda_runtime::{Error, LambdaEvent, service_fn};
use parley_core::config::Env;
use parley_ingest_function::Ingest;
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let env = Env::from_process();
    parley_core::telemetry::init(&env)?;
    let ingest = Ingest::start(env).await?;
    lambda_runtime::run(service_fn(|event: LambdaEvent<Value>| {
        let ingest = &ingest;
        async move {
            let time_left =
                parley_core::serve::time_left(event.context.deadline, SystemTime::now());
            Ok::<Value, Error>(ingest.handle(event.payload, time_left).await?)
        }
    }))
    .await
}
