//! What both benches set up the same way: the bench database (created, migrated and loaded
//! with demo data), a plain connection to it, the machine line of a report, and a unique
//! suffix for per-run secrets.

use anyhow::{Context, bail};
use serde_json::{Value, json};
use tokio_postgres::NoTls;

/// Creates (if needed), migrates and loads the bench database (every demo domain); returns its
/// URL and the server's version.
pub async fn prepare_database(
    admin_url: &str,
    name: &str,
    feedback: u64,
) -> anyhow::Result<(String, String)> {
    let (bench_url, mut client) = create_database(admin_url, name).await?;
    eprintln!(
        "loading the demo domains, {feedback} feedback rows (skipped when already loaded)..."
    );
    let options = parley_cli::demo::DemoOptions {
        feedback,
        ..Default::default()
    };
    let summary = parley_cli::demo::load(&mut client, &options)
        .await
        .context("loading demo data")?;
    if let Some(feedback) = &summary.feedback {
        eprintln!(
            "feedback: {} rows ({} in {:.1} s)",
            feedback.feedback,
            if feedback.reloaded {
                "loaded"
            } else {
                "already there, checked"
            },
            summary.elapsed.as_secs_f64()
        );
    }
    let version: String = client.query_one("SHOW server_version", &[]).await?.get(0);
    Ok((bench_url, version))
}

/// Creates database `name` next to the one `admin_url` names (a superuser's) if missing, and
/// migrates it; returns its URL and a connection to it.
pub async fn create_database(
    admin_url: &str,
    name: &str,
) -> anyhow::Result<(String, tokio_postgres::Client)> {
    // The name is spliced into CREATE DATABASE, so only plain identifiers are accepted.
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        bail!("--database must be lowercase letters, digits and _");
    }
    let mut url = url::Url::parse(admin_url).context("DATABASE_URL must be a postgres:// URL")?;
    let admin = connect(admin_url)
        .await
        .context("connecting to DATABASE_URL")?;
    let exists: bool = admin
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)",
            &[&name],
        )
        .await?
        .get(0);
    if !exists {
        eprintln!("creating database {name}");
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .with_context(|| {
                format!("creating database {name} (DATABASE_URL must be a superuser)")
            })?;
    }
    drop(admin);
    url.set_path(&format!("/{name}"));
    let bench_url = url.to_string();

    let mut client = connect(&bench_url)
        .await
        .with_context(|| format!("connecting to {name}"))?;
    let applied = parley_core::migrate::run(&mut client)
        .await
        .context("migrating")?;
    if !applied.is_empty() {
        eprintln!("applied migrations: {}", applied.join(", "));
    }
    Ok((bench_url, client))
}

/// `DATABASE_URL`, which the benches need to be a superuser's (they create databases).
pub fn admin_url() -> anyhow::Result<String> {
    std::env::var("DATABASE_URL")
        .context("DATABASE_URL is not set; point it at a Postgres superuser (scripts/bench does)")
}

/// How this run was started, for the report.
pub fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

/// Writes a report's JSON (`--json`).
pub fn write_json(path: &std::path::Path, json: &Value) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(json)?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

pub async fn connect(url: &str) -> anyhow::Result<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("error: lost a database connection: {e}");
        }
    });
    Ok(client)
}

pub fn now_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

pub struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    pub memory_gib: f64,
}

impl Machine {
    /// The report's machine line; `sharing` names what runs on it besides the client.
    pub fn line(&self, sharing: &str) -> String {
        format!(
            "machine: {} CPUs ({}), {:.0} GiB; {sharing} share it",
            self.cpus, self.cpu_model, self.memory_gib
        )
    }

    pub fn to_json(&self) -> Value {
        json!({ "cpus": self.cpus, "cpu_model": self.cpu_model, "memory_gib": self.memory_gib })
    }
}

pub fn machine() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let field = |text: &str, name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_owned())
    };
    Machine {
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        cpu_model: field(&cpuinfo, "model name").unwrap_or_else(|| "unknown CPU".into()),
        memory_gib: field(&meminfo, "MemTotal")
            .and_then(|v| v.trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(0.0, |kib| kib / 1024.0 / 1024.0),
    }
}
