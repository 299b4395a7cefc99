//! Direct invocation (`aws lambda invoke --payload '{"command": ["audit", "--since", "1h"]}'`):
//! the argv is parsed by the `parley` command's own parser, run if its subcommand is on the
//! allow-list, and answered as `{"ok", "output", "error"}`: a refusal is an answer, not a crash.
//! Migrations and roles run as the owner, everything else as the routine login.

use clap::Parser;
use clap::error::ErrorKind;
use serde_json::{Value, json};

use super::Admin;
use crate::cmd::collections::Action;
use crate::cmd::{self, Cli, Command, catalog};

/// Lambda answers at most 6 MB; `audit --limit` can ask for more. The output is cut here,
/// saying so, rather than the invocation failing with a payload error.
const MAX_OUTPUT_BYTES: usize = 5 * 1024 * 1024;

/// The subcommands the function runs. Not `ingest`: it reads files, and the function has none
/// of the caller's (put them in the documents bucket, or run it from a machine that reaches the
/// database). `sync` reads the documents bucket. `catalog` for `index` (the scheduled rebuild of
/// the search index from the catalog file in S3) and `check`; not `init` or `refresh`, which
/// write a catalog file the function would throw away.
pub const ALLOWED: [&str; 8] = [
    "migrate",
    "demo-data",
    "collections",
    "enroll",
    "audit",
    "logins",
    "sync",
    "catalog",
];

/// The subcommands that change the schema or the roles, and so run as the database's owner
/// (`SECRET_IDS`); the rest of [`ALLOWED`] is routine work and runs as the
/// `ADMIN_ROUTINE_SECRET_ID` login (`parley_admin_ops`, migration 0025). `catalog` too: its
/// index reads the team's tables, which only the owner is sure to read, and writes
/// `parley.catalog_*`, which only the owner may.
pub const AS_OWNER: [&str; 4] = ["migrate", "demo-data", "logins", "catalog"];

pub fn is_command(event: &Value) -> bool {
    event.get("command").is_some()
}

/// The parsed command, or the answer that refuses it.
fn parse(event: &Value) -> Result<Command, Value> {
    let argv = match event.get("command") {
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect::<Option<Vec<String>>>(),
        _ => None,
    };
    let Some(argv) = argv else {
        return Err(answer(
            false,
            "",
            "\"command\" must be a list of strings, e.g. [\"audit\", \"--since\", \"1h\"]",
        ));
    };
    let cli = match Cli::try_parse_from(std::iter::once("parley".to_owned()).chain(argv)) {
        Ok(cli) => cli,
        // `--help` and `--version` are answers, not mistakes.
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            return Err(answer(true, &e.render().to_string(), ""));
        }
        Err(e) => return Err(answer(false, "", e.render().to_string().trim_end())),
    };
    if !ALLOWED.contains(&cli.command.name()) {
        return Err(answer(
            false,
            "",
            &format!(
                "`{}` cannot run in the function; it runs {}",
                cli.command.name(),
                ALLOWED.join(", ")
            ),
        ));
    }
    // The CLI asks for the name to be typed on its terminal; an invocation has none, so the
    // payload must say `--yes` itself rather than fail after connecting.
    if let Command::Collections(args) = &cli.command
        && let Some(Action::Remove(remove)) = &args.action
        && !remove.yes
    {
        return Err(answer(
            false,
            "",
            &format!(
                "`collections remove` asks for the name to be typed on a terminal, and the \
                 function has none: add \"--yes\" to remove {} without asking",
                remove.name
            ),
        ));
    }
    if let Command::Catalog(args) = &cli.command
        && let Some(verb) = match &args.action {
            catalog::Action::Init(_) => Some("init"),
            catalog::Action::Refresh(_) => Some("refresh"),
            catalog::Action::Check(_) | catalog::Action::Index(_) => None,
        }
    {
        return Err(answer(
            false,
            "",
            &format!(
                "`catalog {verb}` writes a catalog file, which the function would lose with its \
                 /tmp: run it where the file is kept (`parley catalog {verb}` on a machine that \
                 reaches the database), upload the file, and let the function run `catalog \
                 index s3://<bucket>/<key>`"
            ),
        ));
    }
    Ok(cli.command)
}

/// Runs the event's command; always an answer.
pub async fn handle(admin: &Admin, event: &Value) -> Value {
    let command = match parse(event) {
        Ok(command) => command,
        Err(refusal) => return refusal,
    };
    let name = command.name();
    let as_owner = AS_OWNER.contains(&name);
    tracing::info!(command = name, as_owner, "running a parley command");
    let mut output = Vec::new();
    let result = async {
        let env = if as_owner {
            admin.owner_env().await?
        } else {
            admin.routine_env().await?
        };
        cmd::run(command, &env, &mut output).await
    }
    .await;
    let output = cut(String::from_utf8_lossy(&output).into_owned());
    match result {
        Ok(()) => answer(true, &output, ""),
        Err(e) => {
            tracing::warn!(command = name, error = %e, "the command failed");
            answer(false, &output, &e.to_string())
        }
    }
}

fn answer(ok: bool, output: &str, error: &str) -> Value {
    json!({"ok": ok, "output": output, "error": error})
}

