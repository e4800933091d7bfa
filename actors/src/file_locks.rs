//! Per-file ordering: calls that touch one file, with a write among them, run one after the
//! other in arrival order; reads of one file run together.
//!
//! Files are keyed by identity (device + inode), so a symlink alias or a hard link shares the
//! lock of the file it names. A file that does not exist yet is keyed by its canonical path.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;

use actix::prelude::*;
use tokio::sync::oneshot;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FileKey {
    Inode { dev: u64, ino: u64 },
    Path(PathBuf),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Read,
    Write,
}

/// Lock every key at once (all or nothing, so two calls never deadlock on each other).
#[derive(Debug, Message)]
#[rtype(result = "oneshot::Receiver<FileGuard>")]
pub struct Lock {
    pub keys: Vec<FileKey>,
    pub mode: Mode,
}

#[derive(Debug, Message)]
#[rtype(result = "()")]
struct Unlock {
    id: u64,
}

/// Held while a call touches its files. Dropping it unlocks them.
#[derive(Debug)]
pub struct FileGuard {
    id: u64,
    locks: Option<Addr<FileLocks>>,
}

impl Drop for FileGuard {
    fn drop(&mut self) {
        if let Some(locks) = &self.locks {
            locks.do_send(Unlock { id: self.id });
        }
    }
}

#[derive(Default)]
struct Holders {
    readers: usize,
    writer: bool,
}

struct Request {
    id: u64,
    keys: Vec<FileKey>,
    mode: Mode,
    reply: oneshot::Sender<FileGuard>,
}

#[derive(Default)]
pub struct FileLocks {
    next_id: u64,
    held: HashMap<FileKey, Holders>,
    granted: HashMap<u64, (Vec<FileKey>, Mode)>,
    waiting: VecDeque<Request>,
}

impl FileLocks {
    fn compatible(&self, key: &FileKey, mode: Mode) -> bool {
        match self.held.get(key) {
            None => true,
            Some(h) => !h.writer && (mode == Mode::Read || h.readers == 0),
        }
    }

    fn grant(&mut self, req: Request, me: &Addr<Self>) {
        for key in &req.keys {
            let h = self.held.entry(key.clone()).or_default();
            match req.mode {
                Mode::Read => h.readers += 1,
                Mode::Write => h.writer = true,
            }
        }
        self.granted.insert(req.id, (req.keys, req.mode));
        let guard = FileGuard { id: req.id, locks: Some(me.clone()) };
        // If the caller is gone, dropping the guard here unlocks at once.
        let _ = req.reply.send(guard);
    }

    /// Grants waiting requests in order. A request may pass an earlier one only if they share
    /// no key where either writes, which keeps per-file arrival order.
    fn pump(&mut self, me: &Addr<Self>) {
        let mut blocked: Vec<(FileKey, Mode)> = Vec::new();
        let mut still = VecDeque::new();
        while let Some(req) = self.waiting.pop_front() {
            let conflicts_earlier = req
                .keys
                .iter()
                .any(|k| blocked.iter().any(|(bk, bm)| bk == k && (*bm == Mode::Write || req.mode == Mode::Write)));
            if !conflicts_earlier && req.keys.iter().all(|k| self.compatible(k, req.mode)) {
                self.grant(req, me);
            } else {
                blocked.extend(req.keys.iter().map(|k| (k.clone(), req.mode)));
                still.push_back(req);
            }
        }
        self.waiting = still;
    }
}

impl Actor for FileLocks {
    type Context = Context<Self>;
}

impl Handler<Lock> for FileLocks {
    type Result = MessageResult<Lock>;
    fn handle(&mut self, msg: Lock, ctx: &mut Context<Self>) -> Self::Result {
        let (tx, rx) = oneshot::channel();
        self.next_id += 1;
        let mut keys = msg.keys;
        keys.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
        keys.dedup();
        self.waiting.push_back(Request { id: self.next_id, keys, mode: msg.mode, reply: tx });
        self.pump(&ctx.address());
        MessageResult(rx)
    }
}

impl Handler<Unlock> for FileLocks {
    type Result = ();
    fn handle(&mut self, msg: Unlock, ctx: &mut Context<Self>) {
        if let Some((keys, mode)) = self.granted.remove(&msg.id) {
            for key in keys {
                if let Some(h) = self.held.get_mut(&key) {
                    match mode {
                        Mode::Read => h.readers = h.readers.saturating_sub(1),
                        Mode::Write => h.writer = false,
                    }
                    if h.readers == 0 && !h.writer {
                        self.held.remove(&key);
                    }
                }
            }
        }
        self.pump(&ctx.address());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn key(n: u64) -> FileKey {
        FileKey::Inode { dev: 1, ino: n }
    }

    async fn lock(l: &Addr<FileLocks>, keys: Vec<FileKey>, mode: Mode) -> oneshot::Receiver<FileGuard> {
        l.send(Lock { keys, mode }).await.expect("locks alive")
    }

    #[actix_rt::test]
    async fn readers_share_and_a_writer_waits_for_them() {
        let l = FileLocks::default().start();
        let r1 = lock(&l, vec![key(1)], Mode::Read).await.await.expect("r1");
        let r2 = lock(&l, vec![key(1)], Mode::Read).await.await.expect("r2");
        let mut w = lock(&l, vec![key(1)], Mode::Write).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(w.try_recv().is_err());
        drop(r1);
        drop(r2);
        w.await.expect("writer after readers");
    }

    #[actix_rt::test]
    async fn a_read_after_a_waiting_write_keeps_arrival_order() {
        let l = FileLocks::default().start();
        let r1 = lock(&l, vec![key(1)], Mode::Read).await.await.expect("r1");
        let w = lock(&l, vec![key(1)], Mode::Write).await;
        let mut r2 = lock(&l, vec![key(1)], Mode::Read).await;
        let other = lock(&l, vec![key(2)], Mode::Write).await;
        other.await.expect("another file is not held up");
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(r2.try_recv().is_err(), "read waits behind the earlier write");
        drop(r1);
        let w = w.await.expect("w");
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(r2.try_recv().is_err());
        drop(w);
        r2.await.expect("r2");
    }
}
