//! Statistics: of the store (`/stats`), of one conversation
//! (`/conversations/<id>/stats`), and the plot `jp-store stats --plot`
//! draws (`/conversations/<id>/plot.svg`), shown as an image.
//!
//! The store's statistics read every conversation, as `jp-store stats`
//! does; they are not a page to reload every second on a large store.

use jpstore_engine::conversation::ConversationId;
use jpstore_engine::error::Error;
use jpstore_engine::internal::stats::plot::tokens_per_turn_svg;
use jpstore_engine::internal::StoreInterior as _;
use jpstore_engine::stats::tokens;
use jpstore_engine::stats::{ContextSizes, Saved, StoreStats};
use jpstore_engine::Store;

use super::html::{Attr, Html, Tag, Void};
use super::layout::{count, page, size, Section};
use super::url::{ConversationQuery, Link};

/// Conversations listed by size on the store's page.
const LARGEST_LISTED: usize = 20;
/// Of those, how many have their plot on the page.
const LARGEST_PLOTTED: usize = 3;

/// The statistics of the store.
pub fn store_page(store: &Store) -> Result<String, Error> {
    let mut stats = jpstore_engine::stats::of_conversations(store, &store.ids()?)?;
    stats.blob_store = Some(jpstore_engine::stats::of_blob_store(store)?);
    let mut largest: Vec<&(ConversationId, ContextSizes)> = stats.conversations.iter().collect();
    largest.sort_by(|a, b| b.1.raw.cmp(&a.1.raw).then_with(|| a.0.cmp(&b.0)));
    largest.truncate(LARGEST_LISTED);
    Ok(page("Statistics", Section::Stats, |h| {
        h.el_text(Tag::H1, &[], "Store statistics");
        totals(h, &stats);
        if !stats.failed.is_empty() {
            h.el_text(Tag::H2, &[], "Not counted");
            h.el(Tag::Ul, &[Attr::Class("failed")], |h| {
                for (id, e) in &stats.failed {
                    h.el(Tag::Li, &[], |h| {
                        h.el_text(Tag::Code, &[], id.as_str());
                        h.text(": ");
                        h.text(&e.to_string());
                    });
                }
            });
        }
        if largest.is_empty() {
            return;
        }
        h.el_text(Tag::H2, &[], "Largest conversations");
        h.el(Tag::Table, &[Attr::Class("list")], |h| {
            h.el(Tag::Thead, &[], |h| {
                h.el(Tag::Tr, &[], |h| {
                    for (name, class) in [
                        ("conversation", "text"),
                        ("turns", "number"),
                        ("logged, tokens", "number"),
                        ("sent, tokens", "number"),
                        ("saved by compaction", "number"),
                        ("saved by deduplication", "number"),
                    ] {
                        h.el_text(Tag::Th, &[Attr::Class(class)], name);
                    }
                });
            });
            h.el(Tag::Tbody, &[], |h| {
                for (id, sizes) in &largest {
                    h.el(Tag::Tr, &[], |h| {
                        h.el(Tag::Td, &[], |h| {
                            h.el_text(
                                Tag::A,
                                &[Attr::Href(&Link::conversation_stats(id))],
                                id.as_str(),
                            );
                        });
                        let number = |h: &mut Html, text: &str| {
                            h.el_text(Tag::Td, &[Attr::Class("number")], text);
                        };
                        number(h, &count(sizes.raw_per_turn.len() as u64));
                        number(h, &count(tokens(sizes.raw)));
                        number(h, &count(tokens(sizes.view)));
                        number(h, &saved(sizes.saved_by_compaction()));
                        number(h, &saved(sizes.saved_by_deduplication()));
                    });
                }
            });
        });
        h.el_text(Tag::H2, &[], "Tokens per turn of the largest");
        for (id, _) in largest.iter().take(LARGEST_PLOTTED) {
            plot(h, id);
        }
    }))
}

