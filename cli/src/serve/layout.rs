//! The frame every page shares (head, navigation, footer), the error pages,
//! and small formatting helpers of the pages.

use jpstore_engine::timestamp::Timestamp;

use super::html::{Attr, Html, Tag, Void};
use super::url::{Link, ListQuery};

/// Which part of the site a page belongs to (marked in the navigation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// The list and the conversations.
    Conversations,
    /// Statistics.
    Stats,
    /// Neither (an error page).
    None,
}

/// A whole page: `title` in the head and the navigation, `body` in `<main>`.
pub fn page(title: &str, section: Section, body: impl FnOnce(&mut Html)) -> String {
    let mut h = Html::new();
    h.el(Tag::Html, &[Attr::Lang("en")], |h| {
        h.el(Tag::Head, &[], |h| {
            h.void(Void::Meta, &[Attr::Charset("utf-8")]);
            h.void(
                Void::Meta,
                &[
                    Attr::Name("viewport"),
                    Attr::Content("width=device-width, initial-scale=1"),
                ],
            );
            h.el_text(Tag::Title, &[], &format!("{title} · jp-store"));
            h.void(
                Void::Link,
                &[Attr::Rel("stylesheet"), Attr::Href(&Link::stylesheet())],
            );
            h.void(Void::Link, &[Attr::Rel("icon"), Attr::Href(&Link::icon())]);
            h.script_src(&Link::script());
        });
        h.el(Tag::Body, &[], |h| {
            h.el(Tag::Header, &[], |h| {
                h.el(Tag::Nav, &[Attr::AriaLabel("site")], |h| {
                    h.el_text(Tag::Strong, &[Attr::Class("brand")], "jp-store");
                    let list = Link::list(&ListQuery::default());
                    nav_link(h, &list, "Conversations", section == Section::Conversations);
                    nav_link(h, &Link::stats(), "Statistics", section == Section::Stats);
                    h.el_text(Tag::Span, &[Attr::Class("read-only")], "read-only");
                });
            });
            h.el(Tag::Main, &[], body);
        });
    });
    h.into_document()
}

fn nav_link(h: &mut Html, link: &Link, text: &str, current: bool) {
    if current {
        h.el_text(Tag::A, &[Attr::Href(link), Attr::AriaCurrent("page")], text);
    } else {
        h.el_text(Tag::A, &[Attr::Href(link)], text);
    }
}

/// An error page: `heading` and `message`.
pub fn error_page(heading: &str, message: &str) -> String {
    page(heading, Section::None, |h| {
        h.el_text(Tag::H1, &[], heading);
        h.el_text(Tag::P, &[Attr::Class("error")], message);
        h.el(Tag::P, &[], |h| {
            h.el_text(
                Tag::A,
                &[Attr::Href(&Link::list(&ListQuery::default()))],
                "All conversations",
            );
        });
    })
}

/// A human-readable size (`512 B`, `3.4 KiB`).
pub fn size(n: u64) -> String {
    crate::commands::size(n)
}

/// A timestamp to the second, as `ls` shows it, in a `<time>`.
pub fn time(h: &mut Html, t: &Timestamp) {
    // JP's form is UTC, `2025-07-19 14:30:00.123`; `datetime` wants ISO 8601.
    let full = t.to_string();
    let machine = format!("{}Z", full.replace(' ', "T"));
    let short = full.split('.').next().unwrap_or(&full);
    h.el_text(
        Tag::Time,
        &[
            Attr::DateTime(&machine),
            Attr::Title(&format!("{full} UTC")),
        ],
        short,
    );
}

/// `n` and the noun, singular or plural (`1 conversation`, `2 turns`).
pub fn counted(n: u64, one: &str, many: &str) -> String {
    format!("{} {}", count(n), if n == 1 { one } else { many })
}

/// A thousands-separated count (`12,345`).
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Page links: first, previous, "page N of M", next, last. `link(n)` is
/// page `n` (1-based).
pub fn pager(h: &mut Html, page: usize, pages: usize, link: impl Fn(usize) -> Link) {
    if pages <= 1 {
        return;
    }
    h.el(
        Tag::Nav,
        &[Attr::Class("pager"), Attr::AriaLabel("pages")],
        |h| {
            let step = |h: &mut Html, to: usize, text: &str, enabled: bool| {
                if enabled {
                    h.el_text(Tag::A, &[Attr::Href(&link(to))], text);
                } else {
                    h.el_text(Tag::Span, &[Attr::Class("disabled")], text);
                }
            };
            step(h, 1, "« first", page > 1);
            step(h, page.saturating_sub(1).max(1), "‹ previous", page > 1);
            h.el_text(
                Tag::Span,
                &[Attr::Class("position")],
                &format!("page {} of {}", count(page as u64), count(pages as u64)),
            );
            step(h, (page + 1).min(pages), "next ›", page < pages);
            step(h, pages, "last »", page < pages);
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_have_separators() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(1234567), "1,234,567");
    }
}
