//! The conversation list (`/`): title, turns, events, size and last
//! activity of every conversation, sorted, searched by title, a page at a
//! time; with a search, below it the lines of the conversations' content
//! that hold the text (the search of `jp-store grep -i -F`, bounded).
//!
//! Sorting needs every conversation's counts: they come from the server's
//! [`Index`] of summaries, read as `jp-store ls` reads a conversation's
//! state (head cache plus the records after it) but without rewriting a
//! stale head (the server writes nothing to the store), and read again only
//! when a log changed. What is rendered is one page.

use jpstore_engine::conversation::ConversationId;
use jpstore_engine::error::Error;
use jpstore_engine::internal::SearcherInterior as _;
use jpstore_engine::internal::StoreInterior as _;
use jpstore_engine::search::{Hit, SearchOptions, Searcher};
use jpstore_engine::Store;

use super::html::{Attr, Html, Tag, Void};
use super::index::{Ask, Index, Summary};
use super::layout::{count, counted, page, pager, size, time, Section};
use super::url::{ConversationQuery, Link, ListQuery, Order, SortKey};

/// Conversations per page.
pub const PER_PAGE: usize = 50;

/// Lines of content a search shows at most (the newest conversations'
/// first).
pub const CONTENT_HITS: usize = 100;

/// Lines of one conversation's content a search shows at most.
pub const HITS_PER_CONVERSATION: usize = 10;

/// The list page for `query`, its rows from `index`.
pub fn list_page(store: &Store, index: &Index, query: &ListQuery) -> Result<String, Error> {
    let needle = query.search.to_lowercase();
    let listed = index.page(
        store,
        &Ask {
            needle: &needle,
            sort: query.sort,
            order: query.order,
            page: query.page,
            per_page: PER_PAGE,
        },
    )?;
    let (current, pages, total, failed) = (listed.page, listed.pages, listed.total, &listed.failed);
    let found = if query.search.is_empty() {
        ContentSearch::default()
    } else {
        search_content(store, &query.search)?
    };
    Ok(page("Conversations", Section::Conversations, |h| {
        h.el_text(Tag::H1, &[], "Conversations");
        search_form(h, query);
        h.el_text(
            Tag::P,
            &[Attr::Class("summary")],
            &if query.search.is_empty() {
                counted(total as u64, "conversation", "conversations")
            } else {
                format!(
                    "{} with “{}” in the title",
                    counted(total as u64, "conversation", "conversations"),
                    query.search
                )
            },
        );
        if !failed.is_empty() {
            h.el(Tag::Details, &[Attr::Class("failed")], |h| {
                h.el_text(
                    Tag::Summary,
                    &[],
                    &format!(
                        "{} cannot be read (not listed)",
                        counted(failed.len() as u64, "conversation", "conversations")
                    ),
                );
                h.el(Tag::Ul, &[], |h| {
                    for (id, e) in failed {
                        h.el(Tag::Li, &[], |h| {
                            h.el_text(Tag::Code, &[], id.as_str());
                            h.text(": ");
                            h.text(&e.to_string());
                        });
                    }
                });
            });
        }
        h.el(Tag::Table, &[Attr::Class("list")], |h| {
            h.el(Tag::Thead, &[], |h| {
                h.el(Tag::Tr, &[], |h| {
                    for key in SortKey::ALL {
                        header_cell(h, query, key);
                    }
                });
            });
            h.el(Tag::Tbody, &[], |h| {
                for row in &listed.rows {
                    list_row(h, row);
                }
            });
        });
        pager(h, current, pages, |n| {
            Link::list(&ListQuery {
                page: n,
                ..query.clone()
            })
        });
        if !query.search.is_empty() {
            content_hits(h, &found, &query.search);
        }
    }))
}

/// A conversation whose content holds the searched text.
struct Found {
    id: ConversationId,
    title: Option<String>,
    /// Its hits, each with the page of the conversation that shows it.
    hits: Vec<(Hit, usize)>,
    /// Whether it holds more than those.
    more: bool,
}

/// What a content search found.
#[derive(Default)]
struct ContentSearch {
    found: Vec<Found>,
    /// Whether it stopped at [`CONTENT_HITS`].
    stopped: bool,
    /// Conversations (or their blobs) that could not be searched.
    failed: Vec<(ConversationId, String)>,
}

