//! The conversation list (`/`): title, turns, events, size and last
//! activity of every conversation, sorted, searched by title, a page at a
//! time.
//!
//! Sorting needs every conversation's counts: they come from the server's
//! [`Index`] of summaries, read as `jp-store ls` reads a conversation's
//! state (head cache plus the records after it) but without rewriting a
//! stale head (the server writes nothing to the store), and read again only
//! when a log changed. What is rendered is one page.

use jpstore_engine::error::Error;
use jpstore_engine::Store;

use super::html::{Attr, Html, Tag, Void};
use super::index::{Ask, Index, Summary};
use super::layout::{count, counted, page, pager, size, time, Section};
use super::url::{ConversationQuery, Link, ListQuery, Order, SortKey};

/// Conversations per page.
pub const PER_PAGE: usize = 50;

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
    }))
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
                h.text("Title contains ");
                h.void(
                    Void::Input,
                    &[
                        Attr::Type("search"),
                        Attr::Name("q"),
                        Attr::Value(&query.search),
                        Attr::Placeholder("search titles"),
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
