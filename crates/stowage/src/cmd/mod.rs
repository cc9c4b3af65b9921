//! One module per subcommand; each exposes its clap arguments and a `run`.
pub mod artifacts;
pub mod check_config;
pub mod demo;
pub mod serve;
pub mod sign_url;
pub mod transform;
