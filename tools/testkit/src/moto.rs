//! `Moto`: a local AWS (the `moto_server` from PyPI: Secrets Manager, S3) on a free loopback
//! port, one per test, stopped on Drop. Tests reach it through an SDK client built here with explicit
//! endpoint and dummy credentials, and hand the same values to the functions via [`Moto::env`].

use std::fs::{self, File};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use aws_sdk_secretsmanager::config::{BehaviorVersion, Credentials, Region};
use serde_json::Value;
use uuid::Uuid;

/// The region, account credentials and endpoint variable every test uses with moto.
pub const MOTO_REGION: &str = "eu-west-2";
const DUMMY_KEY: &str = "test";
const READY_TIMEOUT: Duration = Duration::from_secs(60);
const PORT_ATTEMPTS: usize = 5;

/// A running `moto_server`. Every instance starts empty: secrets live in its memory only.
#[derive(Debug)]
pub struct Moto {
    child: Child,
    endpoint: String,
    log: PathBuf,
    client: aws_sdk_secretsmanager::Client,
}

impl Moto {
    /// Starts `moto_server -H 127.0.0.1 -p <free port>` and waits until it accepts connections.
    /// The binary is `$PARLEY_MOTO_SERVER`, else what `scripts/moto bin` prints; panics with
    /// what to run when neither has one.
    pub fn start() -> Moto {
        let server = server_path();
        let log = std::env::temp_dir().join(format!("parley-moto-{}.log", Uuid::new_v4()));
        let mut last_log = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port();
            let out = File::create(&log)
                .unwrap_or_else(|e| panic!("creating moto log {}: {e}", log.display()));
            let err = out
                .try_clone()
                .unwrap_or_else(|e| panic!("cloning moto log handle: {e}"));
            let mut child = Command::new(&server)
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .spawn()
                .unwrap_or_else(|e| panic!("starting {}: {e}", server.display()));
            match wait_ready(&mut child, port) {
                Ok(()) => {
                    let endpoint = format!("http://127.0.0.1:{port}");
                    return Moto {
                        client: client(&endpoint),
                        child,
                        endpoint,
                        log,
                    };
                }
                Err(problem) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    last_log = format!(
                        "{problem}\n--- moto log ---\n{}",
                        fs::read_to_string(&log).unwrap_or_default()
                    );
                    // Someone took the port between our probe and moto's bind: try another.
                    if !last_log.contains("in use") {
                        break;
                    }
                }
            }
        }
        let _ = fs::remove_file(&log);
        panic!("moto_server did not start:\n{last_log}");
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The settings that point a function's AWS SDK at this server: `AWS_ENDPOINT_URL`,
    /// `AWS_REGION` and dummy `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ENDPOINT_URL", self.endpoint.as_str()),
            ("AWS_REGION", MOTO_REGION),
            ("AWS_ACCESS_KEY_ID", DUMMY_KEY),
            ("AWS_SECRET_ACCESS_KEY", DUMMY_KEY),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }

    /// A Secrets Manager client for this server.
    pub fn client(&self) -> &aws_sdk_secretsmanager::Client {
        &self.client
    }

    /// Creates a secret whose `SecretString` is `value` as JSON; returns its ARN.
    pub async fn create_secret(&self, name: &str, value: &Value) -> String {
        let out = self
            .client
            .create_secret()
            .name(name)
            .secret_string(value.to_string())
            .send()
            .await
            .unwrap_or_else(|e| panic!("creating secret {name} in moto: {e:?}"));
        out.arn
            .unwrap_or_else(|| panic!("moto returned no ARN for secret {name}"))
    }

    /// A new current version of secret `id` (name or ARN), as a rotation would leave it.
    pub async fn put_secret(&self, id: &str, value: &Value) {
        self.client
            .put_secret_value()
            .secret_id(id)
            .secret_string(value.to_string())
            .send()
            .await
            .unwrap_or_else(|e| panic!("putting a new value of secret {id} in moto: {e:?}"));
    }
}

