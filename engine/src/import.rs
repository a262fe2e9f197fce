//! Whole conversations stored in bulk (`jp-store import`, and any other
//! importer): every payload of a batch of conversations into the blob store
//! first, as one pack, then each conversation's log published whole.
//!
//! What a conversation held before (JP's files, another tool's export) is
//! turned into a [`Prepared`] by the importer of that format
//! (`jpstore_integrations::jp::import::prepare` for JP's).

use indexmap::IndexMap;
use jpstore_blobstore::BlobId;

use crate::config;
use crate::conversation::meta::MetaPatch;
use crate::conversation::writer::ConversationWriter;
use crate::conversation::ConversationId;
use crate::error::{Error, Result};
use crate::event::{BlobRef, Entry, Object, Payload};
use crate::store::Store;

pub use crate::conversation::writer::BlobTotals;

/// A conversation ready to store: its id, metadata, base config and
/// entries with their content inline.
#[derive(Debug, Clone, PartialEq)]
pub struct Prepared {
    /// The conversation id.
    pub id: ConversationId,
    /// Metadata fields (for JP's: `metadata.json`, `created`, and `jp`).
    pub fields: Object,
    /// The base config, if any.
    pub base_config: Option<Object>,
    /// The bytes to store as the base config blob instead of the config's
    /// canonical bytes, when the importer keeps the config's own text (JP's
    /// import: the file's JSON without whitespace, so its key order,
    /// escapes and number forms come back; format-spec.md 4.5). They must
    /// hold `base_config`; they are checked to read back as a JSON object.
    pub base_config_text: Option<Vec<u8>>,
    /// The entries, content inline.
    pub entries: Vec<Entry<Payload>>,
    /// Bytes of the files it was read from (for the report).
    pub source_bytes: u64,
}

/// What `Store::rewrite` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rewritten {
    /// Bytes of the new log.
    pub(crate) log_bytes: u64,
    /// Where the log it replaced was kept (relative to the store root): the
    /// directory holding it as `events.log`, with a `NOTE`.
    pub(crate) kept: Option<std::path::PathBuf>,
}

/// What happened to one conversation of an import.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Imported {
    /// Stored.
    Stored {
        /// Its id.
        id: ConversationId,
        /// Entries stored.
        entries: usize,
        /// Bytes of the files it was read from.
        source_bytes: u64,
        /// Bytes of its log.
        log_bytes: u64,
        /// Whether an existing conversation was replaced (`force`).
        replaced: bool,
    },
    /// Skipped: a conversation with this id exists (and `force` was not set).
    Skipped {
        /// Its id.
        id: ConversationId,
    },
}

/// Why an import stored nothing of a batch ([`run`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// Reading or writing the store failed.
    #[error(transparent)]
    Store(#[from] Error),
    /// The batch holds two conversations with one id; nothing of it was
    /// stored (an importer sends a conversation given twice in a later
    /// batch, or leaves it out).
    #[error("the batch to import holds conversation {id} twice; nothing of it was stored")]
    ImportedTwice {
        /// The id.
        id: String,
    },
}

impl From<jpstore_blobstore::Error> for ImportError {
    fn from(e: jpstore_blobstore::Error) -> ImportError {
        ImportError::Store(e.into())
    }
}

/// Imports prepared conversations into `store`, as `jp-store import`
/// does: all their content (and base configs) goes into the blob store
/// first, as one pack when there are more than a few new blobs; then each
/// conversation's log is published whole. A conversation whose id exists
/// is skipped, or with `force` replaced. A batch that holds one id twice is
/// refused, nothing of it stored.
pub fn run(
    store: &Store,
    batch: Vec<Prepared>,
    force: bool,
    progress: &mut dyn FnMut(jpstore_blobstore::BatchProgress),
) -> Result<(Vec<Imported>, BlobTotals), ImportError> {
    store.import(batch, force, progress)
}

impl Store {
    /// Imports prepared conversations: all their content (and base configs)
    /// goes into the blob store first, as one pack when there are more than a
    /// few new blobs; then each conversation's log is published whole. A
    /// conversation whose id exists is skipped, or with `force` replaced.
    /// A batch that holds one id twice is refused
    /// ([`ImportError::ImportedTwice`]),
    /// nothing of it stored.
    pub(crate) fn import(
        &self,
        batch: Vec<Prepared>,
        force: bool,
        progress: &mut dyn FnMut(jpstore_blobstore::BatchProgress),
    ) -> Result<(Vec<Imported>, BlobTotals), ImportError> {
        // Two conversations with one id would be written one over the
        // other, the second failing half way: refused before anything is.
        let mut ids = std::collections::HashSet::with_capacity(batch.len());
        if let Some(p) = batch.iter().find(|p| !ids.insert(&p.id)) {
            return Err(ImportError::ImportedTwice {
                id: p.id.to_string(),
            });
        }
        let (imported, totals, _) = self.store_prepared(batch, force, None, progress)?;
        Ok((imported, totals))
    }

