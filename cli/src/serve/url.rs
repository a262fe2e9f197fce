//! The server's URLs: parsing a request target into a [`Route`] and making
//! [`Link`]s to pages.
//!
//! A path reaches nothing but the routes below: its segments are compared
//! with fixed names, and the one variable segment of a route is parsed by
//! [`ConversationId::parse`] or [`BlobId::parse`], which accept only ids
//! (no `/`, `.`, `%` or `..`). Nothing in a URL names a file; the static
//! files are compiled into the binary. Anything else is [`NotFound`].

use std::fmt::Write as _;

use jpstore_blobstore::BlobId;
use jpstore_engine::conversation::ConversationId;

/// A URL of this server, made only by the constructors here (so an `href`
/// can never hold `javascript:` or another site). Query values are
/// percent-encoded; the whole is escaped again when written into a page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link(String);

impl Link {
    /// The URL as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The conversation list as `query` asks for it.
    pub fn list(query: &ListQuery) -> Link {
        Link(with_query("/".into(), &query.pairs()))
    }

    /// A page of a conversation.
    pub fn conversation(id: &ConversationId, query: &ConversationQuery) -> Link {
        Link(with_query(format!("/conversations/{id}"), &query.pairs()))
    }

    /// A page of a conversation, at turn `turn`'s heading.
    pub fn conversation_turn(id: &ConversationId, query: &ConversationQuery, turn: u64) -> Link {
        let mut link = Link::conversation(id, query);
        let _ = write!(link.0, "#turn-{turn}");
        link
    }

    /// The statistics of one conversation, with its plot.
    pub fn conversation_stats(id: &ConversationId) -> Link {
        Link(format!("/conversations/{id}/stats"))
    }

    /// The SVG plot of a conversation's tokens per turn.
    pub fn plot(id: &ConversationId) -> Link {
        Link(format!("/conversations/{id}/plot.svg"))
    }

    /// The statistics of the store.
    pub fn stats() -> Link {
        Link("/stats".into())
    }

    /// One blob's content, to be shown as `mime_type` says where that is
    /// safe (see `blob::response_type`), or downloaded.
    pub fn blob(id: &BlobId, mime_type: Option<&str>, download: bool) -> Link {
        let mut pairs = Vec::new();
        if let Some(m) = mime_type {
            pairs.push(("type", m.to_owned()));
        }
        if download {
            pairs.push(("download", "1".to_owned()));
        }
        Link(with_query(format!("/blobs/{id}"), &pairs))
    }

    /// The first part of a blob's content, as text.
    pub fn blob_preview(id: &BlobId) -> Link {
        Link(format!("/blobs/{id}/preview"))
    }

    /// The stylesheet.
    pub fn stylesheet() -> Link {
        Link(format!("/static/{}", StaticFile::Stylesheet.name()))
    }

    /// The page script.
    pub fn script() -> Link {
        Link(format!("/static/{}", StaticFile::Script.name()))
    }

    /// The pages' icon.
    pub fn icon() -> Link {
        Link(format!("/static/{}", StaticFile::Icon.name()))
    }
}

fn with_query(mut path: String, pairs: &[(&str, String)]) -> String {
    for (i, (key, value)) in pairs.iter().enumerate() {
        path.push(if i == 0 { '?' } else { '&' });
        path.push_str(key);
        path.push('=');
        percent_encode_into(&mut path, value);
    }
    path
}

/// Appends `value` percent-encoded: every byte but the unreserved ones of
/// RFC 3986 (`A-Z a-z 0-9 - . _ ~`).
pub fn percent_encode_into(out: &mut String, value: &str) {
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
}

/// Decodes a query component: `+` is a space, `%XX` a byte; a `%` not
/// followed by two hex digits stays as it is; bytes that are not UTF-8
/// become U+FFFD.
pub fn percent_decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => match (hex_digit(bytes.get(i + 1)), hex_digit(bytes.get(i + 2))) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex_digit(b: Option<&u8>) -> Option<u8> {
    let b = *b?;
    (b as char).to_digit(16).and_then(|d| u8::try_from(d).ok())
}

