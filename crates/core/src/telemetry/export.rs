//! The exporter's HTTP client: the workspace's reqwest client (rustls, its connection pool)
//! behind `opentelemetry_http::HttpClient`, so no second HTTP or TLS stack is built for
//! traces. It runs in the request's task ([`super::traces::flush`]), on the function's own
//! runtime. For CloudWatch's OTLP endpoint (`OTEL_TRACES=cloudwatch`) each request is signed
//! with SigV4 for the `xray` service with the function's role credentials ([`Signer`]), read
//! through the SDK's default chain once and kept (the chain refreshes what expires).

use std::time::Duration;

use bytes::Bytes;
use opentelemetry_http::{HttpClient, HttpError};

use crate::config::Env;

/// The largest answer read from a collector: an OTLP answer is a few bytes of
/// `ExportTraceServiceResponse`, a partial-success message at most.
const MAX_RESPONSE_BYTES: usize = 64 * 1024;

#[derive(Debug, Clone)]
pub(super) struct Client {
    http: reqwest::Client,
    timeout: Duration,
    signer: Option<std::sync::Arc<Signer>>,
}

impl Client {
    pub(super) fn new(http: reqwest::Client, timeout: Duration, signer: Option<Signer>) -> Self {
        Self {
            http,
            timeout,
            signer: signer.map(std::sync::Arc::new),
        }
    }
}

/// The service name CloudWatch's OTLP traces endpoint is signed for.
pub(super) const SIGNING_SERVICE: &str = "xray";

/// Signs each export with SigV4 for [`SIGNING_SERVICE`] in `region`.
pub(super) struct Signer {
    env: Env,
    region: String,
    sdk: tokio::sync::OnceCell<crate::aws::SdkConfig>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("region", &self.region)
            .finish()
    }
}

impl Signer {
    pub(super) fn new(env: Env, region: String) -> Self {
        Self {
            env,
            region,
            sdk: tokio::sync::OnceCell::new(),
        }
    }

    /// `request` with its `x-amz-date`, `x-amz-security-token` (temporary credentials) and
    /// `authorization` headers, signed over its method, URL, headers and body.
    async fn sign(&self, request: &mut axum::http::Request<Bytes>) -> Result<(), ExportError> {
        use aws_credential_types::provider::ProvideCredentials;
        use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
        let sdk = self
            .sdk
            .get_or_init(|| crate::aws::sdk_config(&self.env, "AWS_ENDPOINT_URL_XRAY"))
            .await;
        let provider = sdk
            .credentials_provider()
            .ok_or_else(|| ExportError::Credentials("no credentials provider".into()))?;
        let credentials = provider
            .provide_credentials()
            .await
            .map_err(|e| ExportError::Credentials(e.to_string()))?;
        let identity = credentials.into();
        let params = aws_sigv4::sign::v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name(SIGNING_SERVICE)
            .time(std::time::SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| ExportError::Signing(e.to_string()))?
            .into();
        let uri = request.uri().to_string();
        let headers: Vec<(&str, &str)> = request
            .headers()
            .iter()
            .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)))
            .collect();
        let signable = SignableRequest::new(
            request.method().as_str(),
            &uri,
            headers.into_iter(),
            SignableBody::Bytes(request.body()),
        )
        .map_err(|e| ExportError::Signing(e.to_string()))?;
        let (instructions, _) = sign(signable, &params)
            .map_err(|e| ExportError::Signing(e.to_string()))?
            .into_parts();
        instructions.apply_to_request_http1x(request);
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
enum ExportError {
    #[error("the collector could not be reached: {0}")]
    Transport(String),
    #[error("the collector's answer is larger than {MAX_RESPONSE_BYTES} bytes")]
    TooLarge,
    /// The credentials could not be read: the chain's message names no secret.
    #[error("no AWS credentials to sign the export with: {0}")]
    Credentials(String),
    #[error("the export could not be signed: {0}")]
    Signing(String),
}

