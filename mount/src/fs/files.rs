//! Open files, as the kernel opens and reads them: an open pins the version
//! the inode has now (an archived one is refused) and picks how the kernel
//! keeps its pages (page cache, direct I/O, a passthrough backing file); a
//! read moves its handle's [`Readahead`] and takes its bytes from the cluster
//! reader, spliced into the kernel's pipe when it can be, else as the buffers
//! they are in.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use shoal::cluster::{Piped, Readahead};
use shoal::store::pipe::Pipe;

use super::handles::OpenFile;
use super::{Fs, FsError, Kind, Opened};
use crate::journal::Record;

/// A pipe a read's bytes may be spliced into, for the kernel.
pub struct PipeOut<'a> {
    pub pipe: &'a mut Pipe,
    /// Puts what goes before `n` bytes of data into the empty pipe.
    pub head: &'a (dyn Fn(&mut Pipe, usize) -> std::io::Result<()> + Sync),
}

/// Where a read's bytes are.
pub enum ReadOut {
    /// In these buffers.
    Parts(Vec<Bytes>),
    /// In the pipe it was given, after its head.
    Piped,
}

impl Fs {
    /// Opens a file, pinning the version it has now.
    pub async fn open(self: &Arc<Self>, ino: u64) -> Result<Opened, FsError> {
        let (path, kind) = self.ns.inodes.path(ino)?;
        if kind != Kind::File {
            return Err(FsError::IsDir);
        }
        let meta = match self.ns.inodes.fresh_meta(ino, self.opts.metadata_ttl) {
            Some(m) => m,
            None => self.ns.refresh_file(&path).await?,
        };
        if let Some(class) = meta.archived() {
            let key = self.ns.full_key(&path);
            if self.archived_told.lock().unwrap().insert(key.clone()) {
                tracing::warn!(
                    "s3://{}/{key} is archived ({class}) and not restored: restore it first (aws s3api restore-object), then read it",
                    self.opts.bucket
                );
            }
            return Err(FsError::Denied(format!("{key} is archived ({class})")));
        }
        let handle = self
            .reader
            .open(
                &self.opts.bucket,
                &self.ns.full_key(&path),
                Some(meta.clone()),
            )
            .await?;
        self.walks.visit(&path);
        let (mut keep_cache, mut direct_io) = self.ns.inodes.page_cache_mode(ino, &meta.etag);
        // A file other versions of which are open through the page cache is
        // read around it, never passed through.
        let backing = match &self.disk {
            Some(disk) if !direct_io && self.passthrough.is_on() => {
                let (disk, bucket, key) = (
                    disk.clone(),
                    self.opts.bucket.clone(),
                    self.ns.full_key(&path),
                );
                let (etag, size, bs) = (meta.etag.clone(), meta.size, self.reader.block_size());
                tokio::task::spawn_blocking(move || disk.whole(&bucket, &key, &etag, bs, size))
                    .await
                    .ok()
                    .flatten()
            }
            _ => None,
        };
        if backing.is_none()
            && self.ranges_direct.load(Relaxed)
            && shoal::formats::read_in_ranges(&path)
        {
            (keep_cache, direct_io) = (false, true);
        }
        let fh = self.handles.next();
        self.journal(Record::File {
            fh,
            ino,
            meta: meta.clone(),
        });
        self.handles.add_file(
            fh,
            OpenFile {
                handle,
                ino,
                ra: Mutex::new(Readahead::new(direct_io)),
                page_cache: !direct_io,
                streaming: Default::default(),
            },
        );
        Ok(Opened {
            fh,
            etag: meta.etag.clone(),
            backing,
            keep_cache,
            direct_io,
        })
    }

