//! Rebuilds when a migration is added: `include_dir!` alone only notices edits to files it
//! already embedded.
fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
