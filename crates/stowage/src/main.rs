//! The `stowage` command line: wiring only.
fn main() {}