/// The pairs of a query string, decoded, in order.
pub fn query_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (percent_decode(k), percent_decode(v)),
            None => (percent_decode(p), String::new()),
        })
        .collect()
}

fn last_value<'q>(pairs: &'q [(String, String)], key: &str) -> Option<&'q str> {
    pairs
        .iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// A 1-based page number from a query value; anything else is page 1.
fn page_number(value: Option<&str>) -> usize {
    value
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n >= 1)
        .unwrap_or(1)
}

/// Longest search the list page takes (characters; more are cut).
const MAX_SEARCH_CHARS: usize = 200;

/// What the conversation list is sorted by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    /// Latest event.
    Activity,
    /// Title (case-insensitive).
    Title,
    /// Number of turns.
    Turns,
    /// Number of events.
    Events,
    /// Bytes of content referenced plus the log.
    Size,
    /// Id.
    Id,
}

impl SortKey {
    /// Every key, in the order of the list's columns.
    pub const ALL: [SortKey; 6] = [
        SortKey::Id,
        SortKey::Title,
        SortKey::Turns,
        SortKey::Events,
        SortKey::Size,
        SortKey::Activity,
    ];

    /// The name in URLs.
    pub fn name(self) -> &'static str {
        match self {
            SortKey::Activity => "activity",
            SortKey::Title => "title",
            SortKey::Turns => "turns",
            SortKey::Events => "events",
            SortKey::Size => "size",
            SortKey::Id => "id",
        }
    }

    fn parse(s: &str) -> Option<SortKey> {
        SortKey::ALL.into_iter().find(|k| k.name() == s)
    }

    /// The order a click on the column first sorts in: largest and latest
    /// first, names from A.
    pub fn default_order(self) -> Order {
        match self {
            SortKey::Title | SortKey::Id => Order::Ascending,
            SortKey::Activity | SortKey::Turns | SortKey::Events | SortKey::Size => {
                Order::Descending
            }
        }
    }
}

/// Ascending or descending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Smallest first.
    Ascending,
    /// Largest first.
    Descending,
}

impl Order {
    fn name(self) -> &'static str {
        match self {
            Order::Ascending => "asc",
            Order::Descending => "desc",
        }
    }

    /// The other order.
    pub fn reversed(self) -> Order {
        match self {
            Order::Ascending => Order::Descending,
            Order::Descending => Order::Ascending,
        }
    }
}

/// The query of the conversation list: `?q=&sort=&order=&page=`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    /// Words the title must contain (case-insensitive); empty: every
    /// conversation.
    pub search: String,
    /// The sort key.
    pub sort: SortKey,
    /// The order.
    pub order: Order,
    /// The page, from 1.
    pub page: usize,
}

impl Default for ListQuery {
    fn default() -> Self {
        ListQuery {
            search: String::new(),
            sort: SortKey::Activity,
            order: SortKey::Activity.default_order(),
            page: 1,
        }
    }
}

impl ListQuery {
    fn parse(pairs: &[(String, String)]) -> ListQuery {
        let sort = last_value(pairs, "sort")
            .and_then(SortKey::parse)
            .unwrap_or(SortKey::Activity);
        let order = match last_value(pairs, "order") {
            Some("asc") => Order::Ascending,
            Some("desc") => Order::Descending,
            _ => sort.default_order(),
        };
        ListQuery {
            search: last_value(pairs, "q")
                .map(|q| q.trim().chars().take(MAX_SEARCH_CHARS).collect())
                .unwrap_or_default(),
            sort,
            order,
            page: page_number(last_value(pairs, "page")),
        }
    }

    /// The query's pairs, defaults left out.
    fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut pairs = Vec::new();
        if !self.search.is_empty() {
            pairs.push(("q", self.search.clone()));
        }
        if self.sort != SortKey::Activity {
            pairs.push(("sort", self.sort.name().to_owned()));
        }
        if self.order != self.sort.default_order() {
            pairs.push(("order", self.order.name().to_owned()));
        }
        if self.page != 1 {
            pairs.push(("page", self.page.to_string()));
        }
        pairs
    }
}