/// A versioned bucket in moto, as the template makes the documents bucket.
#[derive(Debug, Clone)]
pub struct MotoBucket {
    pub name: String,
    pub client: aws_sdk_s3::Client,
}

impl Moto {
    /// Creates bucket `name` with versioning on.
    pub async fn versioned_bucket(&self, name: &str) -> MotoBucket {
        use aws_sdk_s3::types::{
            BucketLocationConstraint, BucketVersioningStatus, CreateBucketConfiguration,
            VersioningConfiguration,
        };
        let config = aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(MOTO_REGION))
            .endpoint_url(&self.endpoint)
            .force_path_style(true)
            .credentials_provider(credentials())
            .build();
        let client = aws_sdk_s3::Client::from_conf(config);
        client
            .create_bucket()
            .bucket(name)
            .create_bucket_configuration(
                CreateBucketConfiguration::builder()
                    .location_constraint(BucketLocationConstraint::from(MOTO_REGION))
                    .build(),
            )
            .send()
            .await
            .unwrap_or_else(|e| panic!("creating bucket {name} in moto: {e:?}"));
        client
            .put_bucket_versioning()
            .bucket(name)
            .versioning_configuration(
                VersioningConfiguration::builder()
                    .status(BucketVersioningStatus::Enabled)
                    .build(),
            )
            .send()
            .await
            .unwrap_or_else(|e| panic!("turning versioning on for {name}: {e:?}"));
        MotoBucket {
            name: name.to_owned(),
            client,
        }
    }
}

impl MotoBucket {
    pub async fn put(&self, key: &str, body: impl Into<Vec<u8>>) {
        self.client
            .put_object()
            .bucket(&self.name)
            .key(key)
            .body(aws_sdk_s3::primitives::ByteStream::from(body.into()))
            .send()
            .await
            .unwrap_or_else(|e| panic!("putting {key}: {e:?}"));
    }

    pub async fn delete(&self, key: &str) {
        self.client
            .delete_object()
            .bucket(&self.name)
            .key(key)
            .send()
            .await
            .unwrap_or_else(|e| panic!("deleting {key}: {e:?}"));
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        // Best effort: never panic in Drop.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_file(&self.log);
    }
}

/// The client configuration is built here in full, so no process environment is read or set.
fn client(endpoint: &str) -> aws_sdk_secretsmanager::Client {
    let config = aws_sdk_secretsmanager::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(MOTO_REGION))
        .endpoint_url(endpoint)
        .credentials_provider(credentials())
        .build();
    aws_sdk_secretsmanager::Client::from_conf(config)
}

fn credentials() -> Credentials {
    Credentials::new(DUMMY_KEY, DUMMY_KEY, None, None, "parley-testkit")
}

fn server_path() -> PathBuf {
    if let Some(path) = std::env::var_os("PARLEY_MOTO_SERVER") {
        let path = PathBuf::from(path);
        if !path.is_file() {
            panic!(
                "PARLEY_MOTO_SERVER={} is not a file: point it at moto_server, or unset it and \
                 run `scripts/moto install`",
                path.display()
            );
        }
        return path;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/moto");
    let printed = Command::new(&script)
        .arg("bin")
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
        .filter(|path| path.is_file());
    printed.unwrap_or_else(|| {
        panic!(
            "moto_server (a local AWS Secrets Manager) is not installed: run `scripts/moto install` \
             (it installs moto[server] from PyPI into .parley/venv-moto), or set \
             PARLEY_MOTO_SERVER to a moto_server binary"
        )
    })
}

/// Until the port accepts connections; `Err` when the server exits or never gets there.
fn wait_ready(child: &mut Child, port: u16) -> Result<(), String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("moto_server exited ({status})"));
        }
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("moto_server not ready after {READY_TIMEOUT:?}"));
        }
        sleep(Duration::from_millis(100));
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("binding 127.0.0.1:0 to find a free port")
}
