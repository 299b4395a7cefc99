//! Where a tools file lives, a path or an `s3://bucket/key` URI (one entry of `TOOLS_FILE`),
//! and reading one whole at start-up: from S3 within `TOOLS_FILE_MAX_BYTES` and
//! `TOOLS_FILE_TIMEOUT_MS`, each failure said with its fix. It hands back text and never parses
//! it (the catalog does, the same for both kinds), and no error it makes carries a credential.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::operation::get_object::GetObjectError;
use parley_core::config::Env;
use tokio::sync::OnceCell;

/// `TOOLS_FILE_MAX_BYTES`' default: 1 MiB, some fifty times the largest demo tools file (19 KB).
pub const DEFAULT_MAX_BYTES: u64 = 1024 * 1024;

/// `TOOLS_FILE_TIMEOUT_MS`' default: half of the 10 s Lambda gives an instance's start-up
/// (its init phase), which must also connect to the database and check every statement.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// One tools file: a path on this machine (a layer's `/opt/...`, a checkout's `domains/...`),
/// or an object in S3, read at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolsSource {
    Path(PathBuf),
    S3(S3Object),
}

/// An S3 object named by an `s3://bucket/key` URI; the key as written (not URL-encoded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Object {
    pub bucket: String,
    pub key: String,
}

/// How much of S3 a start-up may spend on one tools file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct S3ReadLimits {
    /// `TOOLS_FILE_MAX_BYTES`: a larger object is refused unread.
    pub max_bytes: u64,
    /// `TOOLS_FILE_TIMEOUT_MS`: the whole read (the SDK's retries included).
    pub timeout: Duration,
}

impl Default for S3ReadLimits {
    fn default() -> Self {
        Self {
            max_bytes: DEFAULT_MAX_BYTES,
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

impl ToolsSource {
    /// One entry of `TOOLS_FILE`: an `s3://bucket/key` URI, else a path. Any other `scheme://`
    /// is refused rather than looked for as a file (an `https://` URL would fail later as a
    /// missing file, which hides the real mistake). The problem never quotes the entry: a
    /// pasted presigned URL carries a signature.
    pub fn parse(entry: &str) -> Result<Self, String> {
        if let Some(rest) = strip_scheme(entry, "s3://") {
            return S3Object::parse(rest).map(ToolsSource::S3);
        }
        if let Some((scheme, _)) = entry.split_once("://")
            && !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        {
            return Err(
                "is a URL; a tools file is a path or an s3://bucket/key URI (other URLs are not \
                 read)"
                    .into(),
            );
        }
        Ok(ToolsSource::Path(PathBuf::from(entry)))
    }

    /// A file this one names by a relative `reference`, found beside it: in the same directory
    /// for a path, under the same key prefix ("directory") of the same bucket for an S3 object.
    /// An `s3://` URI stands for itself; so does an absolute path beside a path, while beside an
    /// S3 object a leading `/` starts from the bucket's root. `..` climbs no higher than the
    /// bucket's root.
    pub fn resolve(&self, reference: &str) -> Result<ToolsSource, String> {
        match (self, ToolsSource::parse(reference)?) {
            (_, s3 @ ToolsSource::S3(_)) => Ok(s3),
            (ToolsSource::Path(_), ToolsSource::Path(rel)) if rel.is_absolute() => {
                Ok(ToolsSource::Path(rel))
            }
            (ToolsSource::Path(path), ToolsSource::Path(rel)) => Ok(ToolsSource::Path(
                path.parent().unwrap_or(Path::new("")).join(rel),
            )),
            (ToolsSource::S3(object), ToolsSource::Path(_)) => {
                object.resolve(reference).map(ToolsSource::S3)
            }
        }
    }
}

impl fmt::Display for ToolsSource {
    /// How start-up errors name the file: the path as given, or the `s3://` URI.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolsSource::Path(path) => write!(f, "{}", path.display()),
            ToolsSource::S3(object) => write!(f, "{object}"),
        }
    }
}

impl fmt::Display for S3Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s3://{}/{}", self.bucket, self.key)
    }
}

/// `text` without its leading `scheme`, compared without regard to case (`S3://` is a typo
/// worth reading, not a relative path).
fn strip_scheme<'a>(text: &'a str, scheme: &str) -> Option<&'a str> {
    let head = text.get(..scheme.len())?;
    head.eq_ignore_ascii_case(scheme)
        .then(|| &text[scheme.len()..])
}

