//! A tiny typed HTML writer that cannot forget to escape.
//!
//! Markup is written only through [`Html`]: element names are [`Tag`]s and
//! [`Void`]s, attributes are [`Attr`]s, and every string that goes into a
//! page — text or attribute value, from a conversation or from this
//! program — is escaped on the way in. There is no call that writes a
//! string as markup. What cannot be named cannot be written: no `<script>`
//! with a body, no `<style>`, no `style` or `on*` attribute, and the
//! attributes that hold URLs take a [`Link`], which only the routes of this
//! server make. So a title like `"><img src=x onerror=alert(1)>` is text
//! wherever it lands.

use super::url::Link;

/// An element with content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)] // Each is the HTML element of its name.
pub enum Tag {
    Html,
    Head,
    Title,
    Body,
    Header,
    Nav,
    Main,
    Section,
    H1,
    H2,
    P,
    Div,
    Span,
    A,
    Strong,
    Small,
    Code,
    Pre,
    Time,
    Table,
    Thead,
    Tbody,
    Tr,
    Th,
    Td,
    Details,
    Summary,
    Ul,
    Li,
    Dl,
    Dt,
    Dd,
    Form,
    Label,
    Button,
    /// Only ever empty, with a `src` ([`Html::script_src`]).
    Script,
}

impl Tag {
    fn name(self) -> &'static str {
        match self {
            Tag::Html => "html",
            Tag::Head => "head",
            Tag::Title => "title",
            Tag::Body => "body",
            Tag::Header => "header",
            Tag::Nav => "nav",
            Tag::Main => "main",
            Tag::Section => "section",
            Tag::H1 => "h1",
            Tag::H2 => "h2",
            Tag::P => "p",
            Tag::Div => "div",
            Tag::Span => "span",
            Tag::A => "a",
            Tag::Strong => "strong",
            Tag::Small => "small",
            Tag::Code => "code",
            Tag::Pre => "pre",
            Tag::Time => "time",
            Tag::Table => "table",
            Tag::Thead => "thead",
            Tag::Tbody => "tbody",
            Tag::Tr => "tr",
            Tag::Th => "th",
            Tag::Td => "td",
            Tag::Details => "details",
            Tag::Summary => "summary",
            Tag::Ul => "ul",
            Tag::Li => "li",
            Tag::Dl => "dl",
            Tag::Dt => "dt",
            Tag::Dd => "dd",
            Tag::Form => "form",
            Tag::Label => "label",
            Tag::Button => "button",
            Tag::Script => "script",
        }
    }
}

/// An element without content (no end tag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)] // Each is the HTML element of its name.
pub enum Void {
    Meta,
    Link,
    Input,
    Img,
}

impl Void {
    fn name(self) -> &'static str {
        match self {
            Void::Meta => "meta",
            Void::Link => "link",
            Void::Input => "input",
            Void::Img => "img",
        }
    }
}

