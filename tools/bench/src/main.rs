//! `parley-bench`: rerunnable loopback benchmarks of Parley's functions, one subcommand per
//! function (`mcp`, `chat`), one for documents end to end (`docs`) and one for the built-in
//! model's ingestion throughput alone (`embed`). Results go to stdout as
//! a plain-text table, progress to stderr.

mod catalog;
mod chat;
mod curve;
mod docs;
mod embed;
mod mcp;
mod mcp_client;
mod measure;
mod peers;
mod s3;
mod server;
mod setup;
mod sql_audit;
mod stubs;
mod tasks;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "parley-bench",
    about = "Benchmarks Parley's functions on loopback"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// `tools/call` latency and throughput of the MCP function against a raw-query floor.
    Mcp(mcp::Args),
    /// Chat turns with one tool call each against an instant LLM: the chat function's own time
    /// per turn, MCP requests per turn, throughput and memory.
    Chat(chat::Args),
    /// Documents: ingestion of the PostgreSQL manual, query embedding, search_documents
    /// latency at the manual's size and at 1M synthetic chunks, mcp cold start with the model,
    /// and retrieval quality (recall@5, MRR@10) of hybrid search against its branches alone.
    Docs(docs::Args),
    /// One ingest instance's throughput on PDFs from S3 (moto): pages/s and chunks/s, and what
    /// 100,000 pages take at a given concurrency and cost.
    S3(s3::Args),
    /// The built-in model's throughput on ingestion batches of manual chunks (chunks/s).
    Embed(embed::Args),
    /// The semantic catalog's tools at 500 tables, 10,000 columns and 1M values:
    /// search_catalog (embedding and SQL) and find_values latency.
    Catalog(catalog::Args),
    /// The concurrency curve: N mcp processes with one connection each, straight to Postgres
    /// and through PgBouncer in transaction mode: throughput, latency, errors, connections.
    Curve(curve::Args),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // One thread drives both the HTTP client and the floor's connections, so the client side
    // costs the same for both and takes as little CPU as possible from the server and Postgres
    // that share this machine.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    match cli.command {
        Command::Mcp(args) => runtime.block_on(mcp::run(args)),
        Command::Chat(args) => runtime.block_on(chat::run(args)),
        Command::Docs(args) => runtime.block_on(docs::run(args)),
        Command::S3(args) => runtime.block_on(s3::run(args)),
        Command::Embed(args) => runtime.block_on(embed::run(args)),
        Command::Curve(args) => runtime.block_on(curve::run(args)),
        Command::Catalog(args) => runtime.block_on(catalog::run(args)),
    }
}
