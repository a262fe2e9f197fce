//! The store layout (format-spec.md section 1) walked for nodes that are
//! not what the store keeps there: a FIFO, a socket, a device or a
//! symbolic link where it keeps a file or a directory, or a directory
//! where it keeps a file.
//!
//! The storage layer refuses to open such a node (so nothing blocks on a
//! FIFO), but a refusal only shows when something happens to open it: a
//! FIFO standing for a lock file or a directory standing for `events.log`
//! makes writers fail while readers, which never open the name, see a
//! healthy store. fsck walks every name of the layout instead and reports
//! each one as damage.

use std::path::{Path, PathBuf};

use jpstore_blobstore::storage::{DirEntry, FileKind, Storage};
use jpstore_blobstore::{BlobId, OBJECTS_DIR, PACKS_DIR, TMP_DIR};

use crate::conversation::{ConversationId, CONVERSATIONS_DIR, GC_LOCK};
use crate::store::{BLOBS_DIR, CONFIG_FILE};

/// A node of the layout that is not of the kind the store keeps there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Misplaced {
    /// Relative to the store root.
    pub path: PathBuf,
    /// What is there.
    pub found: FileKind,
    /// What the store keeps there, for the message ("a file", "a directory").
    pub expected: &'static str,
    /// The conversation whose directory holds it.
    pub conversation: Option<String>,
}

/// What the store keeps under a name.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Expect {
    File,
    Dir,
}

/// Whether `found` is wrong where `expected` is kept. A symbolic link is:
/// every open and lookup refuses it by name (format-spec.md, "Symbolic
/// links"), so a link standing for a lock file, a loose object or a
/// conversation directory makes every writer, or a repair, fail on it
/// while readers that never open the name see a healthy store.
fn wrong(found: FileKind, expected: Expect) -> bool {
    match (found, expected) {
        (FileKind::Regular, Expect::File) | (FileKind::Directory, Expect::Dir) => false,
        // A file where a directory is kept is ignored by listings, as any
        // name the layout does not list (format-spec.md section 1).
        (FileKind::Regular, Expect::Dir) => false,
        _ => true,
    }
}

/// What a walk of the layout found.
pub(super) struct Layout {
    /// The nodes that are not what the store keeps there, in walk order.
    pub misplaced: Vec<Misplaced>,
    /// The loose objects the walk listed: what the fanout directories
    /// hold under blob ids' names, as the blob store lists them (every
    /// name that is not a directory), in no particular order (fsck takes
    /// them as its listing of loose objects instead of listing the fanout
    /// directories again); `None` when one could not be listed (the blob
    /// store's own listing then reports why).
    pub loose: Option<Vec<BlobId>>,
    /// What each conversation directory holds, as listed (the directories
    /// that could be listed), for fsck's search for leftovers
    /// ([`crate::gc::leftovers::find_listed`]) without a second listing.
    pub conversations: crate::gc::leftovers::Listings,
}

