//! Blobs held in memory, shared between owners by sha256 like on disk.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use sha2::{Digest, Sha256};
use stowage_core::StoreError;

use super::{
    BlobInfo, Blobs, BoxReader, Limit, Staged, TempSweep, extend_head, read_chunk, read_stream_error, sha256_hex_off_thread,
    stream_too_large,
};
use crate::Result;
use crate::mime::SNIFF_LEN;

#[derive(Debug, Default)]
pub(crate) struct MemoryBlobs {
    blobs: Mutex<HashMap<String, Bytes>>,
}

impl MemoryBlobs {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Bytes>> {
        self.blobs.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn get(&self, sha256: &str) -> Result<Bytes> {
        self.lock().get(sha256).cloned().ok_or_else(|| StoreError::backend("read blob", sha256, "blob is missing"))
    }
}

#[async_trait]
impl Blobs for MemoryBlobs {
    type Pending = Bytes;
    type Receipt = ();
    const DEPENDENCY: &'static str = "memory";

    async fn stage_bytes(&self, data: Bytes) -> Result<Staged<Bytes>> {
        Ok(Staged {
            sha256: sha256_hex_off_thread(data.clone()).await?,
            size: data.len() as u64,
            head: data.slice(..data.len().min(SNIFF_LEN)),
            pending: data,
        })
    }

    async fn stage_stream(&self, mut reader: BoxReader, limit: Limit) -> Result<Staged<Bytes>> {
        let mut all = BytesMut::new();
        let mut hasher = Sha256::new();
        loop {
            let chunk = read_chunk(&mut reader).await.map_err(read_stream_error)?;
            if chunk.is_empty() {
                break;
            }
            let seen = (all.len() + chunk.len()) as u64;
            if seen > limit.1 {
                return Err(stream_too_large(seen, limit));
            }
            hasher.update(&chunk);
            all.extend_from_slice(&chunk);
        }
        let data = all.freeze();
        let mut head = Vec::new();
        extend_head(&mut head, &data);
        Ok(Staged { sha256: hex::encode(hasher.finalize()), size: data.len() as u64, head: Bytes::from(head), pending: data })
    }

    async fn commit(&self, staged: Staged<Bytes>) -> Result<()> {
        self.lock().insert(staged.sha256, staged.pending);
        Ok(())
    }

    async fn read(&self, sha256: &str, range: Range<u64>) -> Result<Bytes> {
        let blob = self.get(sha256)?;
        super::check_range(&range, blob.len() as u64)?;
        Ok(blob.slice(range.start as usize..range.end as usize))
    }

    async fn open(&self, sha256: &str, range: Range<u64>) -> Result<BoxReader> {
        let bytes = self.read(sha256, range).await?;
        Ok(Box::pin(std::io::Cursor::new(bytes)))
    }

    async fn delete(&self, sha256: &str) -> Result<u64> {
        Ok(self.lock().remove(sha256).map_or(0, |b| b.len() as u64))
    }

    async fn size(&self, sha256: &str) -> Result<Option<u64>> {
        Ok(self.lock().get(sha256).map(|b| b.len() as u64))
    }

    async fn list(&self) -> Result<Vec<BlobInfo>> {
        // Only this process can write these blobs, and it does so under the engine's lock.
        Ok(self.lock().iter().map(|(k, v)| BlobInfo { sha256: k.clone(), size: v.len() as u64, recent: false }).collect())
    }

    async fn clean_temp(&self) -> Result<TempSweep> {
        // Puts are staged in memory: nothing survives a crash to be swept.
        Ok(TempSweep::default())
    }
}
