//! The S3 calls ingestion makes: an object's current content streamed to a file (never held
//! whole in memory), and a prefix listed. Errors say whether trying again could help: a
//! throttle, a 5xx or a lost connection could; a refusal (403, a bad request) could not.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::operation::get_object::GetObjectError;
use parley_core::config::Env;
use tokio::io::AsyncWriteExt;

/// A failed S3 call.
#[derive(Debug, thiserror::Error)]
#[error("{step}: {message}")]
pub struct S3CallError {
    pub step: String,
    pub message: String,
    /// A retry could succeed (throttled, 5xx, timeout, connection lost).
    pub transient: bool,
}

/// An S3 client for the documents bucket.
#[derive(Debug, Clone)]
pub struct Bucket {
    client: aws_sdk_s3::Client,
}

/// What an object holds now.
#[derive(Debug)]
pub enum Fetched {
    /// No such key (deleted, or a delete marker is its current version).
    Missing,
    /// Larger than the limit: not downloaded.
    TooBig {
        size: u64,
    },
    Object(Downloaded),
}

/// An object written to a file.
#[derive(Debug)]
pub struct Downloaded {
    pub path: PathBuf,
    pub version_id: Option<String>,
    pub etag: Option<String>,
    pub size: u64,
    /// The object's user metadata (`x-amz-meta-*`), stored with the document.
    pub metadata: HashMap<String, String>,
}

/// One key of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub key: String,
    pub etag: Option<String>,
    pub size: u64,
}

impl Bucket {
    /// A client from the AWS settings in `env` (`AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL`
    /// point it at a local S3 such as moto; then buckets are addressed by path, as local
    /// servers expect).
    pub async fn from_env(env: &Env) -> Bucket {
        let shared = parley_core::aws::sdk_config(env, "AWS_ENDPOINT_URL_S3").await;
        let local =
            env.get("AWS_ENDPOINT_URL_S3").is_some() || env.get("AWS_ENDPOINT_URL").is_some();
        let config = aws_sdk_s3::config::Builder::from(&shared)
            .force_path_style(local)
            .build();
        Bucket {
            client: aws_sdk_s3::Client::from_conf(config),
        }
    }

    /// The object's current version written to `dir/rel` (directories made), unless it is
    /// missing or larger than `max_bytes`. The body is streamed: no more than one network
    /// chunk is in memory, and the write stops one byte past the limit whatever the size said.
    pub async fn fetch(
        &self,
        bucket: &str,
        key: &str,
        dir: &Path,
        rel: &str,
        max_bytes: u64,
    ) -> Result<Fetched, S3CallError> {
        let out = match self
            .client
            .get_object()
            .bucket(bucket)
            .key(key)
            .send()
            .await
        {
            Ok(out) => out,
            Err(e) => {
                if let SdkError::ServiceError(se) = &e
                    && matches!(se.err(), GetObjectError::NoSuchKey(_))
                {
                    return Ok(Fetched::Missing);
                }
                // Some servers answer a missing key's GET with a bare 404.
                if e.raw_response().is_some_and(|r| r.status().as_u16() == 404) {
                    return Ok(Fetched::Missing);
                }
                return Err(call_error("reading the object", e));
            }
        };
        let size = out.content_length().unwrap_or(0).max(0) as u64;
        if size > max_bytes {
            return Ok(Fetched::TooBig { size });
        }
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| io_error("making the temporary folder", e))?;
        }
        let mut file = tokio::fs::File::create(&path)
            .await
            .map_err(|e| io_error("creating the temporary file", e))?;
        let version_id = out.version_id().map(str::to_owned);
        let etag = out.e_tag().map(str::to_owned);
        let metadata = out.metadata().cloned().unwrap_or_default();
        let mut body = out.body;
        let mut written: u64 = 0;
        while let Some(chunk) = body.try_next().await.map_err(|e| S3CallError {
            step: "reading the object's body".into(),
            message: e.to_string(),
            transient: true,
        })? {
            written += chunk.len() as u64;
            if written > max_bytes {
                return Ok(Fetched::TooBig { size: written });
            }
            file.write_all(&chunk)
                .await
                .map_err(|e| io_error("writing the temporary file", e))?;
        }
        file.flush()
            .await
            .map_err(|e| io_error("writing the temporary file", e))?;
        Ok(Fetched::Object(Downloaded {
            path,
            version_id,
            etag,
            size: written,
            metadata,
        }))
    }

    /// Every key under `prefix`, in key order.
    pub async fn list(&self, bucket: &str, prefix: &str) -> Result<Vec<Listed>, S3CallError> {
        let mut listed = Vec::new();
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(bucket)
            .prefix(prefix)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| call_error("listing the prefix", e))?;
            for o in page.contents() {
                if let Some(key) = o.key() {
                    listed.push(Listed {
                        key: key.to_owned(),
                        etag: o.e_tag().map(str::to_owned),
                        size: o.size().unwrap_or(0).max(0) as u64,
                    });
                }
            }
        }
        Ok(listed)
    }
}

fn call_error<E>(step: &str, e: SdkError<E, HttpResponse>) -> S3CallError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let status = e.raw_response().map(|r| r.status().as_u16());
    let transient = match &e {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            true
        }
        _ => status.is_none_or(|s| s >= 500 || s == 429 || s == 408),
    };
    let message = match (e.code(), e.message()) {
        (Some(code), Some(m)) => format!("{code}: {m}"),
        (Some(code), None) => code.to_owned(),
        _ => match status {
            Some(s) => format!("HTTP {s}"),
            None => aws_sdk_s3::error::DisplayErrorContext(&e).to_string(),
        },
    };
    S3CallError {
        step: step.into(),
        message,
        transient,
    }
}

fn io_error(step: &str, e: std::io::Error) -> S3CallError {
    // A full /tmp is the function's configuration (its ephemeral storage), not the object's.
    S3CallError {
        step: step.into(),
        message: e.to_string(),
        transient: true,
    }
}