    /// Replaces the whole history of conversation `prepared.id` (which must
    /// exist) with `prepared`: its metadata, base config and entries, as an
    /// import with `force` stores them, keeping the log it replaces in
    /// quarantine (`quarantine/conversations/<id>.<secs>-<nanos>/`, with a
    /// `NOTE` saying `why`; format-spec.md 4.8), where gc keeps what it
    /// references. For a program that changes a conversation's history in
    /// place (JP's storage backend: a compaction removed, turns trimmed),
    /// so that nothing it replaced is lost. Returns the new log's length
    /// and where the old one was kept.
    pub(crate) fn rewrite(&self, prepared: Prepared, why: &str) -> Result<Rewritten> {
        let id = prepared.id.clone();
        if !self.exists(&id)? {
            return Err(crate::error::Error::NotFound { id: id.to_string() });
        }
        let (imported, _, kept) =
            self.store_prepared(vec![prepared], true, Some(why), &mut |_| {})?;
        let log_bytes = match imported.first() {
            Some(Imported::Stored { log_bytes, .. }) => *log_bytes,
            _ => 0,
        };
        Ok(Rewritten {
            log_bytes,
            kept: kept.into_iter().next().flatten(),
        })
    }

    /// [`Store::import`]; with `keep`, the log of each conversation
    /// replaced is kept first (its `NOTE` saying `keep`), and the third
    /// result says where, for each conversation stored in the order stored
    /// (`None` for one that was new).
    fn store_prepared(
        &self,
        batch: Vec<Prepared>,
        force: bool,
        keep: Option<&str>,
        progress: &mut dyn FnMut(jpstore_blobstore::BatchProgress),
    ) -> Result<(Vec<Imported>, BlobTotals, Vec<Option<std::path::PathBuf>>)> {
        // Blobs are stored before the logs that reference them: gc must not
        // run in between (format-spec.md 4.7).
        let _gc = self.gc_shared()?;
        let mut todo = Vec::new();
        let mut results = Vec::new();
        for p in batch {
            let exists = self.exists(&p.id)?;
            if exists && !force {
                results.push((results.len() + todo.len(), Imported::Skipped { id: p.id }));
            } else {
                todo.push((results.len() + todo.len(), p, exists));
            }
        }
        // 1. Every payload of every conversation, durable first.
        // In the order met: a conversation's content stays together, so
        // that the pack's groups compress what it shares.
        let mut payloads: IndexMap<BlobId, Vec<u8>> = IndexMap::new();
        let mut stored = Vec::with_capacity(todo.len());
        for (slot, p, exists) in todo {
            let mut add = |bytes: Vec<u8>| {
                let r = BlobRef {
                    id: BlobId::of(&bytes),
                    size: bytes.len() as u64,
                };
                payloads.entry(r.id).or_insert(bytes);
                r
            };
            let base = match (&p.base_config, p.base_config_text) {
                (None, _) => None,
                (Some(c), None) => Some(add(config::canonical_bytes(c))),
                (Some(_), Some(text)) => {
                    // What is stored must read back, as `Store::put_config`
                    // checks (serde_json refuses nesting deeper than 128).
                    config::parse_config_json(&text, &format!("the base config of {}", p.id))?;
                    Some(add(text))
                }
            };
            let entries: Vec<Entry> = p
                .entries
                .into_iter()
                .map(|e| {
                    e.try_map_content(&mut |c| match c {
                        Payload::Inline(b) => Ok::<_, std::convert::Infallible>(add(b)),
                        Payload::Ref(r) => Ok(r),
                    })
                    .unwrap_or_else(|never| match never {})
                })
                .collect();
            stored.push((slot, p.id, p.fields, base, entries, p.source_bytes, exists));
        }
        let totals = crate::conversation::writer::put_new_blobs(
            self.blobs(),
            payloads,
            self.blobs().options().import_compression,
            progress,
        )?;
        // 2. The logs.
        let mut kept_logs = Vec::new();
        for (slot, id, fields, base, entries, source_bytes, exists) in stored {
            let patch = MetaPatch {
                base_config: base,
                fields,
            };
            let framing = self.options().new_log_framing;
            let level = self.blobs().options().import_compression.settings().level;
            // A conversation replaced (`force`) holds its old log or its new
            // one at every point, where the locks allow a log to be replaced
            // in place; elsewhere (S3) it is removed, then created.
            let replaced = if exists && self.backend().locks_span_writers() {
                ConversationWriter::replace_log(
                    self.blobs(),
                    &id,
                    patch.clone(),
                    &entries,
                    self.options().log,
                    framing,
                    level,
                    keep,
                )?
            } else {
                None
            };
            let log_bytes = match replaced {
                Some((log_bytes, kept)) => {
                    kept_logs.push(kept);
                    log_bytes
                }
                None => {
                    if exists && self.exists(&id)? {
                        // Where the locks do not span writers (S3) the
                        // conversation is removed, then created: what it
                        // held is kept first.
                        if let Some(why) = keep {
                            let backend = &**self.backend();
                            let path = id.log_path();
                            let old = backend
                                .open(&path)
                                .and_then(|f| jpstore_blobstore::backend::read_all(&*f, u64::MAX))
                                .map_err(|source| crate::error::Error::Io {
                                    op: "read",
                                    path: backend.display(&path),
                                    source,
                                })?;
                            kept_logs.push(Some(crate::conversation::keep_log(
                                backend, &id, &old, why,
                            )?));
                        }
                        self.remove(&id)?;
                    } else {
                        kept_logs.push(None);
                    }
                    let writer = ConversationWriter::create(
                        self.blobs(),
                        id.clone(),
                        patch,
                        &entries,
                        self.options().log,
                        framing,
                        level,
                        None,
                    )?;
                    writer.log_end()
                }
            };
            results.push((
                slot,
                Imported::Stored {
                    id,
                    entries: entries.len(),
                    source_bytes,
                    log_bytes,
                    replaced: exists,
                },
            ));
        }
        results.sort_by_key(|(slot, _)| *slot);
        Ok((
            results.into_iter().map(|(_, r)| r).collect(),
            totals,
            kept_logs,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StoreOptions;

    fn prepared(id: &str, title: &str) -> Prepared {
        let mut fields = Object::new();
        fields.insert("title".into(), title.into());
        Prepared {
            id: ConversationId::parse(id).expect("id"),
            fields,
            base_config: None,
            base_config_text: None,
            entries: Vec::new(),
            source_bytes: 1,
        }
    }

    fn with_entry(id: &str, text: &str) -> Prepared {
        let mut p = prepared(id, "t");
        let entry = serde_json::json!({"type": "tool_call_response",
            "timestamp": "2026-05-29 10:00:00.1", "id": "c", "content": text});
        p.entries =
            vec![
                crate::event::json::parse_entry(&entry, crate::event::json::ParseMode::Lenient)
                    .expect("an entry"),
            ];
        p
    }

    #[test]
    fn a_rewrite_keeps_the_log_it_replaces_and_what_it_references() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("s");
        let store = Store::init_dir(&root, StoreOptions::default()).expect("init");
        let id = ConversationId::parse("c1").expect("id");
        store
            .import(
                vec![with_entry("c1", "the old content")],
                false,
                &mut |_| {},
            )
            .expect("import");
        let old = std::fs::read(root.join("conversations/c1/events.log")).expect("old log");
        let rewritten = store
            .rewrite(with_entry("c1", "the new content"), "a test rewrote it")
            .expect("rewrite");
        let kept = rewritten.kept.expect("kept");
        assert_eq!(
            std::fs::read(root.join(&kept).join("events.log")).expect("kept log"),
            old
        );
        let note = std::fs::read_to_string(root.join(&kept).join("NOTE")).expect("note");
        assert!(note.contains("a test rewrote it"), "{note}");
        let conv = store.read(&id).expect("read");
        assert_eq!(conv.entries.len(), 1);
        assert_eq!(
            std::fs::metadata(root.join("conversations/c1/events.log"))
                .expect("new log")
                .len(),
            rewritten.log_bytes
        );
        // gc keeps the old content (the kept log references it); fsck is clean.
        let old_blob = jpstore_blobstore::BlobId::of(b"the old content");
        store
            .gc(
                crate::gc::GcOptions {
                    grace: std::time::Duration::ZERO,
                    ..Default::default()
                },
                &mut |_| {},
            )
            .expect("gc");
        assert!(store.blobs().exists(&old_blob).expect("exists"));
        let report = store.fsck(Default::default(), &mut |_| {}).expect("fsck");
        assert!(report.is_clean(), "{:?}", report.findings);
        // A conversation that is not there is not rewritten.
        assert!(matches!(
            store.rewrite(with_entry("c2", "x"), "why"),
            Err(crate::error::Error::NotFound { .. })
        ));
    }

    #[test]
    fn a_batch_holding_one_id_twice_is_refused_before_anything_is_stored() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::init_dir(&dir.path().join("s"), StoreOptions::default()).expect("init");
        let batch = vec![
            prepared("c1", "a"),
            prepared("c2", "b"),
            prepared("c1", "c"),
        ];
        for force in [false, true] {
            match store.import(batch.clone(), force, &mut |_| {}) {
                Err(ImportError::ImportedTwice { id }) => assert_eq!(id, "c1"),
                other => panic!("{other:?}"),
            }
            assert!(store.ids().expect("ids").is_empty(), "nothing stored");
        }
    }
}
