//! The summaries the conversation list shows, kept between requests.
//!
//! Sorting the list needs every conversation's title, counts and last
//! activity; reading each one's state (its head cache plus the records
//! after it, as `jp-store ls` does) on every request would make the list
//! cost as much as `ls` however few rows it shows. The server keeps one
//! summary per conversation in memory instead, each with the metadata of
//! the log it was read from (length, modification time, version), and
//! brings them up to date at each request:
//!
//! - the conversations are listed, as [`Store::ids`] lists them (one read
//!   of the `conversations` directory, the metadata of each log), which
//!   finds the new ones and those removed since;
//! - a conversation whose log's metadata is what it was keeps its summary;
//!   the others (new, appended to, rewritten) are read again. The metadata
//!   is taken before the state is read, so a summary is never older than
//!   the metadata it is kept with: an append that lands between the two is
//!   read again at the next request.
//!
//! A request then costs the listing plus a read of what changed, and its
//! page is chosen from the summaries by selection, not a sort of them all.
//! A conversation that cannot be read is not kept and is read again at each
//! request, so that the page reports it for as long as it fails.

use jpstore_engine::internal::{ConversationIdInterior as _, StoreInterior as _};
use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Mutex;

use jpstore_blobstore::backend::ObjectMeta;
use jpstore_engine::conversation::ConversationId;
use jpstore_engine::error::Error;
use jpstore_engine::internal::conversation::read::read_state;
use jpstore_engine::internal::conversation::CONVERSATIONS_DIR;
use jpstore_engine::timestamp::Timestamp;
use jpstore_engine::Store;

use super::url::{Order, SortKey};

/// One conversation as the list shows it.
#[derive(Clone, Debug)]
pub struct Summary {
    /// Its id.
    pub id: ConversationId,
    /// Its title, if it has one.
    pub title: Option<String>,
    /// The title lowercased (no title: empty), for the search and the sort.
    title_key: String,
    /// Turns.
    pub turns: u64,
    /// Events.
    pub events: u64,
    /// Content referenced (with repetitions) plus the log.
    pub bytes: u64,
    /// The time of its last event.
    pub last_activity: Option<Timestamp>,
}

impl Summary {
    /// A summary of the given values.
    pub fn new(
        id: ConversationId,
        title: Option<String>,
        turns: u64,
        events: u64,
        bytes: u64,
        last_activity: Option<Timestamp>,
    ) -> Summary {
        Summary {
            title_key: title.as_deref().unwrap_or("").to_lowercase(),
            id,
            title,
            turns,
            events,
            bytes,
            last_activity,
        }
    }
}

/// What a request asks of the list.
#[derive(Clone, Copy, Debug)]
pub struct Ask<'a> {
    /// Words the title must contain, lowercased; empty: every conversation.
    pub needle: &'a str,
    /// The column sorted by.
    pub sort: SortKey,
    /// Its order.
    pub order: Order,
    /// The page, from 1 (past the last: the last).
    pub page: usize,
    /// Rows per page.
    pub per_page: usize,
}

/// One page of the list.
#[derive(Debug)]
pub struct Page {
    /// The rows of the page, in order.
    pub rows: Vec<Summary>,
    /// How many conversations match (on every page).
    pub total: usize,
    /// The page shown (the one asked for, or the last).
    pub page: usize,
    /// How many pages there are (at least 1).
    pub pages: usize,
    /// The conversations that cannot be read, and why.
    pub failed: Vec<(ConversationId, Error)>,
}

/// The summaries, by conversation.
#[derive(Debug, Default)]
pub struct Index {
    kept: Mutex<HashMap<ConversationId, Kept>>,
}

#[derive(Debug)]
struct Kept {
    /// The metadata of the log when the summary was read (`None`: it could
    /// not be taken, so the summary is read again next time).
    log: Option<ObjectMeta>,
    summary: Summary,
}

impl Index {
    /// An empty index: the first request reads every conversation.
    pub fn new() -> Index {
        Index::default()
    }

    /// The page `ask` asks for, the summaries brought up to date first.
    pub fn page(&self, store: &Store, ask: &Ask<'_>) -> Result<Page, Error> {
        // One request refreshes at a time; another waits, then finds little
        // left to read. (A poisoned lock is taken over: every entry is
        // replaced whole, so none is half updated.)
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let failed = refresh(store, &mut kept)?;
        let matching: Vec<&Summary> = kept
            .values()
            .map(|k| &k.summary)
            .filter(|s| ask.needle.is_empty() || s.title_key.contains(ask.needle))
            .collect();
        let total = matching.len();
        let per_page = ask.per_page.max(1);
        let pages = total.div_ceil(per_page).max(1);
        let page = ask.page.clamp(1, pages);
        let rows = select(
            matching,
            ask.sort,
            ask.order,
            (page - 1) * per_page,
            per_page,
        )
        .into_iter()
        .cloned()
        .collect();
        Ok(Page {
            rows,
            total,
            page,
            pages,
            failed,
        })
    }
}

