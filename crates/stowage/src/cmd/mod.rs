//! One module per subcommand; each exposes its clap arguments and a `run`.
pub mod artifacts;
pub mod demo;
pub mod sign_url;
pub mod transform;