    /// `size` bytes at `offset` of open file `fh`: in `pipe`, after its head,
    /// when given one and the bytes could be spliced there; else as the buffers
    /// they are in (one per block the read touches; none at the end of the
    /// file). `cached`: the kernel keeps what it gets in its page cache (not an
    /// `O_DIRECT` reader), so its bytes may be spliced, and a whole block it
    /// takes need not stay in the RAM tier.
    pub async fn read(
        &self,
        fh: u64,
        offset: u64,
        size: u32,
        cached: bool,
        pipe: Option<PipeOut<'_>>,
    ) -> Result<ReadOut, FsError> {
        let f = self.handles.file(fh).ok_or(FsError::BadHandle)?;
        let bs = self.reader.block_size();
        let end = (offset + size as u64).min(f.handle.meta().size);
        if offset >= end {
            return Ok(ReadOut::Parts(Vec::new()));
        }
        // Bytes the page cache keeps pass through in a pipe, never into this
        // process (when no tier here holds their block). Not with a disk tier:
        // it is filled by the blocks that come through here.
        let page_cache = cached && f.page_cache;
        let pipe = pipe.filter(|_| {
            page_cache && self.opts.splice && self.disk.is_none() && self.reader.has_nodes()
        });
        let base = self.reader.read_window() as u64;
        let budget = self.reader.inflight_limit() as u64;
        // Blocks fetched ahead wait in the RAM tier, which keeps about the
        // in-flight budget's worth for them: the files read sequentially
        // share that, or each pushes out the others' before they are read
        // (and they are fetched again). Spliced reads fetch nothing here.
        let max = if pipe.is_some() {
            budget
        } else {
            (budget / self.handles.streams()).max(1)
        };
        let (ahead, sequential, first) = {
            let mut ra = f.ra.lock().unwrap();
            let (first, going) = (ra.is_fresh(), ra.sequential());
            let now = std::time::Instant::now();
            let ahead = ra.advance(offset, end, bs, base, max, now);
            // Spliced runs fetch nothing ahead here: not a share of it.
            self.handles.stream(&f, ra.sequential() && pipe.is_none());
            tracing::trace!(fh, offset, len = end - offset, ?ahead, "read");
            // Whole blocks for a run that was going before this read, or a read
            // of a block's size in one: a small read that starts a run costs its
            // bytes and one block ahead. And for reads inside the first block,
            // where a scan starts (its requests in any order): one block; not
            // with direct I/O, whose reads arrive as their reader made them (a
            // footer, then column chunks, each costing its bytes).
            let run = ra.sequential() && (going || end - offset >= bs);
            (ahead, run || (end <= bs && f.page_cache), first)
        };
        if first {
            if let Ok((path, _)) = self.ns.inodes.path(f.ino) {
                self.walks.first_read(&path, offset == 0);
            }
        }
        if let Some((from, count)) = ahead {
            self.stats.readahead_blocks.fetch_add(count, Relaxed);
            if pipe.is_some() {
                f.handle.warm(from, count);
            } else {
                f.handle.prefetch(from, count);
            }
        }
        self.stats.reads.fetch_add(1, Relaxed);
        let piped = match pipe {
            Some(out) => Some(self.read_piped(&f, offset, end, out).await),
            None => None,
        };
        let read = match piped {
            Some(Ok(Piped::Spliced { len, waited })) => {
                if waited {
                    f.ra.lock().unwrap().waited();
                }
                self.stats.read_bytes.fetch_add(len as u64, Relaxed);
                self.stats.spliced_reads.fetch_add(1, Relaxed);
                self.stats.spliced_bytes.fetch_add(len as u64, Relaxed);
                return Ok(ReadOut::Piped);
            }
            Some(Ok(Piped::Read(b))) => Ok(vec![b]),
            Some(Err(e)) => Err(e),
            // A direct-I/O reader's reads are what it wants: a block it
            // reads in part is not fetched whole around them (read-ahead
            // guesses past them, from what the nodes hold once they hold its
            // reads).
            Some(Ok(Piped::Declined)) | None if sequential && !f.page_cache => f
                .handle
                .read_exact_parts(offset, end - offset)
                .await
                .map(|p| {
                    if p.waited {
                        f.ra.lock().unwrap().waited();
                    }
                    p.parts
                }),
            Some(Ok(Piped::Declined)) | None if sequential => {
                f.handle.read_parts(offset, end - offset).await.map(|p| {
                    if p.waited {
                        f.ra.lock().unwrap().waited();
                    }
                    p.parts
                })
            }
            Some(Ok(Piped::Declined)) | None => f
                .handle
                .read_random(offset, end - offset)
                .await
                .map(|b| vec![b]),
        };
        match read {
            Ok(parts) => {
                // A whole block gone into the page cache is kept there: its
                // buffer is free again while still in the CPU's cache.
                if page_cache && offset.is_multiple_of(bs) && end - offset == bs {
                    f.handle.let_go(offset / bs);
                }
                let n: usize = parts.iter().map(Bytes::len).sum();
                self.stats.read_bytes.fetch_add(n as u64, Relaxed);
                Ok(ReadOut::Parts(parts))
            }
            Err(e) => {
                let err = FsError::from(e);
                if let FsError::Stale(why) = &err {
                    self.stats.stale_reads.fetch_add(1, Relaxed);
                    self.ns.inodes.forget_version(f.ino);
                    self.ns.forget_listings();
                    tracing::warn!(bucket = %self.opts.bucket, key = %f.handle.key(), "read refused: {why}");
                } else {
                    tracing::error!(bucket = %self.opts.bucket, key = %f.handle.key(), offset, "read failed: {err}");
                }
                Err(err)
            }
        }
    }

    /// `offset..end` through `out`'s pipe, headed for the kernel.
    async fn read_piped(
        &self,
        f: &OpenFile,
        offset: u64,
        end: u64,
        out: PipeOut<'_>,
    ) -> Result<Piped, shoal::cluster::ReadError> {
        if (out.head)(out.pipe, (end - offset) as usize).is_err() {
            let _ = out.pipe.clear();
            return Ok(Piped::Declined);
        }
        let r = f.handle.read_piped(offset, end - offset, out.pipe).await;
        if !matches!(r, Ok(Piped::Spliced { .. })) {
            let _ = out.pipe.clear();
        }
        r
    }

    pub fn release(&self, fh: u64) {
        self.handles.remove_file(fh);
        self.journal(Record::Closed { fh });
    }

    pub fn open_files(&self) -> usize {
        self.handles.open_files()
    }
}