/// Walks the layout below the store root of `storage`.
pub(super) fn walk(storage: &dyn Storage) -> Layout {
    let mut walk = Walk {
        storage,
        out: Vec::new(),
        files: None,
        entries: None,
    };
    let root = Path::new(".");
    let blobs = Path::new(BLOBS_DIR);
    let conversations = Path::new(CONVERSATIONS_DIR);
    walk.dir(root, None, |name| match name {
        BLOBS_DIR | CONVERSATIONS_DIR | super::QUARANTINE_DIR => Some(Expect::Dir),
        CONFIG_FILE | GC_LOCK => Some(Expect::File),
        _ if crate::store::is_config_temp(name) => Some(Expect::File),
        _ => None,
    });
    walk.dir(blobs, None, |name| match name {
        OBJECTS_DIR | PACKS_DIR | TMP_DIR => Some(Expect::Dir),
        _ => None,
    });
    // Everything the store creates in these is a file (temp names
    // included).
    walk.dir(&blobs.join(PACKS_DIR), None, |_| Some(Expect::File));
    walk.dir(&blobs.join(TMP_DIR), None, |_| Some(Expect::File));
    let objects = blobs.join(OBJECTS_DIR);
    let fanout = |name: &str| name.len() == 2 && name.bytes().all(|b| b.is_ascii_hexdigit());
    // The directories that hold only files (a store's hundreds of fanout
    // and conversation directories) are listed on every core; the findings
    // are kept in the order of a walk on one thread.
    let mut top = Walk {
        storage,
        out: Vec::new(),
        files: Some(Vec::new()),
        entries: None,
    };
    let mut leaves: Vec<(PathBuf, Option<String>)> = top
        .dir(&objects, None, |n| fanout(n).then_some(Expect::Dir))
        .into_iter()
        .map(|name| (objects.join(name), None))
        .collect();
    walk.out.append(&mut top.out);
    // Where `objects/` could not be listed, the walk gives no listing of
    // loose objects.
    let objects_listed = top.files.is_some();
    let fanouts = leaves.len();
    let mut listing = Walk {
        storage,
        out: Vec::new(),
        files: None,
        entries: None,
    };
    let ids = listing.dir(conversations, None, |n| {
        ConversationId::parse(n).ok().map(|_| Expect::Dir)
    });
    leaves.extend(
        ids.into_iter()
            .map(|id| (conversations.join(&id), Some(id))),
    );
    let mut found = crate::parallel::map_ordered(&leaves, |(dir, conversation)| {
        let mut leaf = Walk {
            storage,
            out: Vec::new(),
            // A fanout directory's files are loose objects.
            files: conversation.is_none().then(Vec::new),
            // A conversation directory's entries serve fsck's leftovers.
            entries: conversation.is_some().then(Vec::new),
        };
        leaf.dir(dir, conversation.as_deref(), |_| Some(Expect::File));
        let fanout = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let loose: Option<Vec<BlobId>> = leaf.files.map(|names| {
            names
                .into_iter()
                .filter_map(|name| BlobId::parse(&format!("{fanout}{name}")).ok())
                .collect()
        });
        let entries = conversation.clone().zip(leaf.entries);
        (leaf.out, loose, entries)
    });
    let in_conversations = found.split_off(fanouts);
    let mut loose = objects_listed.then(Vec::new);
    for (out, ids, _) in found {
        walk.out.extend(out);
        // A fanout directory that could not be listed: no listing.
        match (&mut loose, ids) {
            (Some(all), Some(ids)) => all.extend(ids),
            _ => loose = None,
        }
    }
    walk.out.extend(listing.out);
    let mut conversations = Vec::new();
    for (out, _, entries) in in_conversations {
        walk.out.extend(out);
        conversations.extend(entries);
    }
    // What gc reads of the quarantine (format-spec.md 4.7, "Marking"): a
    // log or a cut tail there that cannot be read makes gc refuse to sweep;
    // and the directories a repair moves things into.
    walk.dir(Path::new(super::QUARANTINE_DIR), None, |name| {
        matches!(name, "conversations" | "blobs" | "nodes").then_some(Expect::Dir)
    });
    let quarantined = Path::new(super::QUARANTINE_DIR).join("conversations");
    let moved = walk.dir(&quarantined, None, |name| {
        if crate::gc::is_tail_copy(name) {
            Some(Expect::File)
        } else if name.ends_with(".note") || crate::gc::leftovers::is_temp_name(name) {
            None
        } else {
            Some(Expect::Dir)
        }
    });
    for dir in moved {
        walk.dir(&quarantined.join(dir), None, |name| {
            (name == crate::conversation::LOG_FILE).then_some(Expect::File)
        });
    }
    Layout {
        misplaced: walk.out,
        loose,
        conversations,
    }
}

struct Walk<'a> {
    storage: &'a dyn Storage,
    out: Vec<Misplaced>,
    /// Where asked for (`Some` before the listing), the names listed that
    /// are not directories; `None` after a listing that failed.
    files: Option<Vec<String>>,
    /// Where asked for, every entry listed; `None` after a listing that
    /// failed.
    entries: Option<Vec<DirEntry>>,
}

