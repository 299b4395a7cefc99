//! The mcp function with its tools files in S3 (a local moto server): `TOOLS_FILE=s3://...` is
//! read once at start-up and its tools served over MCP HTTP as a local file's would be; each way
//! the read can fail (no key, no bucket, access denied, too large, not UTF-8, not TOML, no
//! answer) stops start-up with one line that names the URI and the fix, and no credential.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use parley_core::config::Env;
use parley_mcp::Application;
use parley_testkit::{MOTO_REGION, Moto, TestDb};
use serde_json::{Value, json};

const BUCKET: &str = "team-config";
const TOKEN: &str = "s3-tools-test-token-0123456789";
/// Stands in for the function's real secret key: no start-up message may contain it.
const SECRET_KEY: &str = "never-in-a-message-0123456789abcdef";
const SESSION_TOKEN: &str = "session-token-never-in-a-message-42";

const FEEDBACK_TOOLS: &str = include_str!("../../../domains/feedback/tools.toml");

/// A second file beside the first, under the same prefix: its tool reads the same database.
const EXTRA_TOOLS: &str = r#"
[[tool]]
name = "count_lads"
description = "How many local authority districts there are."
sql = "SELECT count(*)::int AS districts FROM lads"
"#;

/// The settings a deployed function has, with moto as its S3: the endpoint, the region, and
/// credentials whose secret parts are distinctive so a test can look for them in messages.
fn function_env(moto: &Moto, database_url: &str, tools_file: &str) -> Vec<(String, String)> {
    let mut env = moto.env();
    env.retain(|(k, _)| k != "AWS_SECRET_ACCESS_KEY");
    env.extend(
        [
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY),
            ("AWS_SESSION_TOKEN", SESSION_TOKEN),
            ("DATABASE_URL", database_url),
            ("TOOLS_FILE", tools_file),
            ("MCP_AUTH_TOKEN", TOKEN),
            ("LISTEN_ADDR", "127.0.0.1:0"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned())),
    );
    env
}

/// Start-up as `main` runs it: the MCP endpoint's URL, or the line `main` would print.
async fn start(env: Vec<(String, String)>) -> Result<String, String> {
    let app = Application::build(Env::from_pairs(env))
        .await
        .map_err(|e| e.to_string())?;
    let addr = app.local_addr().expect("bound outside Lambda");
    app.spawn().expect("serving plain HTTP");
    Ok(format!("http://{addr}/mcp"))
}

/// Start-up that must fail: its message, checked to carry no credential.
async fn refused(env: Vec<(String, String)>) -> String {
    let secrets: Vec<String> = env
        .iter()
        .filter(|(k, _)| k == "AWS_SECRET_ACCESS_KEY" || k == "AWS_SESSION_TOKEN")
        .map(|(_, v)| v.clone())
        .collect();
    let message = match start(env).await {
        Ok(url) => panic!("start-up should have stopped, but serves {url}"),
        Err(message) => message,
    };
    for secret in secrets {
        assert!(!message.contains(&secret), "a credential in: {message}");
    }
    message
}

/// Start-up stops before the database is needed: nothing listens here.
const NO_DATABASE: &str = "postgres://parley@127.0.0.1:1/none";

/// One JSON-RPC request to `/mcp` as an ordinary client sends it: the `result`.
async fn rpc(url: &str, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let response = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(body.to_string())
        .send()
        .await
        .expect("request sent");
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.expect("JSON body");
    body.get("result")
        .cloned()
        .unwrap_or_else(|| panic!("no result in {body}"))
}

async fn rows(url: &str, tool: &str, arguments: Value) -> Vec<Value> {
    let result = rpc(
        url,
        "tools/call",
        json!({"name": tool, "arguments": arguments}),
    )
    .await;
    assert_eq!(result["isError"], false, "tool error: {result}");
    result["structuredContent"]["rows"]
        .as_array()
        .unwrap_or_else(|| panic!("no rows in {result}"))
        .clone()
}

