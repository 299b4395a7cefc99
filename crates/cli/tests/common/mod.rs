//! What both test binaries of the `parley` command need to read its runs.

use std::process::Output;

/// The run's standard output, after checking it exited 0 (its stderr in the failure message).
pub fn stdout_of(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