impl Walk<'_> {
    /// Lists `dir` (nothing if it is missing or not a directory: the
    /// listing of its parent reported that) and reports each entry that
    /// `expect` names and that is of the wrong kind. Returns the names of
    /// the entries expected and found to be directories, to walk into.
    fn dir(
        &mut self,
        dir: &Path,
        conversation: Option<&str>,
        expect: impl Fn(&str) -> Option<Expect>,
    ) -> Vec<String> {
        // A directory that is missing or cannot be listed (not a
        // directory, a link, no permission) is reported where it is read, or
        // by the listing of its parent.
        let Ok(entries) = self.storage.read_dir(dir) else {
            // Not listed: no names to give.
            self.files = None;
            self.entries = None;
            return Vec::new();
        };
        if let Some(all) = &mut self.entries {
            all.extend(entries.iter().cloned());
        }
        let mut dirs = Vec::new();
        for e in entries {
            let Some(expected) = expect(&e.name) else {
                continue;
            };
            let found = e.metadata.kind;
            if let Some(files) = &mut self.files {
                // As the blob store lists objects: every name that is not
                // a directory.
                if found != FileKind::Directory {
                    files.push(e.name.clone());
                }
            }
            if wrong(found, expected) {
                self.out.push(Misplaced {
                    path: if dir == Path::new(".") {
                        PathBuf::from(&e.name)
                    } else {
                        dir.join(&e.name)
                    },
                    found,
                    expected: match expected {
                        Expect::File => "a file",
                        Expect::Dir => "a directory",
                    },
                    conversation: conversation.map(str::to_string),
                });
            } else if expected == Expect::Dir && found == FileKind::Directory {
                dirs.push(e.name);
            }
        }
        dirs.sort();
        dirs
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use jpstore_blobstore::storage::sim::SimNode;
    use jpstore_blobstore::storage::SimStorage;

    use super::*;
    use crate::event::input::parse_input;
    use crate::event::json::ParseMode;
    use crate::fsck::{FsckOptions, Severity};
    use crate::timestamp::Timestamp;
    use crate::{NewConversation, Store, StoreOptions};

    const CONTENT: &str = "the content of a loose object";

    fn append(store: &Store, id: &ConversationId) -> crate::error::Result<()> {
        let text = format!(
            "{{\"type\":\"turn_start\"}}\n{{\"type\":\"tool_call_request\",\"id\":\"c\",\"name\":\"t\",\"arguments\":{{}}}}\n\
             {{\"type\":\"tool_call_response\",\"id\":\"c\",\"content\":\"{CONTENT}\"}}"
        );
        let entries = parse_input(
            &text,
            ParseMode::Strict {
                now: Timestamp::now(),
            },
        )
        .expect("input")
        .entries;
        store.writer(id)?.append(entries).map(drop)
    }

    /// A store on simulated storage with conversation `c` and one loose
    /// object.
    fn store() -> (SimStorage, Store, ConversationId) {
        let sim = SimStorage::new();
        let store = Store::init(
            jpstore_blobstore::backend::FileBackend::shared(Arc::new(sim.clone())),
            StoreOptions::default(),
        )
        .expect("init");
        let id = ConversationId::parse("c").expect("id");
        drop(
            store
                .create(NewConversation {
                    id: Some(id.clone()),
                    ..Default::default()
                })
                .expect("create"),
        );
        append(&store, &id).expect("append");
        (sim, store, id)
    }

    /// Every place of the layout where a node that is not a regular file
    /// hides from readers, with a FIFO, a socket, a device or a directory:
    /// fsck names it as damage, `--repair` moves it aside, and the store is
    /// clean and writable afterwards.
    #[test]
    fn every_special_node_in_the_layout_is_damage_and_moved_aside() {
        let object = {
            let hex = jpstore_blobstore::BlobId::of(CONTENT.as_bytes()).to_hex();
            format!("blobs/objects/{}/{}", &hex[..2], &hex[2..])
        };
        let places = [
            ("conversations/c/events.log.lock", FileKind::Fifo),
            ("conversations/c/events.log.lock", FileKind::Directory),
            ("conversations/c/head", FileKind::Socket),
            ("gc.lock", FileKind::Fifo),
            ("gc.lock", FileKind::Directory),
            ("config.toml", FileKind::CharDevice),
            (object.as_str(), FileKind::Fifo),
            ("blobs/tmp/1-2-3.obj", FileKind::Fifo),
            ("conversations/c/head.tmp.1.2", FileKind::Fifo),
            ("conversations/c/events.log.lock", FileKind::Symlink),
            ("gc.lock", FileKind::Symlink),
            (object.as_str(), FileKind::Symlink),
            ("conversations/c", FileKind::Symlink),
            (
                "quarantine/conversations/c.1-2/events.log",
                FileKind::Symlink,
            ),
            ("quarantine/conversations/c.tail-16.1-2", FileKind::Fifo),
            ("quarantine", FileKind::Symlink),
            ("quarantine/nodes", FileKind::Symlink),
            ("quarantine/conversations", FileKind::Fifo),
        ];
        for (place, kind) in places {
            let what = format!("{} at {place}", kind.describe());
            let (sim, store, id) = store();
            let path = Path::new(place);
            if place == "conversations/c" {
                // A conversation's directory: its files first.
                for name in ["events.log", "events.log.lock", "head"] {
                    let _ = sim.remove_file(&path.join(name));
                }
                sim.remove_dir(path).expect("rmdir");
            } else if sim.exists(path) {
                sim.remove_file(path).expect("rm");
            }
            if place.starts_with("quarantine/") {
                sim.create_dir_all(jpstore_blobstore::storage::parent_dir(path))
                    .expect("mkdir");
            }
            if kind == FileKind::Directory {
                sim.create_dir_all(path).expect("mkdir");
            } else if kind == FileKind::Symlink {
                sim.make_symlink(path, "/somewhere/else").expect("symlink");
            } else {
                sim.make_special(path, kind).expect("mknod");
            }
            let report = store
                .fsck(FsckOptions::default(), &mut |_| {})
                .expect(&what);
            let shown = sim.display_path(path);
            let found: Vec<_> = report
                .findings
                .iter()
                .filter(|f| f.kind == "not-a-regular-file")
                .collect();
            assert_eq!(found.len(), 1, "{what}: {:?}", report.findings);
            assert_eq!(found[0].severity, Severity::Damage, "{what}");
            assert_eq!(found[0].path.as_ref(), Some(&shown), "{what}");
            assert!(
                found[0].message.contains(kind.describe()),
                "{what}: {}",
                found[0].message
            );
            assert!(!report.is_clean(), "{what}");

            let repair = FsckOptions {
                repair: true,
                ..Default::default()
            };
            let repaired = store.fsck(repair, &mut |_| {}).expect(&what);
            assert!(
                repaired.repairs.iter().any(|r| r.contains(place)),
                "{what}: {:?}",
                repaired.repairs
            );
            let moved: Vec<_> = sim
                .snapshot()
                .into_iter()
                .filter(|(p, node)| {
                    let at = match place {
                        // The quarantine and its directories: renamed
                        // beside themselves.
                        "quarantine" | "quarantine/nodes" | "quarantine/conversations" => {
                            p.to_string_lossy().starts_with(&format!("{place}.node-"))
                        }
                        _ => p.starts_with("quarantine/nodes") && p.ends_with(place),
                    };
                    at && match node {
                        SimNode::Special(k) => *k == kind,
                        SimNode::Dir => kind == FileKind::Directory,
                        SimNode::Symlink(_) => kind == FileKind::Symlink,
                        _ => false,
                    }
                })
                .collect();
            assert_eq!(moved.len(), 1, "{what}: {:?}", sim.snapshot().keys());
            let after = store
                .fsck(FsckOptions::default(), &mut |_| {})
                .expect(&what);
            assert!(after.is_clean(), "{what}: {:?}", after.findings);
            if place == object || place == "conversations/c" {
                // The blob is gone with the node: the conversation that
                // references it is moved aside whole (format-spec.md 4.8);
                // or the conversation was only a link.
                assert!(store.ids().expect("ids").is_empty(), "{what}");
            } else {
                append(&store, &id).unwrap_or_else(|e| panic!("{what}: append after repair: {e}"));
            }
        }
    }

    /// The walk's listing of loose objects, which fsck resolves
    /// references against, is the blob store's own: every name that is not
    /// a directory and reads as a blob id, a special node too (its reader
    /// then names it), and nothing else.
    #[test]
    fn the_walk_lists_the_loose_objects_as_the_blob_store_does() {
        let (sim, store, _) = store();
        let put: Vec<BlobId> = (0..20)
            .map(|i| {
                let bytes = format!("object {i}");
                store.blobs().put(bytes.as_bytes()).expect("put").id
            })
            .collect();
        let hex = BlobId::of(b"not stored").to_hex();
        let special = format!("blobs/objects/{}/{}", &hex[..2], &hex[2..]);
        sim.create_dir_all(Path::new(&format!("blobs/objects/{}", &hex[..2])))
            .expect("mkdir");
        sim.make_special(Path::new(&special), FileKind::Fifo)
            .expect("mknod");
        let dir = format!("blobs/objects/{}/{}", &hex[..2], "not-an-id");
        sim.create_dir_all(Path::new(&dir)).expect("mkdir");
        sim.create_dir_all(Path::new("blobs/objects/zz"))
            .expect("not a fanout directory");
        sim.make_special(
            Path::new(&format!("blobs/objects/zz/{}", &hex[2..])),
            FileKind::Fifo,
        )
        .expect("mknod");
        let mut listed = walk(&sim).loose.expect("listed");
        listed.sort();
        let expected: Vec<BlobId> = store
            .blobs()
            .loose_objects()
            .expect("list")
            .into_iter()
            .map(|o| o.id)
            .collect();
        assert_eq!(listed, expected);
        assert!(put.iter().all(|id| listed.contains(id)));
        assert!(listed.contains(&BlobId::parse(&hex).expect("id")));
    }

    /// Writers meet the node and fail naming it, never waiting.
    #[test]
    fn writers_refuse_a_special_node_naming_it() {
        for place in ["conversations/c/events.log.lock", "gc.lock"] {
            let (sim, store, id) = store();
            let path = Path::new(place);
            sim.remove_file(path).expect("rm");
            sim.make_special(path, FileKind::Fifo).expect("mkfifo");
            let e = append(&store, &id).expect_err(place).to_string();
            assert!(
                e.contains(&sim.display_path(path).display().to_string()) && e.contains("a FIFO"),
                "{place}: {e}"
            );
        }
    }
}
