//! The conversation list (`/`): title, turns, events, size and last
//! activity of every conversation, sorted, searched by title, a page at a
//! time.
//!
//! Every conversation's state is read as `jp-store ls` reads it, from its
//! head cache plus the records after it (`read_state`), but without
//! rewriting a stale head: the server writes nothing to the store. Sorting
//! needs every conversation's counts; what is rendered is one page.

use std::cmp::Ordering;

use jpstore_engine::conversation::read::read_state;
use jpstore_engine::conversation::ConversationId;
use jpstore_engine::error::Error;
use jpstore_engine::timestamp::Timestamp;
use jpstore_engine::Store;

use super::html::{Attr, Html, Tag, Void};
use super::layout::{count, counted, page, pager, size, time, Section};
use super::url::{ConversationQuery, Link, ListQuery, Order, SortKey};

/// Conversations per page.
pub const PER_PAGE: usize = 50;

/// One conversation as the list shows it.
#[derive(Debug)]
struct Row {
    id: ConversationId,
    title: Option<String>,
    turns: u64,
    events: u64,
    /// Content referenced (with repetitions) plus the log.
    bytes: u64,
    last_activity: Option<Timestamp>,
}

/// The list page for `query`.
pub fn list_page(store: &Store, query: &ListQuery) -> Result<String, Error> {
    let mut rows = Vec::new();
    let mut failed: Vec<(ConversationId, Error)> = Vec::new();
    let needle = query.search.to_lowercase();
    for id in store.ids()? {
        match read_state(&**store.backend(), &id, store.options().log, false) {
            Ok((state, log_bytes)) => {
                let title = state.metadata.title().map(str::to_owned);
                if !needle.is_empty()
                    && !title
                        .as_deref()
                        .is_some_and(|t| t.to_lowercase().contains(&needle))
                {
                    continue;
                }
                rows.push(Row {
                    id,
                    title,
                    turns: state.turns.turns(),
                    events: state.entries,
                    bytes: state.content_bytes.saturating_add(log_bytes),
                    last_activity: state.last_activity(),
                });
            }
            Err(e) => failed.push((id, e)),
        }
    }
    sort(&mut rows, query.sort, query.order);
    let pages = rows.len().div_ceil(PER_PAGE).max(1);
    let current = query.page.min(pages);
    let shown = rows
        .get((current - 1) * PER_PAGE..)
        .unwrap_or(&[])
        .iter()
        .take(PER_PAGE);
    let total = rows.len();
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
                    for (id, e) in &failed {
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
                for row in shown {
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

fn sort(rows: &mut [Row], key: SortKey, order: Order) {
    let compare = |a: &Row, b: &Row| -> Ordering {
        let by_key = match key {
            SortKey::Activity => a.last_activity.cmp(&b.last_activity),
            // Sorted below, each title lowercased once.
            SortKey::Title => Ordering::Equal,
            SortKey::Turns => a.turns.cmp(&b.turns),
            SortKey::Events => a.events.cmp(&b.events),
            SortKey::Size => a.bytes.cmp(&b.bytes),
            SortKey::Id => Ordering::Equal,
        };
        by_key.then_with(|| a.id.cmp(&b.id))
    };
    match (key, order) {
        (SortKey::Title, _) => {
            let mut keyed: Vec<(String, usize)> = rows
                .iter()
                .enumerate()
                .map(|(i, r)| (r.title.as_deref().unwrap_or("").to_lowercase(), i))
                .collect();
            keyed.sort_by(|(ta, ia), (tb, ib)| {
                ta.cmp(tb).then_with(|| rows[*ia].id.cmp(&rows[*ib].id))
            });
            if order == Order::Descending {
                keyed.reverse();
            }
            apply_permutation(rows, keyed.into_iter().map(|(_, i)| i).collect());
        }
        (_, Order::Ascending) => rows.sort_by(compare),
        (_, Order::Descending) => rows.sort_by(|a, b| compare(b, a)),
    }
}

/// Reorders `rows` so that position `k` holds what was at `from[k]`.
fn apply_permutation(rows: &mut [Row], from: Vec<usize>) {
    let mut place: Vec<usize> = vec![0; from.len()];
    for (k, &i) in from.iter().enumerate() {
        place[i] = k;
    }
    // Swap each row into its place; every swap settles one row.
    for i in 0..rows.len() {
        while place[i] != i {
            let j = place[i];
            rows.swap(i, j);
            place.swap(i, j);
        }
    }
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

fn list_row(h: &mut Html, row: &Row) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, title: Option<&str>, turns: u64) -> Row {
        Row {
            id: ConversationId::parse(id).expect("id"),
            title: title.map(str::to_owned),
            turns,
            events: turns * 2,
            bytes: 0,
            last_activity: None,
        }
    }

    fn ids(rows: &[Row]) -> Vec<&str> {
        rows.iter().map(|r| r.id.as_str()).collect()
    }

    #[test]
    fn sorts_by_each_key_with_the_id_breaking_ties() {
        let mut rows = vec![
            row("c", Some("beta"), 2),
            row("a", Some("Alpha"), 5),
            row("d", None, 2),
            row("b", Some("alpha"), 1),
        ];
        sort(&mut rows, SortKey::Title, Order::Ascending);
        assert_eq!(ids(&rows), ["d", "a", "b", "c"]);
        sort(&mut rows, SortKey::Title, Order::Descending);
        assert_eq!(ids(&rows), ["c", "b", "a", "d"]);
        sort(&mut rows, SortKey::Turns, Order::Descending);
        assert_eq!(ids(&rows), ["a", "d", "c", "b"]);
        sort(&mut rows, SortKey::Turns, Order::Ascending);
        assert_eq!(ids(&rows), ["b", "c", "d", "a"]);
        sort(&mut rows, SortKey::Id, Order::Ascending);
        assert_eq!(ids(&rows), ["a", "b", "c", "d"]);
    }
}
