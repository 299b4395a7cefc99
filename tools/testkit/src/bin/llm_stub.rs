//! `parley-llm-stub`: the testkit's scripted LLM as a process, for the runners that are not
//! Rust (tests/lambda, tests/page). Serves a script file on a loopback port, prints its base
//! URL on stdout, appends each request to a log when asked, and runs until it is killed.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use parley_testkit::llm::{ScriptError, ScriptFile, ScriptedLlm};

const USAGE: &str = "usage: parley-llm-stub --script FILE [--port N] [--requests FILE] [--pace-ms N] [--url-file FILE]

Serves the script FILE (JSON; see parley_testkit::llm::ScriptFile) as an OpenAI-compatible LLM
on 127.0.0.1:N (0, the default: any free port), prints `http://127.0.0.1:PORT/v1` (the
LLM_BASE_URL to give the chat) as its first line on stdout, and serves until killed.
  --requests FILE  append each request body to FILE as one JSON line, before answering it
  --pace-ms N      write streamed pieces N ms apart (overrides the script's pace.every_ms)
  --url-file FILE  also write the base URL to FILE, whole (renamed into place) once serving";

#[derive(Debug, thiserror::Error)]
enum StubError {
    #[error("{0}\n\n{USAGE}")]
    Usage(String),
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Script { path: PathBuf, source: ScriptError },
    #[error("binding 127.0.0.1:{port}: {source}")]
    Bind { port: u16, source: std::io::Error },
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

struct Args {
    script: PathBuf,
    port: u16,
    requests: Option<PathBuf>,
    pace_ms: Option<u64>,
    url_file: Option<PathBuf>,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, StubError> {
    let (mut script, mut port, mut requests, mut pace_ms, mut url_file) =
        (None, 0, None, None, None);
    while let Some(flag) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| StubError::Usage(format!("{flag} needs a value")))
        };
        match flag.as_str() {
            "--script" => script = Some(PathBuf::from(value()?)),
            "--requests" => requests = Some(PathBuf::from(value()?)),
            "--url-file" => url_file = Some(PathBuf::from(value()?)),
            "--port" => {
                port = value()?
                    .parse()
                    .map_err(|_| StubError::Usage("--port takes a port number".into()))?;
            }
            "--pace-ms" => {
                pace_ms = Some(
                    value()?
                        .parse()
                        .map_err(|_| StubError::Usage("--pace-ms takes milliseconds".into()))?,
                );
            }
            "-h" | "--help" => return Err(StubError::Usage("help".into())),
            other => return Err(StubError::Usage(format!("unknown argument {other}"))),
        }
    }
    Ok(Args {
        script: script.ok_or_else(|| StubError::Usage("--script is required".into()))?,
        port,
        requests,
        pace_ms,
        url_file,
    })
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("parley-llm-stub: {e}");
            ExitCode::from(2)
        }
    }
}

async fn run() -> Result<(), StubError> {
    let args = parse_args(std::env::args().skip(1))?;
    let text = std::fs::read_to_string(&args.script).map_err(|source| StubError::Read {
        path: args.script.clone(),
        source,
    })?;
    let mut file = ScriptFile::parse(&text).map_err(|source| StubError::Script {
        path: args.script.clone(),
        source,
    })?;
    if let Some(ms) = args.pace_ms {
        file.pace.every = Duration::from_millis(ms);
    }
    let llm = ScriptedLlm::serve(file.plan, args.port)
        .await
        .map_err(|source| StubError::Bind {
            port: args.port,
            source,
        })?;
    llm.set_pacing(file.pace);
    llm.set_usage(file.usage);
    if let Some(path) = args.requests {
        llm.observe(move |request| {
            let appended = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .and_then(|mut f| writeln!(f, "{request}"));
            if let Err(e) = appended {
                eprintln!("parley-llm-stub: appending to {}: {e}", path.display());
            }
        });
    }
    if let Some(path) = args.url_file {
        // Renamed into place, so a runner polling for the file never reads half a URL.
        let partial = path.with_extension("partial");
        std::fs::write(&partial, format!("{}\n", llm.base_url()))
            .and_then(|()| std::fs::rename(&partial, &path))
            .map_err(|source| StubError::Write { path, source })?;
    }
    // After the file: a runner that read the line may read the file.
    println!("{}", llm.base_url());
    let _ = std::io::stdout().flush();
    std::future::pending::<()>().await;
    Ok(())
}