/// Which history a conversation page shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViewMode {
    /// Every logged entry, as it was logged.
    Raw,
    /// What the model is sent: compactions applied, orphans repaired,
    /// resources deduplicated.
    Model,
}

/// The query of a conversation page: `?view=raw|model&page=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConversationQuery {
    /// Which history.
    pub view: ViewMode,
    /// The page of turns, from 1.
    pub page: usize,
}

impl Default for ConversationQuery {
    fn default() -> Self {
        ConversationQuery {
            view: ViewMode::Raw,
            page: 1,
        }
    }
}

impl ConversationQuery {
    fn parse(pairs: &[(String, String)]) -> ConversationQuery {
        ConversationQuery {
            view: match last_value(pairs, "view") {
                Some("model") => ViewMode::Model,
                _ => ViewMode::Raw,
            },
            page: page_number(last_value(pairs, "page")),
        }
    }

    fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut pairs = Vec::new();
        if self.view == ViewMode::Model {
            pairs.push(("view", "model".to_owned()));
        }
        if self.page != 1 {
            pairs.push(("page", self.page.to_string()));
        }
        pairs
    }
}

/// The query of a blob: `?type=<mime type>&download=1`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BlobQuery {
    /// The MIME type the page that links to it knows for it.
    pub mime_type: Option<String>,
    /// Whether to send it as a download.
    pub download: bool,
}

/// A file compiled into the binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StaticFile {
    /// `style.css`.
    Stylesheet,
    /// `app.js`: fetches a folded blob's content when it is unfolded.
    Script,
    /// `favicon.svg`: the pages' icon (so that a browser does not ask for
    /// `/favicon.ico`).
    Icon,
}

impl StaticFile {
    /// Its name under `/static/`.
    pub fn name(self) -> &'static str {
        match self {
            StaticFile::Stylesheet => "style.css",
            StaticFile::Script => "app.js",
            StaticFile::Icon => "favicon.svg",
        }
    }
}

/// A page or file of the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `/`: the conversation list.
    List(ListQuery),
    /// `/conversations/<id>`.
    Conversation(ConversationId, ConversationQuery),
    /// `/conversations/<id>/stats`.
    ConversationStats(ConversationId),
    /// `/conversations/<id>/plot.svg`.
    Plot(ConversationId),
    /// `/stats`.
    Stats,
    /// `/blobs/<sha256>`.
    Blob(BlobId, BlobQuery),
    /// `/blobs/<sha256>/preview`.
    BlobPreview(BlobId),
    /// `/static/<name>`.
    Static(StaticFile),
}

/// Why a request target is not a page: shown on the 404 page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotFound {
    /// What is wrong, for a person.
    pub reason: String,
}

impl NotFound {
    fn no_page() -> NotFound {
        NotFound {
            reason: "there is no such page".into(),
        }
    }
}

