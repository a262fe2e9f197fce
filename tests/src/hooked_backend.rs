//! A backend around another that lets a test act where timing decides:
//! right after a conversation log is opened (on an object store, when its
//! listing is taken) or looked up (`head`), and on every log opened for
//! appending (a wrapper that can slow or watch its appends). Everything else
//! is passed through.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use jpstore_blobstore::backend::{
    Backend, BackendError, Expect, Listed, LockGuard, LockKind, LogObject, Mapping, ObjectMeta,
    ObjectReader, Put, Upload, WriterClock,
};

/// What wraps each log opened for appending.
type LogWrapper = Box<dyn Fn(Box<dyn LogObject>) -> Box<dyn LogObject> + Send + Sync>;

/// Which opens of a log a hook follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogOpen {
    /// Opened to be read (`Backend::open`).
    Read,
    /// Opened to be appended to (`Backend::open_log`).
    Append,
}

/// A one-shot hook, and the opens it follows.
type Hook = (LogOpen, Box<dyn FnOnce() + Send>);

/// A one-shot hook, and how many lookups it lets pass first.
type HeadHook = (usize, Box<dyn FnOnce() + Send>);

/// A backend passing everything to `inner`, with the hooks of the module.
pub struct Hooked {
    inner: Arc<dyn Backend>,
    after_log_open: Mutex<Option<Hook>>,
    after_log_head: Mutex<Option<HeadHook>>,
    wrap_log: Option<LogWrapper>,
}

impl std::fmt::Debug for Hooked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooked")
            .field("inner", &self.inner)
            .finish()
    }
}

impl Hooked {
    /// `inner`, without hooks.
    pub fn new(inner: Arc<dyn Backend>) -> Hooked {
        Hooked {
            inner,
            after_log_open: Mutex::new(None),
            after_log_head: Mutex::new(None),
            wrap_log: None,
        }
    }

    /// Every log opened for appending is wrapped by `wrap`.
    pub fn wrapping_logs(
        mut self,
        wrap: impl Fn(Box<dyn LogObject>) -> Box<dyn LogObject> + Send + Sync + 'static,
    ) -> Hooked {
        self.wrap_log = Some(Box::new(wrap));
        self
    }

    /// Runs `f` once, right after the next open of a conversation log of
    /// kind `open` has returned from the inner backend, before the caller
    /// gets the handle.
    pub fn after_next_log_open(&self, open: LogOpen, f: impl FnOnce() + Send + 'static) {
        *self
            .after_log_open
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some((open, Box::new(f)));
    }

    /// Runs `f` once, right after the lookup (`head`) of a conversation
    /// log that comes after `skip` others has returned from the inner
    /// backend, before the caller gets its answer.
    pub fn after_log_head(&self, skip: usize, f: impl FnOnce() + Send + 'static) {
        *self
            .after_log_head
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some((skip, Box::new(f)));
    }

    fn opened(&self, key: &Path, open: LogOpen) {
        if key.file_name().is_none_or(|n| n != "events.log") {
            return;
        }
        let hook = {
            let mut armed = self
                .after_log_open
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            match armed.take() {
                Some((kind, f)) if kind == open => Some(f),
                other => {
                    *armed = other;
                    None
                }
            }
        };
        if let Some(f) = hook {
            f();
        }
    }
}

impl Backend for Hooked {
    fn display(&self, key: &Path) -> PathBuf {
        self.inner.display(key)
    }
    fn put_if_absent(&self, key: &Path, data: &[u8], scratch: &Path) -> Result<Put, BackendError> {
        self.inner.put_if_absent(key, data, scratch)
    }
    fn upload(&self, scratch: &Path) -> Result<Box<dyn Upload>, BackendError> {
        self.inner.upload(scratch)
    }
    fn open(&self, key: &Path) -> io::Result<Box<dyn ObjectReader>> {
        let opened = self.inner.open(key)?;
        self.opened(key, LogOpen::Read);
        Ok(opened)
    }
    fn map(&self, key: &Path) -> io::Result<Mapping> {
        self.inner.map(key)
    }
    fn head(&self, key: &Path) -> io::Result<ObjectMeta> {
        let meta = self.inner.head(key);
        if key.file_name().is_some_and(|n| n == "events.log") {
            let hook = {
                let mut armed = self
                    .after_log_head
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                match armed.take() {
                    Some((0, f)) => Some(f),
                    Some((skip, f)) => {
                        *armed = Some((skip - 1, f));
                        None
                    }
                    None => None,
                }
            };
            if let Some(f) = hook {
                f();
            }
        }
        meta
    }
    fn list_objects_below(&self, prefix: &Path) -> io::Result<Vec<(PathBuf, ObjectMeta)>> {
        self.inner.list_objects_below(prefix)
    }
    fn list(&self, prefix: &Path) -> io::Result<Vec<Listed>> {
        self.inner.list(prefix)
    }
    fn delete(&self, keys: &[PathBuf]) -> Result<usize, BackendError> {
        self.inner.delete(keys)
    }
    fn replace(
        &self,
        key: &Path,
        data: &[u8],
        scratch: &Path,
        expect: Expect,
        durable: bool,
    ) -> Result<(), BackendError> {
        self.inner.replace(key, data, scratch, expect, durable)
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<(), BackendError> {
        self.inner.rename(from, to)
    }
    fn open_log(&self, key: &Path) -> io::Result<Box<dyn LogObject>> {
        let log = self.inner.open_log(key)?;
        self.opened(key, LogOpen::Append);
        Ok(match &self.wrap_log {
            Some(wrap) => wrap(log),
            None => log,
        })
    }
    fn lock(
        &self,
        name: &Path,
        kind: LockKind,
        wait: bool,
    ) -> io::Result<Option<Box<dyn LockGuard>>> {
        self.inner.lock(name, kind, wait)
    }
    fn lock_to_read(
        &self,
        name: &Path,
        kind: LockKind,
        wait: bool,
    ) -> io::Result<Option<Box<dyn LockGuard>>> {
        self.inner.lock_to_read(name, kind, wait)
    }
    fn touch(&self, key: &Path) -> io::Result<bool> {
        self.inner.touch(key)
    }
    fn create_prefix(&self, dir: &Path) -> Result<(), BackendError> {
        self.inner.create_prefix(dir)
    }
    fn sync_prefix(&self, dir: &Path) -> Result<(), BackendError> {
        self.inner.sync_prefix(dir)
    }
    fn sync_object(&self, key: &Path) -> Result<(), BackendError> {
        self.inner.sync_object(key)
    }
    fn remove_prefix(&self, dir: &Path) -> io::Result<()> {
        self.inner.remove_prefix(dir)
    }
    fn renames_in_one_step(&self) -> bool {
        self.inner.renames_in_one_step()
    }
    fn locks_span_writers(&self) -> bool {
        self.inner.locks_span_writers()
    }
    fn writer_clock(&self) -> Option<&Arc<WriterClock>> {
        self.inner.writer_clock()
    }
}
