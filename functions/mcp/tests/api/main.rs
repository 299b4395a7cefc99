//! Integration tests of the MCP function through its real HTTP surface, against a real
//! Postgres (see `parley-testkit`). One binary, so the crate links once.

mod approvals;
mod audit;
mod auth;
mod callers;
mod connections;
mod direct;
mod disconnects;
mod documents_access;
mod documents_filters;
mod embeddings;
mod helpers;
mod identity;
mod metrics;
mod pooler;
mod privileges;
mod protocol;
mod rerank;
mod resilience;
mod secrets;
mod sql_attacks;
mod sql_role;
mod sql_startup;
mod startup;
mod tool_keys;
mod tools;
mod users;