/// `text` cut to [`MAX_OUTPUT_BYTES`] at a character boundary, saying so.
fn cut(mut text: String) -> String {
    if text.len() <= MAX_OUTPUT_BYTES {
        return text;
    }
    let mut end = MAX_OUTPUT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str("\n(output cut at 5 MiB: narrow the command, e.g. audit --limit)\n");
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(event: Value) -> Value {
        parse(&event).expect_err("refused")
    }

    #[test]
    fn an_allowed_command_parses_with_its_arguments() {
        let command =
            parse(&json!({"command": ["enroll", "--collection", "handbook", "--group", "staff"]}))
                .expect("parsed");
        match command {
            Command::Enroll(args) => {
                assert_eq!(args.collection.as_deref(), Some("handbook"));
                assert_eq!(args.groups, ["staff"]);
            }
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn only_migrations_roles_and_the_catalog_run_as_the_owner() {
        assert!(AS_OWNER.iter().all(|name| ALLOWED.contains(name)));
        let routine: Vec<&str> = ALLOWED
            .into_iter()
            .filter(|name| !AS_OWNER.contains(name))
            .collect();
        assert_eq!(routine, ["collections", "enroll", "audit", "sync"]);
    }

    #[test]
    fn the_catalog_is_indexed_from_s3_as_the_owner() {
        let command = parse(
            &json!({"command": ["catalog", "index", "s3://team-config/parley/catalog.toml"]}),
        )
        .expect("parsed");
        assert!(AS_OWNER.contains(&command.name()));
        match command {
            Command::Catalog(catalog::Args {
                action: catalog::Action::Index(args),
            }) => assert_eq!(
                args.file.to_string(),
                "s3://team-config/parley/catalog.toml"
            ),
            other => panic!("parsed as {other:?}"),
        }
        assert!(
            parse(&json!({"command": ["catalog", "check", "/opt/chinook/catalog.toml"]})).is_ok()
        );
    }

    #[test]
    fn catalog_init_and_refresh_are_refused_because_their_file_would_be_lost() {
        let answer = refusal(json!({"command": ["catalog", "init", "--schema", "shop"]}));
        assert_eq!(answer["ok"], false);
        let error = answer["error"].as_str().unwrap();
        assert!(
            error
                .starts_with("`catalog init` writes a catalog file, which the function would lose"),
            "{error}"
        );
        assert!(
            error.contains("`catalog index s3://<bucket>/<key>`"),
            "{error}"
        );
        let answer = refusal(json!({"command": ["catalog", "refresh", "/tmp/catalog.toml"]}));
        assert!(
            answer["error"]
                .as_str()
                .unwrap()
                .starts_with("`catalog refresh` writes a catalog file")
        );
    }

    #[test]
    fn ingest_is_refused_because_the_function_has_no_files() {
        let answer = refusal(json!({"command": ["ingest", "--collection", "c", "docs/"]}));
        assert_eq!(answer["ok"], false);
        assert_eq!(
            answer["error"],
            "`ingest` cannot run in the function; it runs migrate, demo-data, collections, enroll, \
             audit, logins, sync, catalog"
        );
    }

    #[test]
    fn removing_a_collection_needs_yes_because_the_function_has_no_terminal() {
        let answer = refusal(json!({"command": ["collections", "remove", "handbook"]}));
        assert_eq!(answer["ok"], false);
        assert_eq!(
            answer["error"],
            "`collections remove` asks for the name to be typed on a terminal, and the function \
             has none: add \"--yes\" to remove handbook without asking"
        );
        let command = parse(&json!({"command": ["collections", "remove", "handbook", "--yes"]}))
            .expect("parsed");
        assert!(matches!(
            command,
            Command::Collections(cmd::collections::Args {
                action: Some(Action::Remove(cmd::collections::RemoveArgs {
                    yes: true,
                    ..
                })),
                ..
            })
        ));
    }

    #[test]
    fn bad_arguments_come_back_with_the_parsers_message() {
        let answer = refusal(json!({"command": ["audit", "--limit", "0"]}));
        assert_eq!(answer["ok"], false);
        let error = answer["error"].as_str().unwrap();
        assert!(
            error.starts_with("error: invalid value '0' for '--limit <N>'"),
            "{error}"
        );
        let answer = refusal(json!({"command": ["drop-everything"]}));
        assert!(
            answer["error"]
                .as_str()
                .unwrap()
                .contains("unrecognized subcommand 'drop-everything'")
        );
    }

    #[test]
    fn a_command_that_is_not_a_list_of_strings_is_refused_saying_what_is_expected() {
        for command in [json!("migrate"), json!(["audit", 3]), json!(null)] {
            let answer = refusal(json!({ "command": command }));
            assert_eq!(answer["ok"], false);
            assert!(
                answer["error"]
                    .as_str()
                    .unwrap()
                    .starts_with("\"command\" must be a list")
            );
        }
    }

    #[test]
    fn help_is_an_answer_not_an_error() {
        let answer = refusal(json!({"command": ["audit", "--help"]}));
        assert_eq!(answer["ok"], true);
        assert!(answer["output"].as_str().unwrap().contains("--since"));
    }

    #[test]
    fn long_output_is_cut_at_a_character_boundary_saying_so() {
        let text = "é".repeat(MAX_OUTPUT_BYTES);
        let cut = cut(text);
        assert!(cut.len() < MAX_OUTPUT_BYTES + 100);
        assert!(cut.ends_with("audit --limit)\n"));
    }
}
