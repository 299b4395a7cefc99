//! The S3 event records an invocation carries, parsed at the edge into
//! [`parley_ingest::s3::ObjectEvent`]s (keys decoded). Anything else is refused whole, with
//! what it lacked.

use parley_ingest::s3::{ObjectEvent, decode_event_key};
use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize)]
struct Records {
    #[serde(rename = "Records")]
    records: Vec<Record>,
}

#[derive(Deserialize)]
struct Record {
    #[serde(rename = "eventSource", default)]
    source: String,
    #[serde(rename = "eventName", default)]
    name: String,
    s3: S3,
}

#[derive(Deserialize)]
struct S3 {
    bucket: BucketRef,
    object: ObjectRef,
}

#[derive(Deserialize)]
struct BucketRef {
    name: String,
}

#[derive(Deserialize)]
struct ObjectRef {
    key: String,
    #[serde(default)]
    sequencer: Option<String>,
    #[serde(rename = "versionId", default)]
    version_id: Option<String>,
}

/// The payload's object events, or why it is not an S3 event. S3's test event (sent when a
/// notification is configured) has no records: no events.
pub fn parse(payload: &Value) -> Result<Vec<ObjectEvent>, String> {
    if payload.get("Event").and_then(Value::as_str) == Some("s3:TestEvent") {
        return Ok(Vec::new());
    }
    let records: Records = serde_json::from_value(payload.clone()).map_err(|e| {
        format!("not an S3 event notification (Records[].s3.bucket.name, .object.key): {e}")
    })?;
    records
        .records
        .into_iter()
        .map(|r| {
            if !r.source.is_empty() && r.source != "aws:s3" {
                return Err(format!("a record from {}, not aws:s3", r.source));
            }
            Ok(ObjectEvent {
                bucket: r.s3.bucket.name,
                key: decode_event_key(&r.s3.object.key),
                sequencer: r.s3.object.sequencer,
                version_id: r.s3.object.version_id,
                name: r.name,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn records_become_object_events_with_decoded_keys() {
        let payload = json!({"Records": [{
            "eventSource": "aws:s3", "eventName": "ObjectCreated:Put",
            "s3": {"bucket": {"name": "docs"},
                   "object": {"key": "hr/Leave+policy.pdf", "sequencer": "0A1B", "versionId": "v1", "size": 3}}
        }]});
        assert_eq!(
            parse(&payload).unwrap(),
            vec![ObjectEvent {
                bucket: "docs".into(),
                key: "hr/Leave policy.pdf".into(),
                sequencer: Some("0A1B".into()),
                version_id: Some("v1".into()),
                name: "ObjectCreated:Put".into(),
            }]
        );
    }

    #[test]
    fn other_payloads_are_refused_with_what_they_lack() {
        assert!(parse(&json!({"hello": 1})).unwrap_err().contains("Records"));
        let sqs = json!({"Records": [{"eventSource": "aws:sqs", "s3": {"bucket": {"name": "b"}, "object": {"key": "k"}}}]});
        assert!(parse(&sqs).unwrap_err().contains("aws:sqs"));
        let test_event = json!({"Service": "Amazon S3", "Event": "s3:TestEvent", "Bucket": "docs"});
        assert_eq!(parse(&test_event).unwrap(), vec![]);
    }
}
