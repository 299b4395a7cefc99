//! The `parley` admin command as a library: connecting to the database named by
//! `DATABASE_URL`, one module per subcommand under `cmd` (`cmd::audit::recent` reads the audit
//! trail), and the demo domains `demo-data` loads.

pub mod cmd;
pub mod db;
pub mod demo;
