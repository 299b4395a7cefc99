//! A real OTLP/HTTP trace receiver on loopback ([`OtlpReceiver`]): `POST /v1/traces` bodies
//! are decoded as `ExportTraceServiceRequest` with OpenTelemetry's own generated protobuf
//! types (`opentelemetry-proto`) and answered as a collector answers, so the exporter under
//! test is the real one sending the real wire format. No collector binary is installable
//! here (docs/tracing.md, "Testing"); this is the collector's receiving end and nothing more.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header::CONTENT_TYPE};
use axum::response::IntoResponse;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};
use prost::Message;

/// One span as received, its ids in lower-case hex and its attributes as text.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedSpan {
    /// The resource's `service.name`.
    pub service: String,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub name: String,
    /// OTLP's `SpanKind` number: 1 internal, 2 server, 3 client.
    pub kind: i32,
    pub attributes: BTreeMap<String, String>,
    /// OTLP's status code: 0 unset, 1 ok, 2 error.
    pub status: i32,
}

impl ReceivedSpan {
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

#[derive(Default)]
struct Received {
    spans: Vec<ReceivedSpan>,
    /// Every POST, decodable or not.
    posts: usize,
    /// The `Content-Type` of each POST.
    content_types: Vec<String>,
}

/// The receiver, serving until dropped.
pub struct OtlpReceiver {
    addr: SocketAddr,
    received: Arc<Mutex<Received>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl OtlpReceiver {
    pub async fn start() -> OtlpReceiver {
        let received = Arc::new(Mutex::new(Received::default()));
        let app = Router::new()
            .route("/v1/traces", post(export))
            .with_state(received.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the OTLP receiver");
        let addr = listener.local_addr().expect("its address");
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        OtlpReceiver {
            addr,
            received,
            server,
        }
    }

    /// The value for `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`.
    pub fn traces_endpoint(&self) -> String {
        format!("http://{}/v1/traces", self.addr)
    }

    /// The value for `OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces` is appended by the exporter).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.received.lock().expect("received").spans.clone()
    }

    /// How many export requests arrived.
    pub fn posts(&self) -> usize {
        self.received.lock().expect("received").posts
    }

    pub fn content_types(&self) -> Vec<String> {
        self.received
            .lock()
            .expect("received")
            .content_types
            .clone()
    }

    /// The spans once `done` holds for them, or a panic naming what arrived after `limit`.
    pub async fn wait_for(
        &self,
        limit: Duration,
        done: impl Fn(&[ReceivedSpan]) -> bool,
    ) -> Vec<ReceivedSpan> {
        let until = tokio::time::Instant::now() + limit;
        loop {
            let spans = self.spans();
            if done(&spans) {
                return spans;
            }
            if tokio::time::Instant::now() > until {
                let names: Vec<_> = spans.iter().map(|s| (&s.service, &s.name)).collect();
                panic!("the expected spans did not arrive; received: {names:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn export(
    State(received): State<Arc<Mutex<Received>>>,
    headers: HeaderMap,
    body: Bytes,
) -> impl IntoResponse {
    let content_type = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let decoded = ExportTraceServiceRequest::decode(body);
    let mut received = received.lock().expect("received");
    received.posts += 1;
    received.content_types.push(content_type.clone());
    let request = match decoded {
        Ok(request) if content_type == "application/x-protobuf" => request,
        _ => return (StatusCode::BAD_REQUEST, Vec::new()).into_response(),
    };
    for resource_spans in request.resource_spans {
        let service = resource_spans
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .and_then(|kv| kv.value.as_ref())
            .map(text)
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                received.spans.push(ReceivedSpan {
                    service: service.clone(),
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    name: span.name,
                    kind: span.kind,
                    attributes: span
                        .attributes
                        .iter()
                        .map(|kv| {
                            (
                                kv.key.clone(),
                                kv.value.as_ref().map(text).unwrap_or_default(),
                            )
                        })
                        .collect(),
                    status: span.status.map_or(0, |s| s.code),
                });
            }
        }
    }
    (
        [(CONTENT_TYPE, "application/x-protobuf")],
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
        .into_response()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn text(value: &AnyValue) -> String {
    match &value.value {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}
