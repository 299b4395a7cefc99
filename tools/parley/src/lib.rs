//! The `parley` admin command as a library: connecting to the database named by
//! `DATABASE_URL`, one module per subcommand under `cmd` (`cmd::audit::recent` reads the audit
//! trail), `eval` (scoring a search tool on labelled questions, shared with the bench), the
//! demo domains `demo-data` loads, the functions' login roles, and `admin`, the `parley-admin`
//! Lambda function that runs the same code for CloudFormation and `aws lambda invoke`.

pub mod admin;
pub mod cmd;
pub mod db;
pub mod demo;
pub mod eval;
pub mod logins;