#[tokio::test]
async fn tools_files_in_s3_are_read_at_start_up_and_served_over_mcp() {
    let (db, moto) = (TestDb::with_demo_data(200).await, Moto::start());
    let bucket = moto.versioned_bucket(BUCKET).await;
    bucket.put("parley/tools.toml", FEEDBACK_TOOLS).await;
    bucket.put("parley/extra.toml", EXTRA_TOOLS).await;
    let url = start(function_env(
        &moto,
        &db.readonly_url,
        "s3://team-config/parley/tools.toml, s3://team-config/parley/extra.toml",
    ))
    .await
    .expect("the MCP function starts from S3");

    let listed = rpc(&url, "tools/list", json!({})).await;
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().expect("name"))
        .collect();
    for name in ["lad_by_ref", "search_feedback", "count_lads"] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
    let lad = rows(&url, "lad_by_ref", json!({"ref": "Bristol"})).await;
    assert_eq!(lad[0]["code"], "E06000023", "{lad:?}");

    // Read once: the objects may change or go; this instance keeps what it started with.
    bucket.delete("parley/tools.toml").await;
    bucket.delete("parley/extra.toml").await;
    let counted = rows(&url, "count_lads", json!({})).await;
    assert!(
        counted[0]["districts"].as_i64().unwrap() > 300,
        "{counted:?}"
    );
    let lad = rows(&url, "lad_by_ref", json!({"ref": "Bristol"})).await;
    assert_eq!(lad[0]["code"], "E06000023", "{lad:?}");
}

#[tokio::test]
async fn a_missing_key_or_bucket_stops_start_up_saying_how_to_upload_or_correct_it() {
    let moto = Moto::start();
    moto.versioned_bucket(BUCKET).await;
    let message = refused(function_env(
        &moto,
        NO_DATABASE,
        "s3://team-config/parley/tools.toml",
    ))
    .await;
    assert!(
        message.starts_with(
            "cannot read tools file s3://team-config/parley/tools.toml: S3 has no such key \
             (NoSuchKey"
        ),
        "{message}"
    );
    assert!(
        message.contains("aws s3 cp tools.toml s3://team-config/parley/tools.toml"),
        "{message}"
    );

    let message = refused(function_env(
        &moto,
        NO_DATABASE,
        "s3://no-such-bucket/tools.toml",
    ))
    .await;
    assert!(
        message.starts_with(
            "cannot read tools file s3://no-such-bucket/tools.toml: S3 has no bucket \
             `no-such-bucket` (NoSuchBucket"
        ),
        "{message}"
    );
    assert!(message.contains("ToolsFileS3Uri"), "{message}");
}

#[tokio::test]
async fn an_object_over_the_limit_stops_start_up_unread_naming_the_setting() {
    let moto = Moto::start();
    let bucket = moto.versioned_bucket(BUCKET).await;
    // Valid TOML all through: only its size is wrong.
    let big = format!("{}\n{EXTRA_TOOLS}", "# padding\n".repeat(300));
    bucket.put("tools.toml", big.clone()).await;
    let mut env = function_env(&moto, NO_DATABASE, "s3://team-config/tools.toml");
    env.push(("TOOLS_FILE_MAX_BYTES".into(), "2048".into()));
    let message = refused(env).await;
    assert_eq!(
        message,
        format!(
            "cannot read tools file s3://team-config/tools.toml: the object is {} bytes, over \
             TOOLS_FILE_MAX_BYTES (2048 bytes): split its tools into several files (TOOLS_FILE \
             takes a comma-separated list) or raise TOOLS_FILE_MAX_BYTES",
            big.len()
        )
    );
}

#[tokio::test]
async fn an_object_that_is_not_utf8_stops_start_up_naming_the_offset() {
    let moto = Moto::start();
    let bucket = moto.versioned_bucket(BUCKET).await;
    // "# café" in Latin-1, as an editor on another system might save it.
    bucket.put("tools.toml", b"# caf\xe9\n".to_vec()).await;
    let message = refused(function_env(
        &moto,
        NO_DATABASE,
        "s3://team-config/tools.toml",
    ))
    .await;
    assert_eq!(
        message,
        "cannot read tools file s3://team-config/tools.toml: the object is not UTF-8 text (the \
         first invalid byte is at offset 5): save the tools file as UTF-8 and upload it again"
    );
}