impl S3Object {
    /// `bucket/key`, the URI after `s3://`. Bucket names follow S3's rules for new buckets
    /// (3-63 characters of a-z, 0-9, `.` and `-`, a letter or digit at each end); a key is
    /// 1-1024 bytes and names an object, not a "directory" (no trailing `/`).
    fn parse(rest: &str) -> Result<Self, String> {
        const SHAPE: &str = "an S3 tools file is written s3://<bucket>/<key>, e.g. \
                             s3://my-team-config/parley/tools.toml";
        let Some((bucket, key)) = rest.split_once('/') else {
            return Err(format!("names a bucket but no key: {SHAPE}"));
        };
        let edge_ok =
            |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        if !(3..=63).contains(&bucket.len())
            || !bucket
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '-'))
            || !edge_ok(bucket.chars().next())
            || !edge_ok(bucket.chars().last())
        {
            return Err(format!(
                "has a bucket name S3 does not allow (3-63 characters of a-z, 0-9, `.` and `-`, \
                 starting and ending with a letter or digit): {SHAPE}"
            ));
        }
        if key.is_empty() || key.ends_with('/') {
            return Err(format!(
                "names no object, only a bucket or a folder: {SHAPE}"
            ));
        }
        if key.len() > 1024 {
            return Err("has a key longer than S3's 1024 bytes".into());
        }
        Ok(S3Object {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
        })
    }

    /// See [`ToolsSource::resolve`].
    fn resolve(&self, reference: &str) -> Result<S3Object, String> {
        let (mut parts, rest): (Vec<&str>, &str) = match reference.strip_prefix('/') {
            Some(from_root) => (Vec::new(), from_root),
            None => {
                let mut dir: Vec<&str> = self.key.split('/').collect();
                dir.pop();
                (dir, reference)
            }
        };
        for part in rest.split('/') {
            match part {
                "" | "." => {}
                ".." => {
                    if parts.pop().is_none() {
                        return Err(format!(
                            "`{reference}` climbs above the root of the bucket {}",
                            self.bucket
                        ));
                    }
                }
                name => parts.push(name),
            }
        }
        if parts.is_empty() || reference.ends_with('/') {
            return Err(format!("`{reference}` names no file"));
        }
        let uri = format!("{}/{}", self.bucket, parts.join("/"));
        S3Object::parse(&uri).map_err(|problem| format!("`{reference}` {problem}"))
    }

    /// The object's ARN, as an IAM policy's `Resource` names it.
    fn arn(&self, partition: &str) -> String {
        format!("arn:{partition}:s3:::{}/{}", self.bucket, self.key)
    }
}

/// Reads tools files whole. The S3 client is made on the first `s3://` read, so a deployment
/// whose files are all on disk never loads the AWS configuration.
pub struct Reader<'a> {
    env: &'a Env,
    limits: S3ReadLimits,
    client: OnceCell<aws_sdk_s3::Client>,
}

impl<'a> Reader<'a> {
    /// A reader using the AWS settings in `env` (`AWS_REGION`, credentials, and
    /// `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL`, which point it at a local S3 such as moto).
    pub fn new(env: &'a Env, limits: S3ReadLimits) -> Self {
        Self {
            env,
            limits,
            client: OnceCell::new(),
        }
    }

    /// The file's text. A path is read as it always was (`std::fs::read_to_string`, its error
    /// as the system gives it); an S3 object within the limits, its errors naming the fix.
    pub async fn read(&self, source: &ToolsSource) -> io::Result<String> {
        match source {
            ToolsSource::Path(path) => std::fs::read_to_string(path),
            ToolsSource::S3(object) => self.read_s3(object).await,
        }
    }