/// An attribute. Names are fixed here; every value is escaped when
/// written, and URL attributes take a [`Link`].
#[derive(Debug, Clone, Copy)]
pub enum Attr<'a> {
    /// `class`.
    Class(&'static str),
    /// `id` (an anchor).
    Id(&'a str),
    /// `title` (a tooltip).
    Title(&'a str),
    /// `href`.
    Href(&'a Link),
    /// `src`.
    Src(&'a Link),
    /// `action` of a form.
    Action(&'a Link),
    /// `data-blob`: where the page's script fetches a `<details>`'s content.
    DataBlob(&'a Link),
    /// `name` of a form field or a `<meta>`.
    Name(&'static str),
    /// `value` of a form field.
    Value(&'a str),
    /// `type` of a form field.
    Type(&'static str),
    /// `placeholder` of a form field.
    Placeholder(&'static str),
    /// `content` of a `<meta>`.
    Content(&'static str),
    /// `charset` of a `<meta>`.
    Charset(&'static str),
    /// `rel` of a `<link>`.
    Rel(&'static str),
    /// `lang`.
    Lang(&'static str),
    /// `alt` of an image.
    Alt(&'a str),
    /// `width`.
    Width(u32),
    /// `height`.
    Height(u32),
    /// `datetime` of a `<time>`.
    DateTime(&'a str),
    /// `method` of a form.
    Method(&'static str),
    /// `aria-label`.
    AriaLabel(&'static str),
    /// `aria-current`.
    AriaCurrent(&'static str),
    /// `defer` of a `<script>`.
    Defer,
}

impl Attr<'_> {
    fn name_and_value(&self) -> (&'static str, Option<AttrValue<'_>>) {
        use AttrValue::{Number, Text};
        match *self {
            Attr::Class(v) => ("class", Some(Text(v))),
            Attr::Id(v) => ("id", Some(Text(v))),
            Attr::Title(v) => ("title", Some(Text(v))),
            Attr::Href(l) => ("href", Some(Text(l.as_str()))),
            Attr::Src(l) => ("src", Some(Text(l.as_str()))),
            Attr::Action(l) => ("action", Some(Text(l.as_str()))),
            Attr::DataBlob(l) => ("data-blob", Some(Text(l.as_str()))),
            Attr::Name(v) => ("name", Some(Text(v))),
            Attr::Value(v) => ("value", Some(Text(v))),
            Attr::Type(v) => ("type", Some(Text(v))),
            Attr::Placeholder(v) => ("placeholder", Some(Text(v))),
            Attr::Content(v) => ("content", Some(Text(v))),
            Attr::Charset(v) => ("charset", Some(Text(v))),
            Attr::Rel(v) => ("rel", Some(Text(v))),
            Attr::Lang(v) => ("lang", Some(Text(v))),
            Attr::Alt(v) => ("alt", Some(Text(v))),
            Attr::Width(n) => ("width", Some(Number(n))),
            Attr::Height(n) => ("height", Some(Number(n))),
            Attr::DateTime(v) => ("datetime", Some(Text(v))),
            Attr::Method(v) => ("method", Some(Text(v))),
            Attr::AriaLabel(v) => ("aria-label", Some(Text(v))),
            Attr::AriaCurrent(v) => ("aria-current", Some(Text(v))),
            Attr::Defer => ("defer", None),
        }
    }
}

enum AttrValue<'a> {
    Text(&'a str),
    Number(u32),
}

/// A page being written. Text and attribute values are escaped as they are
/// added; see the module's documentation.
#[derive(Debug, Default)]
pub struct Html {
    out: String,
}

impl Html {
    /// An empty document.
    pub fn new() -> Html {
        Html {
            out: String::with_capacity(16 << 10),
        }
    }

    /// Text (escaped).
    pub fn text(&mut self, text: &str) -> &mut Self {
        escape_into(&mut self.out, text);
        self
    }

    /// An element whose content `body` writes.
    pub fn el(&mut self, tag: Tag, attrs: &[Attr<'_>], body: impl FnOnce(&mut Html)) -> &mut Self {
        self.open(tag.name(), attrs);
        // A script's content is never written: scripts come from a file.
        if tag != Tag::Script {
            body(self);
        }
        self.out.push_str("</");
        self.out.push_str(tag.name());
        self.out.push('>');
        self
    }

    /// An element holding only `text` (escaped).
    pub fn el_text(&mut self, tag: Tag, attrs: &[Attr<'_>], text: &str) -> &mut Self {
        self.el(tag, attrs, |h| {
            h.text(text);
        })
    }

    /// An element without content.
    pub fn void(&mut self, tag: Void, attrs: &[Attr<'_>]) -> &mut Self {
        self.open(tag.name(), attrs);
        self
    }

    /// `<script src=.. defer></script>`: the only way a script gets into a
    /// page, from a file this server serves.
    pub fn script_src(&mut self, src: &Link) -> &mut Self {
        self.el(Tag::Script, &[Attr::Src(src), Attr::Defer], |_| {})
    }

    /// The document, with its doctype.
    pub fn into_document(self) -> String {
        let mut doc = String::with_capacity(self.out.len() + 16);
        doc.push_str("<!DOCTYPE html>\n");
        doc.push_str(&self.out);
        doc
    }

    fn open(&mut self, name: &'static str, attrs: &[Attr<'_>]) {
        self.out.push('<');
        self.out.push_str(name);
        for attr in attrs {
            let (name, value) = attr.name_and_value();
            self.out.push(' ');
            self.out.push_str(name);
            match value {
                None => {}
                Some(AttrValue::Text(v)) => {
                    self.out.push_str("=\"");
                    escape_into(&mut self.out, v);
                    self.out.push('"');
                }
                Some(AttrValue::Number(n)) => {
                    self.out.push_str("=\"");
                    self.out.push_str(&n.to_string());
                    self.out.push('"');
                }
            }
        }
        self.out.push('>');
    }
}

/// Appends `text` to `out` with `& < > " '` as character references: safe
/// in text and in a quoted attribute value alike.
pub fn escape_into(out: &mut String, text: &str) {
    let mut rest = text;
    while let Some(at) = rest.find(['&', '<', '>', '"', '\'']) {
        out.push_str(&rest[..at]);
        out.push_str(match rest.as_bytes()[at] {
            b'&' => "&amp;",
            b'<' => "&lt;",
            b'>' => "&gt;",
            b'"' => "&quot;",
            _ => "&#39;",
        });
        rest = &rest[at + 1..];
    }
    out.push_str(rest);
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOSTILE: &str = r#"<script>alert(1)</script>"><img src=x onerror=alert(2)>'&amp;"#;

    #[test]
    fn text_and_attribute_values_are_escaped() {
        let mut h = Html::new();
        h.el(Tag::Div, &[Attr::Title(HOSTILE), Attr::Id(HOSTILE)], |h| {
            h.text(HOSTILE);
            h.el_text(Tag::Code, &[], HOSTILE);
        });
        let doc = h.into_document();
        assert!(!doc.contains("<script"), "{doc}");
        assert!(!doc.contains("<img"), "{doc}");
        assert!(!doc.contains("\"><"), "{doc}");
        assert!(!doc.contains("'&amp;"), "{doc}");
        assert!(doc.contains("&lt;script&gt;alert(1)&lt;/script&gt;&quot;&gt;&lt;img"));
        assert!(doc.contains("&#39;&amp;amp;"));
        // Four copies (title, id, text, code), each escaped.
        assert_eq!(doc.matches("onerror=alert(2)").count(), 4);
        // The doctype and the two elements' tags: nothing else opens one.
        assert_eq!(doc.matches('<').count(), 5, "{doc}");
    }

    #[test]
    fn a_script_element_never_gets_content() {
        let mut h = Html::new();
        h.el(Tag::Script, &[], |h| {
            h.text("alert(1)");
        });
        assert_eq!(h.into_document(), "<!DOCTYPE html>\n<script></script>");
    }

    #[test]
    fn escaping_keeps_other_text_as_it_is() {
        let mut out = String::new();
        escape_into(&mut out, "plain ünïcode — 1 < 2 && 3 > 2");
        assert_eq!(out, "plain ünïcode — 1 &lt; 2 &amp;&amp; 3 &gt; 2");
    }
}