/// The route of a request target (`/path?query`, as the request line has
/// it: not decoded).
pub fn route(target: &str) -> Result<Route, NotFound> {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let path = path.split_once('#').map_or(path, |(p, _)| p);
    let pairs = query_pairs(query);
    let Some(rest) = path.strip_prefix('/') else {
        return Err(NotFound::no_page());
    };
    let segments: Vec<&str> = rest.split('/').collect();
    let conversation = |s: &str| {
        ConversationId::parse(s).map_err(|_| NotFound {
            reason: "that is not a conversation id".into(),
        })
    };
    let blob = |s: &str| {
        BlobId::parse(s).map_err(|_| NotFound {
            reason: "that is not a blob id (64 lowercase hexadecimal digits)".into(),
        })
    };
    Ok(match segments.as_slice() {
        [""] => Route::List(ListQuery::parse(&pairs)),
        ["stats"] => Route::Stats,
        ["conversations", id] => {
            Route::Conversation(conversation(id)?, ConversationQuery::parse(&pairs))
        }
        ["conversations", id, "stats"] => Route::ConversationStats(conversation(id)?),
        ["conversations", id, "plot.svg"] => Route::Plot(conversation(id)?),
        ["blobs", id] => Route::Blob(
            blob(id)?,
            BlobQuery {
                mime_type: last_value(&pairs, "type").map(str::to_owned),
                download: last_value(&pairs, "download").is_some_and(|v| v == "1"),
            },
        ),
        ["blobs", id, "preview"] => Route::BlobPreview(blob(id)?),
        ["static", name] => match [StaticFile::Stylesheet, StaticFile::Script, StaticFile::Icon]
            .into_iter()
            .find(|f| f.name() == *name)
        {
            Some(file) => Route::Static(file),
            None => return Err(NotFound::no_page()),
        },
        _ => return Err(NotFound::no_page()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> ConversationId {
        ConversationId::parse(s).expect("id")
    }

    #[test]
    fn pages_route_and_links_round_trip() {
        let query = ListQuery {
            search: "a&b=c d/é".into(),
            sort: SortKey::Turns,
            order: Order::Ascending,
            page: 3,
        };
        let link = Link::list(&query);
        assert_eq!(
            link.as_str(),
            "/?q=a%26b%3Dc%20d%2F%C3%A9&sort=turns&order=asc&page=3"
        );
        assert_eq!(route(link.as_str()), Ok(Route::List(query)));
        assert_eq!(Link::list(&ListQuery::default()).as_str(), "/");
        let c = ConversationQuery {
            view: ViewMode::Model,
            page: 2,
        };
        let link = Link::conversation(&id("17381"), &c);
        assert_eq!(link.as_str(), "/conversations/17381?view=model&page=2");
        assert_eq!(
            route(link.as_str()),
            Ok(Route::Conversation(id("17381"), c))
        );
        let b = BlobId::of(b"x");
        let link = Link::blob(&b, Some("image/png"), true);
        assert_eq!(
            route(link.as_str()),
            Ok(Route::Blob(
                b,
                BlobQuery {
                    mime_type: Some("image/png".into()),
                    download: true
                }
            ))
        );
        assert_eq!(
            route(Link::blob_preview(&b).as_str()),
            Ok(Route::BlobPreview(b))
        );
        assert_eq!(
            route(Link::plot(&id("a_b-c")).as_str()),
            Ok(Route::Plot(id("a_b-c")))
        );
        assert_eq!(route("/stats"), Ok(Route::Stats));
        assert_eq!(
            route("/static/style.css"),
            Ok(Route::Static(StaticFile::Stylesheet))
        );
    }

    #[test]
    fn nothing_else_is_a_page() {
        for target in [
            "",
            "stats",
            "//",
            "/conversations",
            "/conversations/",
            "/conversations/..",
            "/conversations/..%2f..%2fetc%2fpasswd",
            "/conversations/../../etc/passwd",
            "/conversations/%2e%2e",
            "/conversations/a/../b",
            "/conversations/-x",
            "/conversations/17381/",
            "/conversations/17381/plot.svg/x",
            "/blobs/../../config.toml",
            "/blobs/ABCDEF",
            "/blobs/0000000000000000000000000000000000000000000000000000000000000000/x",
            "/static/",
            "/static/../Cargo.toml",
            "/static/style.css/",
            "/static/%2e%2e%2fCargo.toml",
            "/favicon.ico",
            "http://example.com/",
            "*",
        ] {
            assert!(
                route(target).is_err(),
                "{target:?} routed: {:?}",
                route(target)
            );
        }
    }

    #[test]
    fn bad_query_values_fall_back_to_defaults() {
        let Ok(Route::List(q)) = route("/?sort=%3Cscript%3E&order=up&page=-1&page=x&q=%zz+%41")
        else {
            panic!("not the list");
        };
        assert_eq!(q.sort, SortKey::Activity);
        assert_eq!(q.order, Order::Descending);
        assert_eq!(q.page, 1);
        assert_eq!(q.search, "%zz A");
        let long = "x".repeat(1000);
        let Ok(Route::List(q)) = route(&format!("/?q={long}")) else {
            panic!("not the list");
        };
        assert_eq!(q.search.len(), MAX_SEARCH_CHARS);
        assert_eq!(percent_decode("%ff%fe"), "\u{fffd}\u{fffd}");
    }
}
