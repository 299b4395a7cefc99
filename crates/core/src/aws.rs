//! The AWS SDK configuration every Parley client shares (Secrets Manager, S3, SQS): the default
//! chain (credentials, region, `AWS_ENDPOINT_URL`), except that what the given [`Env`] holds is
//! used as given, so a test points one client at a local moto server without touching the
//! process environment.

use aws_config::BehaviorVersion;

use crate::config::Env;

pub use aws_config::SdkConfig;

/// The configuration for one service: `endpoint_setting` (e.g. `AWS_ENDPOINT_URL_S3`) names the
/// service's own endpoint override, which wins over `AWS_ENDPOINT_URL`.
pub async fn sdk_config(env: &Env, endpoint_setting: &str) -> SdkConfig {
    let mut loader = aws_config::defaults(BehaviorVersion::latest());
    if let Some(region) = env.get("AWS_REGION").or(env.get("AWS_DEFAULT_REGION")) {
        loader = loader.region(aws_config::Region::new(region.to_owned()));
    }
    if let Some(url) = env.get(endpoint_setting).or(env.get("AWS_ENDPOINT_URL")) {
        loader = loader.endpoint_url(url);
    }
    if let (Some(id), Some(key)) = (
        env.get("AWS_ACCESS_KEY_ID"),
        env.get("AWS_SECRET_ACCESS_KEY"),
    ) {
        loader = loader.credentials_provider(aws_sdk_secretsmanager::config::Credentials::new(
            id,
            key,
            env.get("AWS_SESSION_TOKEN").map(str::to_owned),
            None,
            "environment",
        ));
    }
    loader.load().await
}
