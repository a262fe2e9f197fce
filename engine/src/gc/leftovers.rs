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

use jpstore_blobstore::backend::{Backend, Listed};
use jpstore_blobstore::storage::DirEntry;

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
        self.modified.is_some_and(|m| super::young(m, now, grace))
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

/// One name listed in a directory: a file (its length and time) or not.
struct Node {
    name: String,
    file: Option<(u64, SystemTime)>,
}

impl From<&Listed> for Node {
    fn from(e: &Listed) -> Self {
        Node {
            name: e.name.clone(),
            file: e.object().map(|m| (m.len, m.modified)),
        }
    }
}

impl From<&DirEntry> for Node {
    fn from(d: &DirEntry) -> Self {
        Node {
            name: d.name.clone(),
            file: (!d.metadata.is_dir).then_some((d.metadata.len, d.metadata.modified)),
        }
    }
}

/// Lists `dir`; `None` if it cannot be listed (missing, or a node that is
/// not a directory: fsck's layout walk reports those), since leftovers are
/// only ever removed, never needed.
fn nodes(backend: &dyn Backend, dir: &Path) -> Option<Vec<Node>> {
    Some(backend.list(dir).ok()?.iter().map(Node::from).collect())
}

/// The temp files among `nodes` of `dir`.
fn temps_in(dir: &Path, nodes: &[Node], out: &mut Vec<Leftover>) {
    for n in nodes {
        if let (Some((len, modified)), true) = (n.file, is_temp_name(&n.name)) {
            out.push(Leftover {
                key: dir.join(&n.name),
                kind: LeftoverKind::Temp,
                bytes: len,
                modified: Some(modified),
            });
        }
    }
}

/// The directory `dir` holding `nodes` as a leftover of `kind`: its bytes
/// and newest time; `None` if it holds no file on an object store (where a
/// prefix is only its objects: some servers, such as SeaweedFS, still list
/// one whose objects are all gone, and there is nothing to remove).
fn dir_leftover(
    backend: &dyn Backend,
    dir: PathBuf,
    nodes: &[Node],
    kind: LeftoverKind,
) -> Option<Leftover> {
    let files: Vec<_> = nodes.iter().filter_map(|n| n.file).collect();
    if files.is_empty() && !backend.leaves_scratch() {
        return None;
    }
    Some(Leftover {
        bytes: files.iter().map(|(len, _)| len).sum(),
        modified: files.iter().map(|(_, m)| *m).max(),
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
    find_listed(backend, &Vec::new())
}

/// What conversation directories hold, as a walk of a file system listed
/// them: `(id, entries)`.
pub(crate) type Listings = Vec<(String, Vec<DirEntry>)>;

/// [`find`], with what conversation directories hold where it was listed
/// already (fsck's layout walk).
pub(crate) fn find_listed(backend: &dyn Backend, listed: &Listings) -> Vec<Leftover> {
    let mut out = Vec::new();
    let scratch = backend.leaves_scratch();
    if scratch {
        let root: Vec<Node> = nodes(backend, Path::new("."))
            .unwrap_or_default()
            .into_iter()
            .filter(|n| crate::store::is_config_temp(&n.name))
            .collect();
        temps_in(Path::new(""), &root, &mut out);
    }
    let conversations = Path::new(CONVERSATIONS_DIR);
    let mut entries = backend.list(conversations).unwrap_or_default();
    entries.retain(|e| {
        e.is_prefix()
            && (e.name.starts_with(REMOVED_PREFIX)
                || (scratch && ConversationId::parse(&e.name).is_ok()))
    });
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    // What each directory holds: from the walk where it listed it, else
    // listed here. On a file system a directory is first listed by name
    // and kind only (no entry looked up): one holding its log and no temp
    // name, as nearly all do, needs nothing more.
    let by_id: std::collections::HashMap<&str, &Vec<DirEntry>> =
        listed.iter().map(|(id, e)| (id.as_str(), e)).collect();
    let plain = |dir: &Path| {
        backend.files().is_some_and(|files| {
            files.read_dir_kinds(dir).is_ok_and(|names| {
                names.iter().any(|(name, _)| name == LOG_FILE)
                    && !names.iter().any(|(name, _)| is_temp_name(name))
            })
        })
    };
    for e in &entries {
        let dir = conversations.join(&e.name);
        if e.name.starts_with(REMOVED_PREFIX) {
            let inside = nodes(backend, &dir).unwrap_or_default();
            out.extend(dir_leftover(
                backend,
                dir,
                &inside,
                LeftoverKind::StoppedRemoval,
            ));
            continue;
        }
        let inside: Vec<Node> = match by_id.get(e.name.as_str()) {
            Some(found) => found.iter().map(Node::from).collect(),
            None if plain(&dir) => continue,
            None => nodes(backend, &dir).unwrap_or_default(),
        };
        if inside.iter().any(|n| n.name == LOG_FILE) {
            temps_in(&dir, &inside, &mut out);
        } else {
            out.extend(dir_leftover(
                backend,
                dir,
                &inside,
                LeftoverKind::Unpublished,
            ));
        }
    }
    if scratch {
        let quarantine = Path::new(QUARANTINE_DIR).join("conversations");
        let mut entries = backend.list(&quarantine).unwrap_or_default();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        let top: Vec<Node> = entries.iter().map(Node::from).collect();
        temps_in(&quarantine, &top, &mut out);
        for e in entries.iter().filter(|e| e.is_prefix()) {
            let dir = quarantine.join(&e.name);
            temps_in(&dir, &nodes(backend, &dir).unwrap_or_default(), &mut out);
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
    for l in leftovers.iter().filter(|l| !l.young(now, grace)) {
        match l.kind {
            // One at a time: a temp name whose directory went meanwhile (a
            // conversation removed) is passed over, not an error.
            LeftoverKind::Temp => match backend.delete(std::slice::from_ref(&l.key)) {
                Ok(n) => {
                    done.leftovers += n;
                    done.bytes += if n > 0 { l.bytes } else { 0 };
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::from_backend(backend, e)),
            },
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
    let Some(inside) = nodes(backend, &leftover.key) else {
        return Ok(false);
    };
    let published = inside.iter().any(|n| n.name == LOG_FILE);
    let again = dir_leftover(backend, leftover.key.clone(), &inside, leftover.kind);
    if published || again.is_none_or(|l| l.young(now, grace)) {
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

    #[test]
    fn config_temp_names_of_this_build_and_of_builds_before_are_known() {
        let ours = crate::store::config_temp();
        let ours = ours.to_str().expect("UTF-8");
        assert!(crate::store::is_config_temp(ours), "{ours}");
        assert_ne!(ours, format!("config.toml.tmp.{}", std::process::id()));
        for name in ["config.toml.tmp.7", "config.toml.tmp.7.1795822833797475105"] {
            assert!(crate::store::is_config_temp(name), "{name}");
        }
        for name in [
            "config.toml",
            "config.toml.tmp.",
            "config.toml.tmp.7.",
            "config.toml.tmp.7.x",
            "config.toml.tmp.7.1.2",
        ] {
            assert!(!crate::store::is_config_temp(name), "{name}");
        }
    }
}
