//! `parley enroll`: who may read a collection. Adds (or with `--remove`, removes) users by
//! their token's subject and groups by name; an enrollment is a membership.

use parley_ingest::Member;

use parley_core::config::Env;

use super::{CmdError, Out};

#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("members").required(true).multiple(true))]
pub struct Args {
    /// The collection (as given to `parley ingest --collection`).
    #[arg(long, value_name = "NAME")]
    pub collection: String,
    /// A user, by the `sub` claim of their token; repeat for several.
    #[arg(long = "user", value_name = "SUB", group = "members")]
    pub users: Vec<String>,
    /// A group named in callers' `groups` or `cognito:groups` claim; repeat for several.
    #[arg(long = "group", value_name = "NAME", group = "members")]
    pub groups: Vec<String>,
    /// Remove these memberships instead of adding them.
    #[arg(long)]
    pub remove: bool,
}

pub async fn run(args: Args, env: &Env, out: &mut Out) -> Result<(), CmdError> {
    let members: Vec<Member> = args
        .users
        .into_iter()
        .map(Member::User)
        .chain(args.groups.into_iter().map(Member::Group))
        .collect();
    let client = crate::db::connect(env).await?;
    let changed = parley_ingest::enroll(&client, &args.collection, &members, args.remove).await?;
    let (verb, unchanged) = if args.remove {
        ("removed", "were not members")
    } else {
        ("added", "were already members")
    };
    writeln!(
        out,
        "{}: {changed} {verb}, {} {unchanged}",
        args.collection,
        members.len() as u64 - changed
    )?;
    Ok(())
}