#[tokio::test]
async fn an_s3_file_is_checked_exactly_as_a_local_one_and_named_by_its_uri() {
    let moto = Moto::start();
    let bucket = moto.versioned_bucket(BUCKET).await;
    let local = tempfile::tempdir().expect("temp dir");
    for (name, text) in [
        ("broken.toml", "[[tool]\nname = "),
        (
            "unknown-key.toml",
            "[[tool]]\nname = \"t\"\nsqll = \"SELECT 1\"\n",
        ),
        (
            "no-sql.toml",
            "[[tool]]\nname = \"t\"\ndescription = \"d\"\n",
        ),
    ] {
        bucket.put(&format!("parley/{name}"), text).await;
        let path = local.path().join(name);
        std::fs::write(&path, text).expect("write tools file");
        let uri = format!("s3://team-config/parley/{name}");
        let from_s3 = refused(function_env(&moto, NO_DATABASE, &uri)).await;
        let from_disk = refused(function_env(
            &moto,
            NO_DATABASE,
            &path.display().to_string(),
        ))
        .await;
        assert!(
            from_s3.starts_with(&format!("tools file {uri}: ")),
            "{from_s3}"
        );
        assert_eq!(
            from_s3,
            from_disk.replace(&path.display().to_string(), &uri),
            "{name}"
        );
    }
    let broken = refused(function_env(
        &moto,
        NO_DATABASE,
        "s3://team-config/parley/broken.toml",
    ))
    .await;
    assert!(
        broken.starts_with(
            "tools file s3://team-config/parley/broken.toml: tools file is not valid TOML"
        ),
        "{broken}"
    );
}

#[tokio::test]
async fn an_s3_that_does_not_answer_stops_start_up_within_the_timeout() {
    let moto = Moto::start();
    // Accepts connections (the kernel does) and never answers, like a VPC with no route to S3.
    let silent = TcpListener::bind("127.0.0.1:0").expect("bind");
    let mut env = function_env(&moto, NO_DATABASE, "s3://team-config/tools.toml");
    env.retain(|(k, _)| k != "AWS_ENDPOINT_URL");
    env.push((
        "AWS_ENDPOINT_URL".into(),
        format!("http://{}", silent.local_addr().expect("addr")),
    ));
    env.push(("TOOLS_FILE_TIMEOUT_MS".into(), "300".into()));
    let started = Instant::now();
    let message = refused(env).await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(
        message.starts_with(
            "cannot read tools file s3://team-config/tools.toml: S3 did not answer within 300 \
             ms (TOOLS_FILE_TIMEOUT_MS)"
        ),
        "{message}"
    );
    assert!(message.contains("S3 gateway endpoint"), "{message}");
}

#[tokio::test]
async fn an_s3_that_cannot_be_reached_stops_start_up_saying_what_to_check() {
    let moto = Moto::start();
    let closed = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let mut env = function_env(&moto, NO_DATABASE, "s3://team-config/tools.toml");
    env.retain(|(k, _)| k != "AWS_ENDPOINT_URL");
    env.push(("AWS_ENDPOINT_URL".into(), format!("http://{closed}")));
    let message = refused(env).await;
    assert!(
        message
            .starts_with("cannot read tools file s3://team-config/tools.toml: could not call S3 ("),
        "{message}"
    );
    assert!(message.contains("check AWS_REGION"), "{message}");
}

#[tokio::test]
async fn access_denied_stops_start_up_naming_the_iam_action_and_the_resource() {
    // moto checking IAM, as AWS does: the function's credentials are an IAM user's with no
    // policy, so S3 refuses its GetObject (and, without s3:ListBucket, would refuse a missing
    // key the same way).
    let moto = IamMoto::start();
    let (key_id, secret) = moto.bucket_with_object_and_a_user_without_policy().await;
    let env = vec![
        ("AWS_ENDPOINT_URL".to_owned(), moto.endpoint.clone()),
        ("AWS_REGION".to_owned(), MOTO_REGION.to_owned()),
        ("AWS_ACCESS_KEY_ID".to_owned(), key_id),
        ("AWS_SECRET_ACCESS_KEY".to_owned(), secret),
        ("DATABASE_URL".to_owned(), NO_DATABASE.to_owned()),
        (
            "TOOLS_FILE".to_owned(),
            "s3://team-config/parley/tools.toml".to_owned(),
        ),
        ("MCP_AUTH_TOKEN".to_owned(), TOKEN.to_owned()),
        ("LISTEN_ADDR".to_owned(), "127.0.0.1:0".to_owned()),
    ];
    let message = refused(env).await;
    assert!(
        message.starts_with(
            "cannot read tools file s3://team-config/parley/tools.toml: access denied \
             (AccessDenied"
        ),
        "{message}"
    );
    assert!(
        message.contains("needs s3:GetObject on arn:aws:s3:::team-config/parley/tools.toml"),
        "{message}"
    );
    assert!(message.contains("s3:ListBucket"), "{message}");
}

