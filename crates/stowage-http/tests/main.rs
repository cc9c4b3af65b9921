//! stowage-http's integration tests, compiled and linked as one binary: each file below is a
//! module. One binary per crate instead of one per file keeps a cold build's disk use and
//! link time down (every test binary links the whole dependency graph); nextest still runs
//! each test in its own process, so the modules cannot share state.

mod auth;
mod routes;