    async fn read_s3(&self, object: &S3Object) -> io::Result<String> {
        let timeout = self.limits.timeout;
        let bytes = tokio::time::timeout(timeout, async {
            let client = self.client.get_or_init(|| s3_client(self.env)).await;
            self.fetch(client, object).await
        })
        .await
        .map_err(|_| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "S3 did not answer within {} ms (TOOLS_FILE_TIMEOUT_MS): a function in a VPC \
                     reaches S3 only through an S3 gateway endpoint (the template's \
                     VpcEndpoints) or a NAT gateway; check AWS_REGION too",
                    timeout.as_millis()
                ),
            )
        })??;
        String::from_utf8(bytes).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the object is not UTF-8 text (the first invalid byte is at offset {}): \
                     save the tools file as UTF-8 and upload it again",
                    e.utf8_error().valid_up_to()
                ),
            )
        })
    }

    /// The object's bytes, at most `max_bytes` of them: a larger object is refused by its
    /// `Content-Length` before its body is read, and the body is cut one chunk past the limit
    /// whatever the length said.
    async fn fetch(&self, client: &aws_sdk_s3::Client, object: &S3Object) -> io::Result<Vec<u8>> {
        let max = self.limits.max_bytes;
        let out = client
            .get_object()
            .bucket(&object.bucket)
            .key(&object.key)
            .send()
            .await
            .map_err(|e| self.explain(object, e))?;
        let too_large = |size: Option<u64>| {
            let size = size.map_or_else(String::new, |s| format!("{s} bytes, "));
            io::Error::new(
                io::ErrorKind::FileTooLarge,
                format!(
                    "the object is {size}over TOOLS_FILE_MAX_BYTES ({max} bytes): split its \
                     tools into several files (TOOLS_FILE takes a comma-separated list) or raise \
                     TOOLS_FILE_MAX_BYTES"
                ),
            )
        };
        let declared = out.content_length().and_then(|n| u64::try_from(n).ok());
        if declared.is_some_and(|n| n > max) {
            return Err(too_large(declared));
        }
        let capacity = declared.unwrap_or(0).min(max);
        let mut bytes = Vec::with_capacity(usize::try_from(capacity).unwrap_or(0));
        let mut body = out.body;
        while let Some(chunk) = body.try_next().await.map_err(|e| {
            io::Error::other(format!(
                "the connection to S3 broke while reading the object ({}): try again",
                parley_core::error::chain(&e)
            ))
        })? {
            if (bytes.len() + chunk.len()) as u64 > max {
                return Err(too_large(None));
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    }

    /// A failed `GetObject` as its cause and fix. Only S3's error code and message are shown,
    /// never the request (its signature) or the settings.
    fn explain(&self, object: &S3Object, e: SdkError<GetObjectError, HttpResponse>) -> io::Error {
        let region = self
            .env
            .get("AWS_REGION")
            .or(self.env.get("AWS_DEFAULT_REGION"));
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
        let (kind, problem) = if missing_key {
            (
                io::ErrorKind::NotFound,
                format!(
                    "S3 has no such key ({said}): upload the file (`aws s3 cp tools.toml \
                     {object}`) or correct the key in TOOLS_FILE (the template's ToolsFileS3Uri)"
                ),
            )
        } else if e.code() == Some("NoSuchBucket") {
            (
                io::ErrorKind::NotFound,
                format!(
                    "S3 has no bucket `{}` ({said}): correct the bucket in TOOLS_FILE (the \
                     template's ToolsFileS3Uri), or create it (`aws s3 mb s3://{}`) and upload \
                     the file",
                    object.bucket, object.bucket
                ),
            )
        } else if status == Some(403) {
            let partition = partition(region);
            (
                io::ErrorKind::PermissionDenied,
                format!(
                    "access denied ({said}): the function's role needs s3:GetObject on {} (the \
                     template grants it for the object ToolsFileS3Uri names), and kms:Decrypt \
                     if the object is encrypted with a customer managed KMS key. Without \
                     s3:ListBucket on arn:{partition}:s3:::{}, S3 also answers 403 for a key \
                     that does not exist: check it is there (`aws s3 ls {object}`)",
                    object.arn(partition),
                    object.bucket
                ),
            )
        } else if status == Some(301) || e.code() == Some("PermanentRedirect") {
            let elsewhere = e
                .raw_response()
                .and_then(|r| r.headers().get("x-amz-bucket-region"))
                .map_or_else(String::new, |r| format!(" ({r})"));
            (
                io::ErrorKind::Other,
                format!(
                    "the bucket `{}` is in another region{elsewhere} than the function's \
                     AWS_REGION ({}): keep the tools file in a bucket of the function's region",
                    object.bucket,
                    region.unwrap_or("unset")
                ),
            )
        } else if status.is_some_and(|s| s >= 500 || s == 429) {
            (
                io::ErrorKind::Other,
                format!(
                    "S3 could not answer GetObject ({said}), a problem on its side: the next \
                     instance to start reads the file again"
                ),
            )
        } else if status.is_some() {
            (
                io::ErrorKind::Other,
                format!("S3 refused GetObject ({said})"),
            )
        } else {
            // No answer from S3: the request could not be made (no region, no credentials) or
            // sent (no route, DNS, TLS). The SDK's account of it (its causes' words, not its Debug
            // dump) names no secret.
            (
                io::ErrorKind::Other,
                format!(
                    "could not call S3 ({}): check AWS_REGION and the function's credentials; \
                     a function in a VPC reaches S3 only through an S3 gateway endpoint (the \
                     template's VpcEndpoints) or a NAT gateway",
                    parley_core::error::chain(&e)
                ),
            )
        };
        io::Error::new(kind, problem)
    }
}

/// The S3 client: the shared AWS configuration; with an endpoint override (a local S3 such as
/// moto), buckets addressed by path, as local servers expect. As `parley_ingest`'s `Bucket`.
async fn s3_client(env: &Env) -> aws_sdk_s3::Client {
    let shared = parley_core::aws::sdk_config(env, "AWS_ENDPOINT_URL_S3").await;
    let local = env.get("AWS_ENDPOINT_URL_S3").is_some() || env.get("AWS_ENDPOINT_URL").is_some();
    let config = aws_sdk_s3::config::Builder::from(&shared)
        .force_path_style(local)
        .build();
    aws_sdk_s3::Client::from_conf(config)
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

    fn s3(bucket: &str, key: &str) -> ToolsSource {
        ToolsSource::S3(S3Object {
            bucket: bucket.into(),
            key: key.into(),
        })
    }

    #[test]
    fn an_entry_is_an_s3_uri_or_a_path() {
        assert_eq!(
            ToolsSource::parse("s3://team-config/parley/tools.toml").unwrap(),
            s3("team-config", "parley/tools.toml")
        );
        assert_eq!(
            ToolsSource::parse("S3://team-config/tools.toml").unwrap(),
            s3("team-config", "tools.toml")
        );
        assert_eq!(
            ToolsSource::parse("/opt/tools/orders.toml").unwrap(),
            ToolsSource::Path("/opt/tools/orders.toml".into())
        );
        assert_eq!(
            ToolsSource::parse("domains/feedback/tools.toml").unwrap(),
            ToolsSource::Path("domains/feedback/tools.toml".into())
        );
        assert_eq!(
            s3("team-config", "a b/t.toml").to_string(),
            "s3://team-config/a b/t.toml"
        );
    }

    #[test]
    fn a_malformed_uri_is_refused_without_quoting_it() {
        for (entry, says) in [
            ("s3://team-config", "no key"),
            ("s3://team-config/", "names no object"),
            ("s3://team-config/folder/", "names no object"),
            ("s3:///tools.toml", "bucket name"),
            ("s3://Team_Config/tools.toml", "bucket name"),
            ("s3://-team/tools.toml", "bucket name"),
            (
                "https://team-config.s3.amazonaws.com/t.toml?X-Amz-Signature=abc",
                "is a URL",
            ),
        ] {
            let problem = ToolsSource::parse(entry).unwrap_err();
            assert!(problem.contains(says), "{entry}: {problem}");
            assert!(!problem.contains("Signature=abc"), "{problem}");
        }
        let long = format!("s3://team-config/{}", "k".repeat(1025));
        assert!(ToolsSource::parse(&long).unwrap_err().contains("1024"));
    }

    #[test]
    fn a_relative_reference_is_found_beside_the_file_in_the_same_bucket() {
        let tools = s3("team-config", "parley/prod/tools.toml");
        let cases = [
            ("catalog.toml", "parley/prod/catalog.toml"),
            ("./sql/orders.sql", "parley/prod/sql/orders.sql"),
            ("../shared/catalog.toml", "parley/shared/catalog.toml"),
            ("/catalog.toml", "catalog.toml"),
        ];
        for (reference, key) in cases {
            assert_eq!(
                tools.resolve(reference).unwrap(),
                s3("team-config", key),
                "{reference}"
            );
        }
        let at_root = s3("team-config", "tools.toml");
        assert_eq!(
            at_root.resolve("catalog.toml").unwrap(),
            s3("team-config", "catalog.toml")
        );
        assert!(
            at_root
                .resolve("../catalog.toml")
                .unwrap_err()
                .contains("climbs above")
        );
        assert!(tools.resolve("sql/").unwrap_err().contains("names no file"));
        assert!(
            tools
                .resolve("https://x.example/c.toml")
                .unwrap_err()
                .contains("is a URL")
        );
        assert_eq!(
            tools.resolve("s3://other-bucket/c.toml").unwrap(),
            s3("other-bucket", "c.toml")
        );
    }

    #[test]
    fn a_relative_reference_beside_a_path_is_in_its_directory() {
        let tools = ToolsSource::Path("/opt/tools/orders.toml".into());
        assert_eq!(
            tools.resolve("catalog.toml").unwrap(),
            ToolsSource::Path("/opt/tools/catalog.toml".into())
        );
        assert_eq!(
            tools.resolve("/etc/parley/catalog.toml").unwrap(),
            ToolsSource::Path("/etc/parley/catalog.toml".into())
        );
        assert_eq!(
            ToolsSource::Path("tools.toml".into())
                .resolve("catalog.toml")
                .unwrap(),
            ToolsSource::Path("catalog.toml".into())
        );
        assert_eq!(
            tools.resolve("s3://team-config/c.toml").unwrap(),
            s3("team-config", "c.toml")
        );
    }

    #[test]
    fn policies_name_the_partition_of_the_region() {
        let object = S3Object {
            bucket: "b-1".into(),
            key: "t.toml".into(),
        };
        assert_eq!(
            object.arn(partition(Some("eu-west-2"))),
            "arn:aws:s3:::b-1/t.toml"
        );
        assert_eq!(partition(Some("cn-north-1")), "aws-cn");
        assert_eq!(partition(Some("us-gov-west-1")), "aws-us-gov");
        assert_eq!(partition(None), "aws");
    }
}
