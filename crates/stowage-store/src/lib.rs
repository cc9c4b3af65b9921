//! Artifact stores: where offloaded bytes live.
//!
//! [`ArtifactStore`] is the async trait every backend implements; every store is also a
//! [`stowage_core::ArtifactSink`], which is all that producers see.
#![forbid(unsafe_code)]

pub use stowage_core::{ArtifactId, ArtifactRef, ArtifactScope, PutOptions, StoreError};
