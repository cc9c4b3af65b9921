//! The bundled demo server ([`stowage_demo`], written with the official `rmcp` SDK), run
//! in-process: what `stowage serve` fronts when no upstream is configured, with no binary to
//! find on a fresh machine.

use std::sync::Arc;

use crate::upstream::DemoFactory;

/// Starts a fresh in-process demo server per call and returns its pipe ends.
pub fn factory() -> DemoFactory {
    Arc::new(|| {
        let (ours, theirs) = tokio::io::duplex(1 << 20);
        let (their_read, their_write) = tokio::io::split(theirs);
        tokio::spawn(async move {
            if let Err(e) = stowage_demo::serve(their_read, their_write).await {
                tracing::warn!(target: "stowage::upstream", "demo server ended: {e}");
            }
        });
        let (our_read, our_write) = tokio::io::split(ours);
        (Box::new(our_read) as _, Box::new(our_write) as _)
    })
}
