//! What writers that failed or were stopped leave behind outside the blob
//! store (format-spec.md 4.7, "Leftovers"): a conversation directory whose
//! log was never published (a creation that failed on a full disk, or was
//! killed), a directory `conversations/.removed-*` (a removal stopped after
//! it moved the conversation aside), and temp files of logs, head caches,
//! quarantine copies and notes, and `config.toml`. None of them is ever
//! read, listed as a conversation or marked by gc; they only take room.
//! fsck reports them ([`find`]); gc removes those older than its grace
//! period ([`remove`]), a directory without a log only while it holds the
//! directory's writer lock, so a creation still running keeps its own.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use jpstore_blobstore::backend::{Backend, ListedEntry};

use crate::conversation::{
    clear_locked_dir, ConversationId, CONVERSATIONS_DIR, LOG_FILE, QUARANTINE_DIR, REMOVED_PREFIX,
};
use crate::error::{Error, Result};
use crate::log::try_lock;

/// What a leftover is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeftoverKind {
    /// A directory named like a conversation that holds no log: a creation
    /// that failed or was stopped before it published the log.
    Unpublished,
    /// A directory `conversations/.removed-*`: a removal stopped after it
    /// moved the conversation aside.
    StoppedRemoval,
    /// A temp file (`<name>.tmp.<pid>…`) of a writer that was stopped.
    Temp,
}

impl LeftoverKind {
    /// What it is, for a person.
    pub fn describe(self) -> &'static str {
        match self {
            LeftoverKind::Unpublished => {
                "a conversation directory without a log (a creation that failed, on a full disk say, or was stopped before it published the log)"
            }
            LeftoverKind::StoppedRemoval => {
                "a conversation moved aside by a removal that was stopped before it deleted it"
            }
            LeftoverKind::Temp => "a temp file of a writer that was stopped",
        }
    }
}

/// One leftover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    /// The file or directory, relative to the store root.
    pub key: PathBuf,
    /// What it is.
    pub kind: LeftoverKind,
    /// Bytes it holds (a directory: of every object below it).
    pub bytes: u64,
    /// When it was last written (a directory: the newest object below
    /// it; `None` for a directory that holds no object).
    pub modified: Option<SystemTime>,
}

impl Leftover {
    /// Whether it was written within `grace` of `now` (or later).
    pub fn young(&self, now: SystemTime, grace: Duration) -> bool {
        self.modified
            .is_some_and(|m| now.duration_since(m).map_or(true, |age| age < grace))
    }
}

/// Whether `name` is a temp name of the store's writers outside the blob
/// store: `<name>.tmp.<pid>` and what follows (no conversation id, and no
/// name the store keeps, holds a `.`-separated `tmp` followed by digits).
pub(crate) fn is_temp_name(name: &str) -> bool {
    name.match_indices(".tmp.").any(|(at, m)| {
        name[at + m.len()..]
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_digit())
    })
}

/// Lists `dir`; a directory that cannot be listed (missing, or a node
/// that is not one: fsck's layout walk reports those) as empty, since
/// leftovers are only ever removed, never needed.
fn list(backend: &dyn Backend, dir: &Path) -> Vec<jpstore_blobstore::backend::Listed> {
    backend.list(dir).unwrap_or_default()
}

/// The temp files among `entries` of `dir`.
fn temps_in(dir: &Path, entries: &[jpstore_blobstore::backend::Listed], out: &mut Vec<Leftover>) {
    for e in entries {
        if let (ListedEntry::Object(meta), true) = (&e.entry, is_temp_name(&e.name)) {
            out.push(Leftover {
                key: dir.join(&e.name),
                kind: LeftoverKind::Temp,
                bytes: meta.len,
                modified: Some(meta.modified),
            });
        }
    }
}

/// A directory as a leftover of `kind`: its bytes and newest time; `None`
/// if what is below it cannot be listed, or if it holds no object on an
/// object store (where a prefix is only its objects: some servers, such as
/// SeaweedFS, still list one whose objects are all gone, and there is
/// nothing to remove).
fn dir_leftover(backend: &dyn Backend, dir: PathBuf, kind: LeftoverKind) -> Option<Leftover> {
    // One level, as a conversation's directory is kept (an object store
    // lists a log as one object).
    let entries = backend.list(&dir).ok()?;
    let objects: Vec<_> = entries.iter().filter_map(|e| e.object()).collect();
    if objects.is_empty() && !backend.leaves_scratch() {
        return None;
    }
    Some(Leftover {
        bytes: objects.iter().map(|m| m.len).sum(),
        modified: objects.iter().map(|m| m.modified).max(),
        key: dir,
        kind,
    })
}