/// A moto server of its own that checks IAM after its first [`IamMoto::FREE_ACTIONS`] calls
/// (moto's `INITIAL_NO_AUTH_ACTION_COUNT`): the set-up is free, the function's call is checked.
struct IamMoto {
    child: Child,
    endpoint: String,
}

impl IamMoto {
    /// Create the bucket, put the object, create the user, create its access key.
    const FREE_ACTIONS: usize = 4;

    fn start() -> IamMoto {
        let server = std::env::var_os("PARLEY_MOTO_SERVER")
            .map(PathBuf::from)
            .or_else(|| {
                let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/moto");
                let out = Command::new(script).arg("bin").output().ok()?;
                out.status
                    .success()
                    .then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
            })
            .expect("moto_server: run `scripts/moto install`");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new(server)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .env(
                "INITIAL_NO_AUTH_ACTION_COUNT",
                Self::FREE_ACTIONS.to_string(),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting moto_server");
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "moto_server did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        IamMoto {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
        }
    }

    /// The free calls: `team-config/parley/tools.toml`, and an access key of a user with no
    /// policy at all. Returns the key's id and secret.
    async fn bucket_with_object_and_a_user_without_policy(&self) -> (String, String) {
        use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
        use aws_sdk_s3::types::{BucketLocationConstraint, CreateBucketConfiguration};
        let config = aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(MOTO_REGION))
            .endpoint_url(&self.endpoint)
            .force_path_style(true)
            .credentials_provider(Credentials::new("test", "test", None, None, "test"))
            .build();
        let s3 = aws_sdk_s3::Client::from_conf(config);
        s3.create_bucket()
            .bucket(BUCKET)
            .create_bucket_configuration(
                CreateBucketConfiguration::builder()
                    .location_constraint(BucketLocationConstraint::from(MOTO_REGION))
                    .build(),
            )
            .send()
            .await
            .expect("create the bucket");
        s3.put_object()
            .bucket(BUCKET)
            .key("parley/tools.toml")
            .body(EXTRA_TOOLS.as_bytes().to_vec().into())
            .send()
            .await
            .expect("put the tools file");
        self.iam("CreateUser&UserName=parley-mcp").await;
        let created = self.iam("CreateAccessKey&UserName=parley-mcp").await;
        (
            between(&created, "AccessKeyId"),
            between(&created, "SecretAccessKey"),
        )
    }

    /// One IAM Query API call (no SDK for IAM in the tree). While calls are free moto does not
    /// check the signature; the Authorization header only tells it which service is meant.
    async fn iam(&self, action: &str) -> String {
        let response = reqwest::Client::new()
            .post(&self.endpoint)
            .header("content-type", "application/x-www-form-urlencoded")
            .header(
                "authorization",
                "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/iam/aws4_request, \
                 SignedHeaders=host, Signature=0",
            )
            .body(format!("Action={action}&Version=2010-05-08"))
            .send()
            .await
            .expect("IAM call sent");
        assert!(response.status().is_success(), "IAM {action}: {response:?}");
        response.text().await.expect("IAM body")
    }
}

impl Drop for IamMoto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The text of the first `<tag>...</tag>` in `xml`.
fn between(xml: &str, tag: &str) -> String {
    let open = format!("<{tag}>");
    let start = xml.find(&open).map(|i| i + open.len());
    let end = start.and_then(|s| xml[s..].find(&format!("</{tag}>")).map(|e| s + e));
    match (start, end) {
        (Some(s), Some(e)) => xml[s..e].to_owned(),
        _ => panic!("no <{tag}> in {xml}"),
    }
}
