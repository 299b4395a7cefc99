//! Where `parley catalog index` reads its catalog file: a path, or an `s3://bucket/key` object
//! (the file next to the tools file in S3, which the admin function indexes on a schedule).
//! The object is read whole within [`MAX_S3_BYTES`] and [`S3_TIMEOUT`], each failure said with
//! its fix, as the mcp function reads an S3 tools file; no error carries a credential.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::operation::get_object::GetObjectError;
use parley_core::config::Env;

/// The largest catalog object read: 32 MiB, some ten times a catalog of 10,000 described
/// columns (parley-bench's largest). A larger one is refused before its body is read.
pub const MAX_S3_BYTES: u64 = 32 * 1024 * 1024;

/// The whole S3 read, the SDK's retries included. Generous (the admin function has 900 s), but
/// finite: a function in a VPC with no way to S3 would otherwise hang until Lambda stops it,
/// saying nothing of why.
pub const S3_TIMEOUT: Duration = Duration::from_secs(60);

/// A catalog file: a path on this machine, or an object in S3.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Path(PathBuf),
    S3 { bucket: String, key: String },
}

impl Source {
    /// `FILE` as typed: `s3://bucket/key` (the scheme in any case), else a path.
    pub fn parse(raw: &str) -> Result<Source, String> {
        let Some(rest) = raw
            .get(..5)
            .filter(|head| head.eq_ignore_ascii_case("s3://"))
            .map(|_| &raw[5..])
        else {
            return Ok(Source::Path(PathBuf::from(raw)));
        };
        match rest.split_once('/') {
            Some((bucket, key)) if !bucket.is_empty() && !key.is_empty() && !key.ends_with('/') => {
                Ok(Source::S3 {
                    bucket: bucket.to_owned(),
                    key: key.to_owned(),
                })
            }
            _ => Err(
                "names no object: an S3 catalog file is written s3://<bucket>/<key>, e.g. \
                 s3://my-team-config/parley/catalog.toml"
                    .into(),
            ),
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Path(path) => write!(f, "{}", path.display()),
            Source::S3 { bucket, key } => write!(f, "s3://{bucket}/{key}"),
        }
    }
}

/// The object's text, or what went wrong and its fix.
pub async fn read_object(env: &Env, bucket: &str, key: &str) -> Result<String, String> {
    tokio::time::timeout(S3_TIMEOUT, read_within_time(env, bucket, key))
        .await
        .map_err(|_| {
            format!(
                "S3 did not answer within {} s: a function in a VPC reaches S3 only through an \
                 S3 gateway endpoint (the template's VpcEndpoints with PrivateRouteTableIds) or \
                 a NAT gateway; check AWS_REGION too",
                S3_TIMEOUT.as_secs()
            )
        })?
}

async fn read_within_time(env: &Env, bucket: &str, key: &str) -> Result<String, String> {
    let out = client(env)
        .await
        .get_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .map_err(|e| explain(env, bucket, key, e))?;
    let too_large = |size: String| {
        format!(
            "the object is {size}over the {MAX_S3_BYTES} bytes a catalog file may have: describe \
             fewer schemas in it"
        )
    };
    let declared = out.content_length().and_then(|n| u64::try_from(n).ok());
    if let Some(size) = declared.filter(|&n| n > MAX_S3_BYTES) {
        return Err(too_large(format!("{size} bytes, ")));
    }
    let mut bytes = Vec::with_capacity(declared.unwrap_or(0) as usize);
    let mut body = out.body;
    // The length is S3's word; the body is cut past the limit whatever it said.
    while let Some(chunk) = body.try_next().await.map_err(|e| {
        format!(
            "the connection to S3 broke while reading the object ({}): try again",
            parley_core::error::chain(&e)
        )
    })? {
        if (bytes.len() + chunk.len()) as u64 > MAX_S3_BYTES {
            return Err(too_large(String::new()));
        }
        bytes.extend_from_slice(&chunk);
    }
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "the object is not UTF-8 text (the first invalid byte is at offset {}): save the \
             catalog file as UTF-8 and upload it again",
            e.utf8_error().valid_up_to()
        )
    })
}

/// The shared AWS configuration; with an endpoint override (a local S3 such as moto), buckets
/// addressed by path, as local servers expect. As the mcp function's tools-file reader.
async fn client(env: &Env) -> aws_sdk_s3::Client {
    let shared = parley_core::aws::sdk_config(env, "AWS_ENDPOINT_URL_S3").await;
    let local = env.get("AWS_ENDPOINT_URL_S3").is_some() || env.get("AWS_ENDPOINT_URL").is_some();
    let config = aws_sdk_s3::config::Builder::from(&shared)
        .force_path_style(local)
        .build();
    aws_sdk_s3::Client::from_conf(config)
}