/// Every leftover of the store in `backend`, in the order of the layout.
/// Where no write leaves a temp name behind ([`Backend::leaves_scratch`]
/// false: an object store, whose writes are single requests), only the
/// listing of `conversations/` is read (stopped removals); elsewhere every
/// conversation directory and quarantined conversation is listed too.
/// What cannot be listed is passed over.
pub fn find(backend: &dyn Backend) -> Vec<Leftover> {
    let mut out = Vec::new();
    let scratch = backend.leaves_scratch();
    if scratch {
        let root = list(backend, Path::new("."));
        let temps = root
            .iter()
            .filter(|e| crate::store::is_config_temp(&e.name))
            .cloned()
            .collect::<Vec<_>>();
        temps_in(Path::new(""), &temps, &mut out);
    }
    let conversations = Path::new(CONVERSATIONS_DIR);
    let mut entries = list(backend, conversations);
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    for e in &entries {
        if !e.is_prefix() {
            continue;
        }
        let dir = conversations.join(&e.name);
        if e.name.starts_with(REMOVED_PREFIX) {
            out.extend(dir_leftover(backend, dir, LeftoverKind::StoppedRemoval));
        } else if scratch && ConversationId::parse(&e.name).is_ok() {
            let inside = list(backend, &dir);
            if inside.iter().any(|i| i.name == LOG_FILE) {
                temps_in(&dir, &inside, &mut out);
            } else {
                out.extend(dir_leftover(backend, dir, LeftoverKind::Unpublished));
            }
        }
    }
    if scratch {
        let quarantine = Path::new(QUARANTINE_DIR).join("conversations");
        let mut entries = list(backend, &quarantine);
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        temps_in(&quarantine, &entries, &mut out);
        for e in entries.iter().filter(|e| e.is_prefix()) {
            let dir = quarantine.join(&e.name);
            temps_in(&dir, &list(backend, &dir), &mut out);
        }
    }
    out
}

/// What [`remove`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Removed {
    /// Leftovers removed.
    pub leftovers: usize,
    /// Their bytes.
    pub bytes: u64,
}

/// Removes the `leftovers` ([`find`]) last written `grace` or longer
/// before `now`. A directory without a log is removed only while this
/// process holds its writer lock (`<dir>/events.log.lock`, not waited for:
/// a creation holds it until it is done), found again under the lock still
/// without a log and as old, its lock file deleted last; anyone who waited
/// for that lock finds it replaced and takes the new one (format-spec.md
/// 3, "The writer lock"). A stopped removal's directory is removed as the
/// removal would have (a removal still running passes over what is gone).
pub fn remove(
    backend: &dyn Backend,
    leftovers: &[Leftover],
    grace: Duration,
    now: SystemTime,
) -> Result<Removed> {
    let mut done = Removed::default();
    let mut temps = Vec::new();
    for l in leftovers.iter().filter(|l| !l.young(now, grace)) {
        match l.kind {
            LeftoverKind::Temp => {
                temps.push(l.key.clone());
                done.bytes += l.bytes;
            }
            LeftoverKind::Unpublished => {
                if remove_unpublished(backend, l, grace, now)? {
                    done.leftovers += 1;
                    done.bytes += l.bytes;
                }
            }
            // Nothing locks it any more (the removal that moved it holds the
            // lock of a name that is gone); a removal still running deletes
            // the same files, and passes over what is gone.
            LeftoverKind::StoppedRemoval => {
                let log = l.key.join(LOG_FILE);
                if clear_locked_dir(backend, &l.key, &log)? {
                    done.leftovers += 1;
                    done.bytes += l.bytes;
                }
            }
        }
    }
    done.leftovers += backend
        .delete(&temps)
        .map_err(|e| Error::from_backend(backend, e))?;
    Ok(done)
}

/// Removes the directory of a creation that did not publish its log,
/// under its writer lock (see [`remove`]); whether it did.
fn remove_unpublished(
    backend: &dyn Backend,
    leftover: &Leftover,
    grace: Duration,
    now: SystemTime,
) -> Result<bool> {
    let log = leftover.key.join(LOG_FILE);
    let _lock = match try_lock(backend, &log) {
        Ok(Some(lock)) => lock,
        // Held: a creation is running. Replaced or gone: someone else
        // removed it.
        Ok(None) | Err(Error::LockReplaced { .. }) => return Ok(false),
        Err(Error::Io { ref source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(false)
        }
        Err(e) => return Err(e),
    };
    let Some(again) = dir_leftover(backend, leftover.key.clone(), leftover.kind) else {
        return Ok(false);
    };
    let published = list(backend, &leftover.key)
        .iter()
        .any(|e| e.name == LOG_FILE);
    if published || again.young(now, grace) {
        return Ok(false);
    }
    // `false`: something was made in it meanwhile (a creation that found
    // the lock replaced and started again); it is that writer's now.
    clear_locked_dir(backend, &leftover.key, &log)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_are_those_of_the_writers() {
        for name in [
            "events.log.tmp.12.1795822833797475105.0",
            "events.log.tmp.12.1795822833797475105.upgrade",
            "head.tmp.12.3",
            "head.tmp.12.created",
            "NOTE.tmp.15922",
            "config.toml.tmp.7",
            "17958228262.tail-993705.1795822833-835524027.tmp.15808.1795822833835541804.0",
        ] {
            assert!(is_temp_name(name), "{name}");
        }
        for name in [
            "events.log",
            "events.log.lock",
            "head",
            "NOTE",
            "17958228262.tail-993705.1795822833-835524027",
            "17958228262.tail-993705.1795822833-835524027.note",
            "17958228262.1795822833-835524027.repairing-16",
            "a.tmp.",
            "a.tmp.x",
        ] {
            assert!(!is_temp_name(name), "{name}");
        }
    }
}
