//! `parley enroll`: who may read a collection. Adds (or with `--remove`, removes) users by
//! their token's subject and groups by name; an enrollment is a membership. `--list` shows
//! who may read what, per collection.

use parley_ingest::Member;

use parley_core::config::Env;

use super::collections::{self, Listed};
use super::table::{aligned, one_line};
use super::{CmdError, Out};

#[derive(Debug, clap::Args)]
// `--list` is in the group so that it alone satisfies it; it conflicts with the members.
#[command(group = clap::ArgGroup::new("members").required(true).multiple(true))]
pub struct Args {
    /// The collection (as given to `parley ingest --collection`); with --list, only this one.
    #[arg(long, value_name = "NAME", required_unless_present = "list")]
    pub collection: Option<String>,
    /// A user, by the `sub` claim of their token; repeat for several.
    #[arg(long = "user", value_name = "SUB", group = "members")]
    pub users: Vec<String>,
    /// A group named in callers' `groups` or `cognito:groups` claim; repeat for several.
    #[arg(long = "group", value_name = "NAME", group = "members")]
    pub groups: Vec<String>,
    /// Remove these memberships instead of adding them.
    #[arg(long)]
    pub remove: bool,
    /// List who may read each collection (public, groups, users) instead of changing anything.
    #[arg(long, group = "members", conflicts_with_all = ["users", "groups", "remove"])]
    pub list: bool,
    /// With --list: one JSON object per line, for `jq`.
    #[arg(long, requires = "list")]
    pub json: bool,
}

pub async fn run(args: Args, env: &Env, out: &mut Out) -> Result<(), CmdError> {
    if args.list {
        let client = crate::db::connect(env).await?;
        let listed = collections::list(&client, args.collection.as_deref()).await?;
        let text = if args.json {
            listed
                .iter()
                .map(|c| format!("{}\n", readers_json(c)))
                .collect()
        } else if listed.is_empty() {
            "no collections; `parley ingest` makes one\n".to_owned()
        } else {
            readers_table(&listed)
        };
        out.write_all(text.as_bytes())?;
        return Ok(());
    }
    // clap requires --collection without --list.
    let collection = args.collection.unwrap_or_default();
    let members: Vec<Member> = args
        .users
        .into_iter()
        .map(Member::User)
        .chain(args.groups.into_iter().map(Member::Group))
        .collect();
    let client = crate::db::connect(env).await?;
    let changed = parley_ingest::enroll(&client, &collection, &members, args.remove).await?;
    let (verb, unchanged) = if args.remove {
        ("removed", "were not members")
    } else {
        ("added", "were already members")
    };
    writeln!(
        out,
        "{collection}: {changed} {verb}, {} {unchanged}",
        members.len() as u64 - changed
    )?;
    Ok(())
}

fn readers_json(c: &Listed) -> serde_json::Value {
    serde_json::json!({
        "collection": c.name,
        "public": c.public,
        "groups": c.groups,
        "users": c.users,
    })
}

/// Who may read: everyone for a public collection, else its members; a private collection
/// without members is readable by no caller, which the table says rather than leaving blank.
fn readers_table(listed: &[Listed]) -> String {
    let lines: Vec<Vec<String>> = std::iter::once(vec![
        "collection".to_owned(),
        "title".to_owned(),
        "readers".to_owned(),
    ])
    .chain(listed.iter().map(|c| {
        let readers = match (c.public, c.readers()) {
            (true, r) if r.is_empty() => "everyone (public)".to_owned(),
            (true, r) => format!("everyone (public); enrolled: {r}"),
            (false, r) if r.is_empty() => "no one yet (`parley enroll` adds readers)".to_owned(),
            (false, r) => r,
        };
        vec![c.name.clone(), one_line(&c.title), readers]
    }))
    .collect();
    aligned(&lines, &[])
}