/// Brings `kept` up to date with the store: new conversations read, those
/// whose log changed read again, those removed dropped. Returns the
/// conversations that cannot be read.
fn refresh(
    store: &Store,
    kept: &mut HashMap<ConversationId, Kept>,
) -> Result<Vec<(ConversationId, Error)>, Error> {
    let backend = &**store.backend();
    let dir = Path::new(CONVERSATIONS_DIR);
    let listed = backend.list(dir).map_err(|source| Error::Io {
        op: "list",
        path: backend.display(dir),
        source,
    })?;
    let mut present = HashSet::with_capacity(listed.len());
    let mut failed = Vec::new();
    for entry in listed {
        let Ok(id) = ConversationId::parse(&entry.name) else {
            continue;
        };
        // As `Store::ids`: no log, no conversation (one being created or
        // removed); a log whose metadata cannot be taken is read, and
        // reading it says what is wrong.
        let log = match backend.head(&id.log_path()) {
            Ok(meta) => Some(meta),
            Err(e) if is_absent(&e) => continue,
            Err(_) => None,
        };
        present.insert(id.clone());
        if let (Some(log), Some(k)) = (&log, kept.get(&id)) {
            if k.log.as_ref() == Some(log) {
                continue;
            }
        }
        match read_state(backend, &id, store.options().log) {
            Ok((state, log_bytes)) => {
                let summary = Summary::new(
                    id.clone(),
                    state.metadata.title().map(str::to_owned),
                    state.turns(),
                    state.entries,
                    state.content_bytes.saturating_add(log_bytes),
                    state.last_activity(),
                );
                kept.insert(id, Kept { log, summary });
            }
            Err(e) => {
                kept.remove(&id);
                // Removed since it was listed: gone, not failed.
                if store.gone_since_listed(&id, &e) {
                    present.remove(&id);
                } else {
                    failed.push((id, e));
                }
            }
        }
    }
    kept.retain(|id, _| present.contains(id));
    failed.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(failed)
}

fn is_absent(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
    )
}

/// The order of the list: by `key`, the id breaking ties (so that it is
/// total and a page is the same at each request).
fn compare(a: &Summary, b: &Summary, key: SortKey, order: Order) -> Ordering {
    let (a, b) = match order {
        Order::Ascending => (a, b),
        Order::Descending => (b, a),
    };
    let by_key = match key {
        SortKey::Activity => a.last_activity.cmp(&b.last_activity),
        SortKey::Title => a.title_key.cmp(&b.title_key),
        SortKey::Turns => a.turns.cmp(&b.turns),
        SortKey::Events => a.events.cmp(&b.events),
        SortKey::Size => a.bytes.cmp(&b.bytes),
        SortKey::Id => Ordering::Equal,
    };
    by_key.then_with(|| a.id.cmp(&b.id))
}

/// The `len` rows from position `start` of `rows` in the order of `key`
/// and `order`, in that order: two selections (linear in `rows`) and a sort
/// of the page only.
fn select(
    mut rows: Vec<&Summary>,
    key: SortKey,
    order: Order,
    start: usize,
    len: usize,
) -> Vec<&Summary> {
    let cmp = |a: &&Summary, b: &&Summary| compare(a, b, key, order);
    let end = start.saturating_add(len);
    if end < rows.len() {
        // The `end` first rows, in some order.
        rows.select_nth_unstable_by(end, cmp);
        rows.truncate(end);
    }
    if start >= rows.len() {
        return Vec::new();
    }
    if start > 0 {
        rows.select_nth_unstable_by(start, cmp);
        rows.drain(..start);
    }
    rows.sort_unstable_by(cmp);
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, title: Option<&str>, turns: u64) -> Summary {
        Summary::new(
            ConversationId::parse(id).expect("id"),
            title.map(str::to_owned),
            turns,
            turns * 2,
            turns % 3,
            None,
        )
    }

    fn ids(rows: &[&Summary]) -> Vec<String> {
        rows.iter().map(|r| r.id.as_str().to_owned()).collect()
    }

    #[test]
    fn sorts_by_each_key_with_the_id_breaking_ties() {
        let rows = [
            row("c", Some("beta"), 2),
            row("a", Some("Alpha"), 5),
            row("d", None, 2),
            row("b", Some("alpha"), 1),
        ];
        let all = |key, order| ids(&select(rows.iter().collect(), key, order, 0, 10));
        assert_eq!(all(SortKey::Title, Order::Ascending), ["d", "a", "b", "c"]);
        assert_eq!(all(SortKey::Title, Order::Descending), ["c", "b", "a", "d"]);
        assert_eq!(all(SortKey::Turns, Order::Descending), ["a", "d", "c", "b"]);
        assert_eq!(all(SortKey::Turns, Order::Ascending), ["b", "c", "d", "a"]);
        assert_eq!(all(SortKey::Id, Order::Ascending), ["a", "b", "c", "d"]);
    }

    #[test]
    fn each_page_is_that_part_of_the_whole_sort() {
        let rows: Vec<Summary> = (0..97u64)
            .map(|i| {
                let title = format!("t{}", (i * 37) % 11);
                row(&format!("c{i:03}"), Some(&title), (i * 13) % 7)
            })
            .collect();
        for key in SortKey::ALL {
            for order in [Order::Ascending, Order::Descending] {
                let whole = ids(&select(rows.iter().collect(), key, order, 0, rows.len()));
                let mut expected: Vec<&Summary> = rows.iter().collect();
                expected.sort_by(|a, b| compare(a, b, key, order));
                assert_eq!(whole, ids(&expected), "{key:?} {order:?}");
                for per_page in [1, 10, 50, 97, 200] {
                    let mut pages = Vec::new();
                    for start in (0..rows.len()).step_by(per_page) {
                        pages.extend(ids(&select(
                            rows.iter().collect(),
                            key,
                            order,
                            start,
                            per_page,
                        )));
                    }
                    assert_eq!(pages, whole, "{key:?} {order:?} by {per_page}");
                }
                assert!(select(rows.iter().collect(), key, order, 97, 10).is_empty());
            }
        }
    }
}