/// Searches the content of the conversations, newest first, for `text`
/// (fixed, case ignored), through `jp-store grep`'s searcher, until
/// [`CONTENT_HITS`] lines are found.
fn search_content(store: &Store, text: &str) -> Result<ContentSearch, Error> {
    let options = SearchOptions {
        fixed: true,
        ignore_case: true,
        max_hits: Some(HITS_PER_CONVERSATION + 1),
        ..SearchOptions::default()
    };
    let mut out = ContentSearch::default();
    // A fixed string is always a valid pattern; one too large to compile
    // finds nothing.
    let Ok(searcher) = Searcher::new(store, text, options) else {
        return Ok(out);
    };
    let mut ids = store.ids()?;
    ids.reverse();
    let mut shown = 0;
    searcher.each_mapped(
        &ids,
        &|conversation| jpstore_engine::internal::event::turns::turn_indices(&conversation.entries),
        |id, outcome| {
            let (mut found, turn_of) = match outcome {
                Ok(o) => o,
                Err(e) if store.gone_since_listed(id, &e) => return true,
                Err(e) => {
                    out.failed.push((id.clone(), e.to_string()));
                    return true;
                }
            };
            for p in &found.problems {
                out.failed
                    .push((id.clone(), format!("blob {}: {}", p.blob, p.error)));
            }
            if found.hits.is_empty() {
                return true;
            }
            let more = found.hits.len() > HITS_PER_CONVERSATION;
            found
                .hits
                .truncate(HITS_PER_CONVERSATION.min(CONTENT_HITS - shown));
            shown += found.hits.len();
            let hits = found
                .hits
                .into_iter()
                .map(|hit| {
                    let page = super::conversation::page_of_entry(&turn_of, hit.entry);
                    (hit, page)
                })
                .collect();
            out.found.push(Found {
                id: id.clone(),
                title: found.title,
                hits,
                more,
            });
            if shown >= CONTENT_HITS {
                out.stopped = true;
                return false;
            }
            true
        },
    );
    Ok(out)
}

/// The section of content hits.
fn content_hits(h: &mut Html, found: &ContentSearch, text: &str) {
    h.el(Tag::Section, &[Attr::Class("content-hits")], |h| {
        h.el_text(Tag::H2, &[], "In the content");
        let lines: usize = found.found.iter().map(|f| f.hits.len()).sum();
        h.el_text(
            Tag::P,
            &[Attr::Class("summary")],
            &if found.stopped {
                format!(
                    "the first {} with “{text}” (the newest conversations first; `jp-store grep -i -F` finds them all)",
                    counted(lines as u64, "line", "lines"),
                )
            } else {
                format!(
                    "{} with “{text}” in {}",
                    counted(lines as u64, "line", "lines"),
                    counted(found.found.len() as u64, "conversation", "conversations")
                )
            },
        );
        for f in &found.found {
            let link = Link::conversation(&f.id, &ConversationQuery::default());
            h.el(Tag::Div, &[Attr::Class("hit-conversation")], |h| {
                h.el(Tag::P, &[], |h| {
                    match &f.title {
                        Some(t) => h.el_text(Tag::A, &[Attr::Href(&link)], t),
                        None => h.el_text(Tag::A, &[Attr::Href(&link)], "(untitled)"),
                    };
                    h.text(" ");
                    h.el_text(Tag::Small, &[], f.id.as_str());
                });
                h.el(Tag::Ul, &[Attr::Class("hits")], |h| {
                    for (hit, page) in &f.hits {
                        let query = ConversationQuery {
                            page: *page,
                            ..ConversationQuery::default()
                        };
                        let at = Link::conversation_turn(&f.id, &query, hit.turn);
                        h.el(Tag::Li, &[], |h| {
                            h.el_text(
                                Tag::A,
                                &[Attr::Href(&at)],
                                &format!("turn {}, {} {}", hit.turn, hit.entry_type, hit.part),
                            );
                            h.text(" ");
                            hit_line(h, hit);
                        });
                    }
                    if f.more {
                        h.el_text(Tag::Li, &[Attr::Class("none")], "more in this conversation");
                    }
                });
            });
        }
        if !found.failed.is_empty() {
            h.el(Tag::Details, &[Attr::Class("failed")], |h| {
                h.el_text(
                    Tag::Summary,
                    &[],
                    &format!("{} not searched", counted(found.failed.len() as u64, "part", "parts")),
                );
                h.el(Tag::Ul, &[], |h| {
                    for (id, e) in &found.failed {
                        h.el(Tag::Li, &[], |h| {
                            h.el_text(Tag::Code, &[], id.as_str());
                            h.text(": ");
                            h.text(e);
                        });
                    }
                });
            });
        }
    });
}