/// The statistics of conversation `id`, with its plot.
pub fn conversation_page(store: &Store, id: &ConversationId) -> Result<String, Error> {
    let stats = jpstore_engine::stats::of_conversation(store, id)?;
    let title = format!("Statistics of {id}");
    Ok(page(&title, Section::Stats, |h| {
        h.el_text(Tag::H1, &[], &title);
        h.el(Tag::P, &[], |h| {
            h.el_text(
                Tag::A,
                &[Attr::Href(&Link::conversation(
                    id,
                    &ConversationQuery::default(),
                ))],
                "the conversation",
            );
        });
        plot(h, id);
        totals(h, &stats);
    }))
}

/// The plot of conversation `id`, as `jp-store stats --plot` writes it.
pub fn plot_svg(store: &Store, id: &ConversationId) -> Result<String, Error> {
    let conv = store.read(id)?;
    let sizes = store.context_sizes(&conv)?;
    Ok(tokens_per_turn_svg(id, &sizes))
}

fn plot(h: &mut Html, id: &ConversationId) {
    h.el(Tag::P, &[Attr::Class("plot")], |h| {
        h.void(
            Void::Img,
            &[
                Attr::Src(&Link::plot(id)),
                Attr::Alt(&format!("{id}: estimated tokens per turn, logged and sent")),
                Attr::Width(900),
                Attr::Height(460),
            ],
        );
    });
}

fn saved(s: Saved) -> String {
    format!(
        "{} B (~{} tokens)",
        count_signed(s.bytes),
        count_signed(s.tokens)
    )
}

fn count_signed(n: i64) -> String {
    if n < 0 {
        format!("−{}", count(n.unsigned_abs()))
    } else {
        count(n.unsigned_abs())
    }
}

/// The figures `jp-store stats` prints, as tables.
fn totals(h: &mut Html, stats: &StoreStats) {
    let c = &stats.context;
    let rows: Vec<(&str, String)> = vec![
        ("conversations", count(stats.conversations.len() as u64)),
        ("turns", count(stats.turns)),
        (
            "entries",
            format!(
                "{} in {} records, log {}",
                count(stats.entries),
                count(stats.records),
                size(stats.log_bytes)
            ),
        ),
        (
            "content",
            format!(
                "{} references to {} ({} distinct blobs, {})",
                count(stats.content_references),
                size(stats.content_bytes_referenced),
                count(stats.distinct_blobs_referenced as u64),
                size(stats.distinct_blob_bytes_referenced)
            ),
        ),
        (
            "context logged",
            format!("{} B (~{} tokens)", count(c.raw), count(tokens(c.raw))),
        ),
        (
            "context sent",
            format!("{} B (~{} tokens)", count(c.view), count(tokens(c.view))),
        ),
        ("saved by compaction", saved(c.saved_by_compaction())),
        (
            "saved by deduplication",
            format!(
                "{}, {} resources replaced by references",
                saved(c.saved_by_deduplication()),
                count(c.replaced)
            ),
        ),
    ];
    h.el(Tag::Table, &[Attr::Class("facts")], |h| {
        h.el(Tag::Tbody, &[], |h| {
            for (name, value) in &rows {
                h.el(Tag::Tr, &[], |h| {
                    h.el_text(Tag::Th, &[], name);
                    h.el_text(Tag::Td, &[], value);
                });
            }
            if let Some(b) = &stats.blob_store {
                h.el(Tag::Tr, &[], |h| {
                    h.el_text(Tag::Th, &[], "blob store");
                    h.el_text(
                        Tag::Td,
                        &[],
                        &format!(
                            "{} loose objects ({}), {} packs with {} objects ({})",
                            count(b.loose_objects as u64),
                            size(b.loose_bytes),
                            count(b.packs as u64),
                            count(b.packed_objects as u64),
                            size(b.pack_bytes)
                        ),
                    );
                });
            }
        });
    });
    if stats.entries_by_type.is_empty() {
        return;
    }
    h.el_text(Tag::H2, &[], "Entries by type");
    h.el(Tag::Table, &[Attr::Class("facts")], |h| {
        h.el(Tag::Tbody, &[], |h| {
            for (kind, n) in &stats.entries_by_type {
                h.el(Tag::Tr, &[], |h| {
                    h.el_text(Tag::Th, &[], kind);
                    h.el_text(Tag::Td, &[Attr::Class("number")], &count(*n));
                });
            }
        });
    });
}
