//! Integration tests of the chat function through its real HTTP surface: a real Postgres, the
//! real mcp function over HTTP, and a scripted OpenAI-compatible LLM (the only stand-in).

mod approvals;
mod callers;
mod catalog;
mod charts;
mod clients;
mod connections;
mod conversations;
mod cross_site;
mod feedback;
mod helpers;
mod identity;
mod logs;
mod manage;
mod metrics;
mod openai;
mod openai_approvals;
mod page;
mod pins;
mod pooler;
mod quota;
mod secrets;
mod sign_in;
mod sources;
mod sql;
mod startup;
mod storage;
mod streamed_approvals;
mod streaming;
mod tasks;
mod turns;
mod usage;
mod validation;
mod verified;
mod writes;