#[async_trait::async_trait]
impl HttpClient for Client {
    async fn send_bytes(
        &self,
        mut request: axum::http::Request<Bytes>,
    ) -> Result<axum::http::Response<Bytes>, HttpError> {
        if let Some(signer) = &self.signer {
            signer.sign(&mut request).await?;
        }
        let (parts, body) = request.into_parts();
        let url = parts.uri.to_string();
        let response = self
            .http
            .request(parts.method, url)
            .headers(parts.headers)
            .body(body)
            .timeout(self.timeout)
            .send()
            .await
            // Without the URL: reqwest's error would print it, and with it whatever it holds.
            .map_err(|e| ExportError::Transport(e.without_url().to_string()))?;
        let mut builder = axum::http::Response::builder().status(response.status());
        if let Some(headers) = builder.headers_mut() {
            headers.clone_from(response.headers());
        }
        let mut response = response;
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| ExportError::Transport(e.without_url().to_string()))?
        {
            if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
                return Err(ExportError::TooLarge.into());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(builder.body(Bytes::from(body))?)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use axum::http::{HeaderMap, Method};

    use super::*;

    /// Serves one route that keeps each request's headers and body.
    async fn recorder() -> (String, Arc<Mutex<Vec<(HeaderMap, Bytes)>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let keep = seen.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |headers: HeaderMap, body: Bytes| {
                let keep = keep.clone();
                async move {
                    keep.lock().unwrap().push((headers, body));
                    "ok"
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (format!("http://{addr}/v1/traces"), seen)
    }

    #[tokio::test]
    async fn a_cloudwatch_export_is_signed_for_xray_in_the_region_with_the_session_token() {
        let (url, seen) = recorder().await;
        let env = Env::from_pairs([
            ("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"),
            (
                "AWS_SECRET_ACCESS_KEY",
                "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            ),
            ("AWS_SESSION_TOKEN", "session-token-of-the-role"),
            ("AWS_REGION", "eu-west-2"),
        ]);
        let signer = Signer::new(env, "eu-west-2".into());
        let client = Client::new(reqwest::Client::new(), Duration::from_secs(5), Some(signer));
        let body = Bytes::from_static(b"\x0a\x02spans");
        let request = axum::http::Request::builder()
            .method(Method::POST)
            .uri(&url)
            .header("content-type", "application/x-protobuf")
            .body(body.clone())
            .unwrap();
        let response = client.send_bytes(request).await.unwrap();
        assert_eq!(response.status(), 200);

        let (headers, received) = seen.lock().unwrap().pop().unwrap();
        assert_eq!(received, body);
        assert_eq!(headers["x-amz-security-token"], "session-token-of-the-role");
        let authorization = headers["authorization"].to_str().unwrap();
        let date = headers["x-amz-date"].to_str().unwrap();
        assert!(
            authorization.starts_with(&format!(
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/{}/eu-west-2/xray/aws4_request, ",
                &date[..8]
            )),
            "{authorization}"
        );
        assert!(
            authorization
                .contains("SignedHeaders=content-type;host;x-amz-date;x-amz-security-token"),
            "{authorization}"
        );
        assert!(
            !authorization.contains("wJalrXUtnFEMI"),
            "the secret key is never sent"
        );

        // The signature is AWS's for exactly this method, URL, body and time: signed again
        // independently at the received `x-amz-date`, it comes out the same; another body does
        // not.
        let at = chrono::NaiveDateTime::parse_from_str(date, "%Y%m%dT%H%M%SZ")
            .unwrap()
            .and_utc();
        let resign = |body: &[u8]| {
            use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
            let identity = aws_credential_types::Credentials::new(
                "AKIDEXAMPLE",
                "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
                Some("session-token-of-the-role".into()),
                None,
                "test",
            )
            .into();
            let params = aws_sigv4::sign::v4::SigningParams::builder()
                .identity(&identity)
                .region("eu-west-2")
                .name("xray")
                .time(std::time::SystemTime::from(at))
                .settings(SigningSettings::default())
                .build()
                .unwrap()
                .into();
            let host = headers["host"].to_str().unwrap();
            let signable = SignableRequest::new(
                "POST",
                &url,
                [("content-type", "application/x-protobuf"), ("host", host)].into_iter(),
                SignableBody::Bytes(body),
            )
            .unwrap();
            let (instructions, _) = sign(signable, &params).unwrap().into_parts();
            let mut again = axum::http::Request::new(());
            instructions.apply_to_request_http1x(&mut again);
            again.headers()["authorization"]
                .to_str()
                .unwrap()
                .to_owned()
        };
        assert_eq!(resign(&body), authorization);
        assert_ne!(resign(b"other spans"), authorization);
    }

    #[tokio::test]
    async fn without_a_signer_nothing_is_signed() {
        let (url, seen) = recorder().await;
        let client = Client::new(reqwest::Client::new(), Duration::from_secs(5), None);
        let request = axum::http::Request::builder()
            .method(Method::POST)
            .uri(&url)
            .body(Bytes::from_static(b"spans"))
            .unwrap();
        client.send_bytes(request).await.unwrap();
        let (headers, _) = seen.lock().unwrap().pop().unwrap();
        assert!(!headers.contains_key("authorization"));
    }
}