/// A failed `GetObject` as its cause and fix: S3's code and message only, never the request
/// (its signature) or the settings.
fn explain(
    env: &Env,
    bucket: &str,
    key: &str,
    e: SdkError<GetObjectError, HttpResponse>,
) -> String {
    let uri = format!("s3://{bucket}/{key}");
    let region = env.get("AWS_REGION").or(env.get("AWS_DEFAULT_REGION"));
    let status = e.raw_response().map(|r| r.status().as_u16());
    let said = match (e.code(), e.message()) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        (Some(code), None) => code.to_owned(),
        _ => status.map_or_else(String::new, |s| format!("HTTP {s}")),
    };
    // Some S3-compatible servers answer a missing key with a bare 404.
    let missing_key = matches!(&e, SdkError::ServiceError(se) if se.err().is_no_such_key())
        || e.code() == Some("NoSuchKey")
        || (status == Some(404) && e.code().is_none());
    if missing_key {
        format!(
            "S3 has no such key ({said}): upload the catalog file (`aws s3 cp catalog.toml \
             {uri}`) or correct the key (the template's CatalogFileS3Uri)"
        )
    } else if e.code() == Some("NoSuchBucket") {
        format!(
            "S3 has no bucket `{bucket}` ({said}): correct the bucket (the template's \
             CatalogFileS3Uri), or create it (`aws s3 mb s3://{bucket}`) and upload the file"
        )
    } else if status == Some(403) {
        let partition = partition(region);
        format!(
            "access denied ({said}): the role running this needs s3:GetObject on \
             arn:{partition}:s3:::{bucket}/{key} (the template grants the admin function the \
             object CatalogFileS3Uri names), and kms:Decrypt if the object is encrypted with a \
             customer managed KMS key. Without s3:ListBucket on arn:{partition}:s3:::{bucket}, \
             S3 also answers 403 for a key that does not exist: check it is there (`aws s3 ls \
             {uri}`)"
        )
    } else if status == Some(301) || e.code() == Some("PermanentRedirect") {
        let elsewhere = e
            .raw_response()
            .and_then(|r| r.headers().get("x-amz-bucket-region"))
            .map_or_else(String::new, |r| format!(" ({r})"));
        format!(
            "the bucket `{bucket}` is in another region{elsewhere} than AWS_REGION ({}): keep the \
             catalog file in a bucket of the function's region",
            region.unwrap_or("unset")
        )
    } else if status.is_some_and(|s| s >= 500 || s == 429) {
        format!("S3 could not answer GetObject ({said}), a problem on its side: try again")
    } else if status.is_some() {
        format!("S3 refused GetObject ({said})")
    } else {
        // No answer: the request could not be made (no region, no credentials) or sent (no
        // route, DNS, TLS). The causes' words, not the SDK's Debug dump, name no secret.
        format!(
            "could not call S3 ({}): check AWS_REGION and the credentials; a function in a VPC \
             reaches S3 only through an S3 gateway endpoint (the template's VpcEndpoints with \
             PrivateRouteTableIds) or a NAT gateway",
            parley_core::error::chain(&e)
        )
    }
}

/// The ARN partition of `region`: IAM policies in China and GovCloud name theirs.
fn partition(region: Option<&str>) -> &'static str {
    match region {
        Some(r) if r.starts_with("cn-") => "aws-cn",
        Some(r) if r.starts_with("us-gov-") => "aws-us-gov",
        _ => "aws",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_an_s3_uri_or_a_path() {
        assert_eq!(
            Source::parse("s3://team-config/parley/catalog.toml").unwrap(),
            Source::S3 {
                bucket: "team-config".into(),
                key: "parley/catalog.toml".into()
            }
        );
        assert_eq!(
            Source::parse("S3://team-config/catalog.toml")
                .unwrap()
                .to_string(),
            "s3://team-config/catalog.toml"
        );
        assert_eq!(
            Source::parse("domains/chinook/catalog.toml").unwrap(),
            Source::Path("domains/chinook/catalog.toml".into())
        );
    }

    #[test]
    fn an_s3_uri_without_an_object_says_how_one_is_written() {
        for raw in [
            "s3://team-config",
            "s3://team-config/",
            "s3://team-config/parley/",
            "s3:///catalog.toml",
        ] {
            let problem = Source::parse(raw).unwrap_err();
            assert!(problem.contains("s3://<bucket>/<key>"), "{raw}: {problem}");
        }
    }

    #[test]
    fn policies_name_the_partition_of_the_region() {
        assert_eq!(partition(Some("eu-west-2")), "aws");
        assert_eq!(partition(Some("cn-north-1")), "aws-cn");
        assert_eq!(partition(Some("us-gov-west-1")), "aws-us-gov");
        assert_eq!(partition(None), "aws");
    }
}