/// The line of a hit, cut to some characters around its match, the match
/// in bold.
fn hit_line(h: &mut Html, hit: &Hit) {
    const AROUND: usize = 80;
    let text = &hit.text;
    let boundary = |i: usize| {
        (0..=i.min(text.len()))
            .rev()
            .find(|&j| text.is_char_boundary(j))
            .unwrap_or(0)
    };
    let (start, end) = (boundary(hit.span.0), boundary(hit.span.1));
    let before: Vec<char> = text[..start].chars().collect();
    let shown_before: String = before[before.len().saturating_sub(AROUND)..]
        .iter()
        .collect();
    let after: String = text[end..].chars().take(AROUND).collect();
    h.el(Tag::Code, &[Attr::Class("hit")], |h| {
        if shown_before.len() < start {
            h.text("…");
        }
        h.text(&shown_before);
        h.el_text(Tag::Strong, &[], &text[start..end]);
        h.text(&after);
        if end + after.len() < text.len() {
            h.text("…");
        }
    });
}

fn search_form(h: &mut Html, query: &ListQuery) {
    let action = Link::list(&ListQuery::default());
    h.el(
        Tag::Form,
        &[
            Attr::Class("search"),
            Attr::Method("get"),
            Attr::Action(&action),
        ],
        |h| {
            h.el(Tag::Label, &[], |h| {
                h.text("Titles and content holding ");
                h.void(
                    Void::Input,
                    &[
                        Attr::Type("search"),
                        Attr::Name("q"),
                        Attr::Value(&query.search),
                        Attr::Placeholder("search titles and content"),
                    ],
                );
            });
            // The sort is kept across searches.
            if query.sort != SortKey::Activity {
                h.void(
                    Void::Input,
                    &[
                        Attr::Type("hidden"),
                        Attr::Name("sort"),
                        Attr::Value(query.sort.name()),
                    ],
                );
            }
            if query.order != query.sort.default_order() {
                let order = match query.order {
                    Order::Ascending => "asc",
                    Order::Descending => "desc",
                };
                h.void(
                    Void::Input,
                    &[
                        Attr::Type("hidden"),
                        Attr::Name("order"),
                        Attr::Value(order),
                    ],
                );
            }
            h.el_text(Tag::Button, &[Attr::Type("submit")], "Search");
        },
    );
}

fn header_cell(h: &mut Html, query: &ListQuery, key: SortKey) {
    let label = match key {
        SortKey::Id => "id",
        SortKey::Title => "title",
        SortKey::Turns => "turns",
        SortKey::Events => "events",
        SortKey::Size => "size",
        SortKey::Activity => "last activity",
    };
    let current = query.sort == key;
    let order = if current {
        query.order.reversed()
    } else {
        key.default_order()
    };
    let link = Link::list(&ListQuery {
        search: query.search.clone(),
        sort: key,
        order,
        page: 1,
    });
    let class = match key {
        SortKey::Turns | SortKey::Events | SortKey::Size => "number",
        _ => "text",
    };
    h.el(Tag::Th, &[Attr::Class(class)], |h| {
        h.el_text(
            Tag::A,
            &[Attr::Href(&link), Attr::Title("sort by this column")],
            label,
        );
        if current {
            let arrow = match query.order {
                Order::Ascending => " ▲",
                Order::Descending => " ▼",
            };
            h.el_text(Tag::Span, &[Attr::Class("arrow")], arrow);
        }
    });
}

fn list_row(h: &mut Html, row: &Summary) {
    let link = Link::conversation(&row.id, &ConversationQuery::default());
    h.el(Tag::Tr, &[], |h| {
        h.el(Tag::Td, &[Attr::Class("id")], |h| {
            h.el_text(Tag::A, &[Attr::Href(&link)], row.id.as_str());
        });
        h.el(Tag::Td, &[Attr::Class("title")], |h| match &row.title {
            Some(t) => {
                h.el_text(Tag::A, &[Attr::Href(&link)], t);
            }
            None => {
                h.el_text(Tag::Span, &[Attr::Class("none")], "(untitled)");
            }
        });
        h.el_text(Tag::Td, &[Attr::Class("number")], &count(row.turns));
        h.el_text(Tag::Td, &[Attr::Class("number")], &count(row.events));
        h.el_text(Tag::Td, &[Attr::Class("number")], &size(row.bytes));
        h.el(Tag::Td, &[Attr::Class("time")], |h| {
            match &row.last_activity {
                Some(t) => time(h, t),
                None => {
                    h.text("–");
                }
            }
        });
    });
}
