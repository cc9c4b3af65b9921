//! stowage's integration tests, compiled and linked as one binary: each file below is a
//! module. One binary per crate instead of one per file keeps a cold build's disk use and
//! link time down (every test binary links the whole dependency graph); nextest still runs
//! each test in its own process, so the modules cannot share state.

mod hosts_support;
#[path = "support/load.rs"]
mod load;
mod raw_http;
#[path = "../../stowage-store/tests/support/mod.rs"]
mod store_support;

mod agent;
mod architecture;
mod artifacts_cli;
mod chaining_auto;
mod chaining_python;
mod demo_cli;
mod host_snippets;
mod host_spawned;
mod hosts;
mod playground;
mod reader_tools;
mod reading_loop;
mod real_hosts;
mod rmcp_client;
mod serve_auth;
mod serve_env;
mod serve_hostile;
mod serve_memory;
mod serve_shared;
mod serve_shutdown;
mod serve_startup;
mod setup_cli;
mod test_hooks;
mod transform_cli;
