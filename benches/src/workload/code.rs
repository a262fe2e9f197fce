//! Synthetic Rust-like source text that compresses like real code.
//!
//! A file draws its identifiers from small per-file pools (types, functions,
//! fields, locals) built from a shared programming vocabulary plus a few
//! file-specific "domain" words, and picks from those pools with Zipf-like
//! frequencies, as real code does: a handful of names dominate a file.
//! Around them it lays out the usual structure (doc comments, `use` lists,
//! attributes, structs, enums, impl blocks, nested statements with 4-space
//! indentation, literals, tests). The knobs were tuned until zstd level 3
//! compresses the output about as well as the Rust sources it models (see
//! `source_tree::REAL_ZSTD3_RATIO`).

use super::rng::Rng;

/// Words that programmers build identifiers from (most frequent first).
#[rustfmt::skip]
const CODE_WORDS: &[&str] = &[
    "value", "data", "len", "new", "get", "set", "index", "item", "error", "result", "key", "name",
    "state", "buf", "node", "input", "output", "config", "path", "size", "count", "offset", "start",
    "end", "next", "prev", "id", "kind", "type", "map", "list", "entry", "file", "read", "write",
    "parse", "token", "span", "context", "handle", "inner", "builder", "field", "expr", "item",
    "block", "stream", "bytes", "byte", "char", "str", "text", "line", "column", "pos", "range",
    "slice", "iter", "args", "arg", "param", "options", "flags", "mode", "level", "limit", "max",
    "min", "total", "current", "default", "first", "last", "pending", "ready", "poll", "task",
    "waker", "future", "sender", "receiver", "channel", "lock", "guard", "ptr", "raw", "ref",
    "owned", "borrow", "clone", "copy", "format", "display", "debug", "visit", "fold", "emit",
    "encode", "decode", "serialize", "deserialize", "from", "into", "try", "as", "to", "with", "by",
    "is", "has", "push", "pop", "insert", "remove", "contains", "find", "check", "validate",
    "apply", "update", "merge", "split", "join", "flush", "close", "open", "create", "load",
    "store", "cache", "hash", "digest", "header", "body", "request", "response", "client", "server",
    "socket", "addr", "port", "timeout", "duration", "instant", "time", "event", "message",
    "payload", "frame", "packet", "chunk", "page", "table", "row", "col", "cell", "matrix", "vec",
    "point", "scope", "env", "var", "symbol", "ident", "lit", "attr", "meta", "generics", "bound",
    "lifetime", "trait", "impl", "method", "call", "closure", "pattern", "matcher", "regex",
    "query", "filter", "sort", "order", "cmp", "eq", "lhs", "rhs", "left", "right", "width",
    "height", "depth", "parent", "child", "children", "root", "tree", "graph", "edge", "weight",
    "score", "rank", "bits", "mask", "shift", "align", "layout", "alloc", "region",
];

/// Short English words for comments, doc comments and messages.
#[rustfmt::skip]
const PROSE_WORDS: &[&str] = &[
    "the", "a", "of", "to", "is", "and", "in", "if", "this", "that", "for", "be", "it", "not", "or",
    "an", "are", "returns", "when", "with", "by", "on", "as", "we", "can", "must", "should",
    "which", "value", "from", "no", "will", "has", "all", "only", "into", "so", "one", "new",
    "given", "used", "any", "other", "at", "each", "same", "error", "may", "have", "does", "but",
    "than", "its", "there", "type", "function", "otherwise", "first", "then", "because", "also",
    "before", "after", "case", "would", "already", "still", "safe", "empty", "valid", "length",
    "number", "bytes", "buffer", "input", "called", "method", "returned", "current", "state",
    "always", "never", "instead", "here", "note", "see", "example", "panics", "errors", "specified",
    "following", "implementation", "default", "order", "possible", "need", "without", "until",
    "data", "end", "start", "time", "call", "make", "sure", "since", "these", "those", "some",
    "more", "less", "way", "point", "unsafe", "thread", "memory", "pointer", "lifetime", "trait",
    "struct", "field", "index",
];

/// Built-in and standard library types, most frequent first.
#[rustfmt::skip]
const STD_TYPES: &[&str] = &[
    "usize", "u8", "Self", "bool", "u32", "String", "u64", "i32", "str", "Vec<u8>", "Option<usize>",
    "i64", "Result<()>", "char", "f64", "u16", "io::Result<()>", "Span", "Box<dyn Error>", "&[u8]",
    "Ordering", "fmt::Result", "Duration", "PathBuf", "isize",
];

/// Derive lists that precede structs and enums.
const DERIVES: &[&str] = &[
    "#[derive(Debug, Clone)]",
    "#[derive(Debug, Clone, Copy, PartialEq, Eq)]",
    "#[derive(Debug)]",
    "#[derive(Clone, Debug, PartialEq, Eq, Hash)]",
    "#[derive(Debug, Default)]",
    "#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]",
];

/// Paths that appear in `use` lines.
const USE_PATHS: &[&str] = &[
    "std::fmt",
    "std::io",
    "std::collections::HashMap",
    "std::sync::Arc",
    "crate::error::Error",
    "std::borrow::Cow",
    "core::mem",
    "std::ops::Range",
    "crate::Result",
    "std::path::{Path, PathBuf}",
    "core::cmp::Ordering",
    "std::marker::PhantomData",
    "proc_macro2::{Span, TokenStream}",
    "std::sync::atomic::{AtomicUsize, Ordering}",
    "alloc::vec::Vec",
];

/// Methods called on values, most frequent first.
#[rustfmt::skip]
const METHODS: &[&str] = &[
    "clone", "len", "unwrap", "iter", "as_ref", "map", "is_empty", "push", "get", "into",
    "to_string", "as_str", "collect", "expect", "is_some", "ok_or", "as_ptr", "borrow", "next",
    "and_then", "unwrap_or", "as_bytes", "contains", "insert", "extend", "take", "is_none",
    "to_owned", "checked_add", "map_err", "iter_mut", "split_at", "chars",
];

/// Macros invoked in statements.
const MACROS: &[&str] = &[
    "assert!",
    "assert_eq!",
    "debug_assert!",
    "write!",
    "format!",
    "panic!",
    "println!",
    "unreachable!",
    "vec!",
    "matches!",
];

/// Probability that a simple statement repeats an earlier line, and that a
/// function is an earlier one with a name changed: both grow with the file's
/// size, as large files are more often generated or written from templates.
fn reuse_chances(target: usize) -> (f64, f64) {
    let kib = (target as f64 / 1024.0).max(1.0).log2();
    let line = (0.22 + 0.05 * kib).min(0.55);
    let function = (0.1 + 0.08 * (kib - 1.0).max(0.0)).min(0.65);
    (line, function)
}

/// Per-file identifier pools, picked from with Zipf frequencies.
struct Pools {
    types: Vec<String>,
    fns: Vec<String>,
    fields: Vec<String>,
    locals: Vec<String>,
    variants: Vec<String>,
    consts: Vec<String>,
}

/// Generates one file of about `size` bytes (exactly `size` after the final
/// cut) of Rust-like text into `out`.
pub fn generate(rng: &mut Rng, size: usize, out: &mut Vec<u8>) {
    out.clear();
    out.reserve(size + 256);
    let mut g = Gen::new(rng, size, out);
    g.file();
    out.truncate(size);
}

/// English-like prose of about `chars` characters (whole words, sentences
/// ending in a period), from the same word list as the generator's comments:
/// for chat messages and reasoning around the code.
pub fn prose(rng: &mut Rng, chars: usize) -> String {
    let mut out = String::with_capacity(chars + 16);
    let mut start = true;
    while out.len() < chars {
        if !out.is_empty() {
            out.push(' ');
        }
        let w = if rng.chance(0.15) {
            *rng.zipf_pick(CODE_WORDS)
        } else {
            *rng.zipf_pick(PROSE_WORDS)
        };
        let quoted = !start && rng.chance(0.05);
        if quoted {
            out.push('`');
        }
        if start {
            let mut chars = w.chars();
            if let Some(c) = chars.next() {
                out.extend(c.to_uppercase());
                out.push_str(chars.as_str());
            }
        } else {
            out.push_str(w);
        }
        if quoted {
            out.push('`');
        }
        start = rng.chance(0.1);
        if start {
            out.push(if rng.chance(0.1) { ':' } else { '.' });
        }
    }
    if !out.ends_with('.') {
        out.push('.');
    }
    out
}

struct Gen<'a> {
    rng: &'a mut Rng,
    out: &'a mut Vec<u8>,
    target: usize,
    pools: Pools,
    /// Byte ranges of earlier simple statements (after indentation), for
    /// the repeated lines real code is full of.
    lines: Vec<(usize, usize)>,
    /// Byte ranges of earlier functions, reused as templates.
    functions: Vec<(usize, usize)>,
    line_reuse: f64,
    function_reuse: f64,
}

impl<'a> Gen<'a> {
    fn new(rng: &'a mut Rng, target: usize, out: &'a mut Vec<u8>) -> Self {
        // Larger files use more distinct names, but far fewer than linearly
        // more: the repetition that makes big files compress better.
        let scale = ((target as f64) / 1000.0).powf(0.3).clamp(1.0, 40.0);
        let domain: Vec<String> = (0..(3.0 + 3.0 * scale) as usize)
            .map(|_| domain_word(rng))
            .collect();
        let pool = |n: usize, rng: &mut Rng, f: fn(&mut Rng, &[String]) -> String| {
            (0..n.max(2)).map(|_| f(rng, &domain)).collect::<Vec<_>>()
        };
        let pools = Pools {
            types: pool((2.0 + 2.5 * scale) as usize, rng, camel_ident),
            fns: pool((3.0 + 4.0 * scale) as usize, rng, snake_ident),
            fields: pool((3.0 + 4.0 * scale) as usize, rng, snake_ident),
            locals: pool((4.0 + 3.0 * scale) as usize, rng, short_local),
            variants: pool((3.0 + 3.0 * scale) as usize, rng, camel_ident),
            consts: pool((2.0 + 1.5 * scale) as usize, rng, const_ident),
        };
        let (line_reuse, function_reuse) = reuse_chances(target);
        Self {
            rng,
            out,
            target,
            pools,
            lines: Vec::new(),
            functions: Vec::new(),
            line_reuse,
            function_reuse,
        }
    }

    fn full(&self) -> bool {
        self.out.len() >= self.target
    }

    fn push(&mut self, s: &str) {
        self.out.extend_from_slice(s.as_bytes());
    }

    fn indent(&mut self, depth: usize) {
        for _ in 0..depth {
            self.push("    ");
        }
    }

    fn nl(&mut self) {
        self.out.push(b'\n');
    }

    fn ty(&mut self) -> String {
        if self.rng.chance(0.55) {
            self.rng.zipf_pick(&self.pools.types).clone()
        } else {
            (*self.rng.zipf_pick(STD_TYPES)).to_owned()
        }
    }

    fn local(&mut self) -> String {
        self.rng.zipf_pick(&self.pools.locals).clone()
    }

    fn field(&mut self) -> String {
        self.rng.zipf_pick(&self.pools.fields).clone()
    }

    fn func(&mut self) -> String {
        self.rng.zipf_pick(&self.pools.fns).clone()
    }

    fn variant(&mut self) -> String {
        self.rng.zipf_pick(&self.pools.variants).clone()
    }

    fn prose(&mut self, words: usize) {
        for i in 0..words {
            if i > 0 {
                self.push(" ");
            }
            let w = if self.rng.chance(0.2) {
                self.rng.zipf_pick(&self.pools.fields).clone()
            } else {
                (*self.rng.zipf_pick(PROSE_WORDS)).to_owned()
            };
            if self.rng.chance(0.08) {
                self.push("`");
                self.push(&w);
                self.push("`");
            } else {
                self.push(&w);
            }
        }
    }

    fn doc(&mut self, depth: usize, marker: &str) {
        let lines = 1 + self.rng.zipf(5);
        for l in 0..lines {
            self.indent(depth);
            self.push(marker);
            if l == 1 && lines > 2 {
                self.nl();
                self.indent(depth);
                self.push(marker);
            }
            self.push(" ");
            let n = self.rng.range(4, 13);
            self.prose(n);
            self.push(".");
            self.nl();
        }
    }

    fn number(&mut self) {
        let s = match self.rng.below(10) {
            0..=5 => self.rng.zipf(17).to_string(),
            6 => format!("0x{:x}", self.rng.next_u64() >> self.rng.range(32, 56)),
            7 => format!("{}", self.rng.below(100_000)),
            8 => format!("{}usize", self.rng.zipf(65)),
            _ => (*self
                .rng
                .pick(&["1 << 20", "u32::MAX", "64", "1024", "255", "0u8"]))
            .to_owned(),
        };
        self.push(&s);
    }

    fn string_lit(&mut self) {
        self.push("\"");
        let n = self.rng.range(1, 6);
        self.prose(n);
        if self.rng.chance(0.3) {
            self.push(": {}");
        }
        self.push("\"");
    }

    fn expr(&mut self, budget: usize) {
        let choice = if budget == 0 {
            self.rng.below(4)
        } else {
            self.rng.below(11)
        };
        match choice {
            0 => {
                let l = self.local();
                self.push(&l);
            }
            1 => {
                self.push("self.");
                let f = self.field();
                self.push(&f);
            }
            2 => self.number(),
            3 => {
                if self.rng.chance(0.5) {
                    self.string_lit();
                } else {
                    let v = self.variant();
                    let t = self.rng.zipf_pick(&self.pools.types).clone();
                    self.push(&t);
                    self.push("::");
                    self.push(&v);
                }
            }
            4..=6 => {
                // Method call chain.
                if self.rng.chance(0.5) {
                    self.push("self.");
                    let f = self.field();
                    self.push(&f);
                } else {
                    let l = self.local();
                    self.push(&l);
                }
                for _ in 0..1 + self.rng.zipf(3) {
                    self.push(".");
                    if self.rng.chance(0.55) {
                        let m = self.rng.zipf_pick(METHODS);
                        self.push(m);
                        self.push("()");
                    } else {
                        let f = self.func();
                        self.push(&f);
                        self.args(budget - 1);
                    }
                }
                if self.rng.chance(0.2) {
                    self.push("?");
                }
            }
            7 => {
                let t = self.rng.zipf_pick(&self.pools.types).clone();
                self.push(&t);
                self.push("::");
                let f = self.func();
                self.push(&f);
                self.args(budget - 1);
            }
            8 => {
                let f = self.func();
                self.push(&f);
                self.args(budget - 1);
            }
            9 => {
                self.expr(budget - 1);
                let op = *self
                    .rng
                    .pick(&[" + ", " - ", " == ", " != ", " < ", " >= ", " && "]);
                self.push(op);
                self.expr(budget - 1);
            }
            _ => {
                self.push("&");
                self.expr(budget - 1);
            }
        }
    }

    fn args(&mut self, budget: usize) {
        self.push("(");
        let n = self.rng.zipf(4);
        for i in 0..n {
            if i > 0 {
                self.push(", ");
            }
            self.expr(budget);
        }
        self.push(")");
    }

    fn statement(&mut self, depth: usize) {
        self.indent(depth);
        if !self.lines.is_empty() && self.rng.chance(self.line_reuse) {
            let n = self.lines.len();
            let (a, b) = self.lines[n - 1 - self.rng.zipf(n)];
            self.out.extend_from_within(a..b);
            self.nl();
            return;
        }
        let start = self.out.len();
        let nest = depth < 6;
        let kind = self.rng.below(20);
        match kind {
            0..=4 => {
                let kw = if self.rng.chance(0.25) {
                    "let mut "
                } else {
                    "let "
                };
                self.push(kw);
                let l = self.local();
                self.push(&l);
                if self.rng.chance(0.25) {
                    self.push(": ");
                    let t = self.ty();
                    self.push(&t);
                }
                self.push(" = ");
                self.expr(2);
                self.push(";");
            }
            5..=7 => {
                self.expr(2);
                self.push(";");
            }
            8 if nest => {
                self.push("if ");
                self.expr(1);
                self.push(" {");
                self.nl();
                self.stmts(depth + 1, 3);
                self.indent(depth);
                if self.rng.chance(0.3) {
                    self.push("} else {");
                    self.nl();
                    self.stmts(depth + 1, 2);
                    self.indent(depth);
                }
                self.push("}");
            }
            9 if nest => {
                self.push("for ");
                let l = self.local();
                self.push(&l);
                self.push(" in ");
                self.expr(1);
                self.push(" {");
                self.nl();
                self.stmts(depth + 1, 3);
                self.indent(depth);
                self.push("}");
            }
            10 if nest => {
                self.push("match ");
                self.expr(1);
                self.push(" {");
                self.nl();
                let t = self.rng.zipf_pick(&self.pools.types).clone();
                for _ in 0..self.rng.range(2, 5) {
                    self.indent(depth + 1);
                    self.push(&t);
                    self.push("::");
                    let v = self.variant();
                    self.push(&v);
                    if self.rng.chance(0.4) {
                        self.push("(");
                        let l = self.local();
                        self.push(&l);
                        self.push(")");
                    }
                    self.push(" => ");
                    self.expr(1);
                    self.push(",");
                    self.nl();
                }
                self.indent(depth + 1);
                self.push("_ => {}");
                self.nl();
                self.indent(depth);
                self.push("}");
            }
            11 => {
                self.push("// ");
                let n = self.rng.range(3, 12);
                self.prose(n);
            }
            12 => {
                self.push("return ");
                if self.rng.chance(0.5) {
                    self.push("Err(Error::");
                    let v = self.variant();
                    self.push(&v);
                    self.push("(");
                    self.string_lit();
                    self.push("));");
                } else {
                    self.push("Ok(");
                    self.expr(1);
                    self.push(");");
                }
            }
            13 => {
                let m = *self.rng.zipf_pick(MACROS);
                self.push(m);
                self.args(1);
                self.push(";");
            }
            14 => {
                self.push("self.");
                let f = self.field();
                self.push(&f);
                let op = if self.rng.chance(0.7) { " = " } else { " += " };
                self.push(op);
                self.expr(1);
                self.push(";");
            }
            _ => {
                self.expr(1);
                self.push(";");
            }
        }
        if !(8..=10).contains(&kind) {
            self.lines.push((start, self.out.len()));
        }
        self.nl();
    }

    fn stmts(&mut self, depth: usize, max: usize) {
        let n = self.rng.range(1, max);
        for _ in 0..n {
            self.statement(depth);
        }
    }

    fn function(&mut self, depth: usize, method: bool) {
        if !self.functions.is_empty() && self.rng.chance(self.function_reuse) {
            self.function_from_template();
            return;
        }
        let start = self.out.len();
        self.function_body(depth, method);
        self.functions.push((start, self.out.len()));
    }

    /// Copies an earlier function with one identifier renamed, as generated
    /// and copy-pasted code does.
    fn function_from_template(&mut self) {
        let (a, b) = *self.rng.pick(&self.functions);
        let text = String::from_utf8_lossy(&self.out[a..b]).into_owned();
        let from = self.func();
        let to = self.func();
        let text = if text.contains(&from) {
            text.replace(&from, &to)
        } else {
            let (from, to) = (self.field(), self.field());
            text.replace(&from, &to)
        };
        self.push(&text);
    }

    fn function_body(&mut self, depth: usize, method: bool) {
        if self.rng.chance(0.6) {
            self.doc(depth, "///");
        }
        if self.rng.chance(0.15) {
            self.indent(depth);
            let attr = *self
                .rng
                .pick(&["#[inline]", "#[must_use]", "#[cfg(feature = \"std\")]"]);
            self.push(attr);
            self.nl();
        }
        self.indent(depth);
        if self.rng.chance(0.6) {
            self.push("pub ");
        }
        self.push("fn ");
        let f = self.func();
        self.push(&f);
        self.push("(");
        let mut first = true;
        if method {
            let recv = *self.rng.pick(&["&self", "&self", "&mut self", "self"]);
            self.push(recv);
            first = false;
        }
        for _ in 0..self.rng.zipf(4) {
            if !first {
                self.push(", ");
            }
            first = false;
            let l = self.local();
            self.push(&l);
            self.push(": ");
            if self.rng.chance(0.3) {
                self.push("&");
            }
            let t = self.ty();
            self.push(&t);
        }
        self.push(")");
        if self.rng.chance(0.7) {
            self.push(" -> ");
            let t = self.ty();
            self.push(&t);
        }
        self.push(" {");
        self.nl();
        let n = self.rng.range(1, 8);
        self.stmts(depth + 1, n);
        self.indent(depth);
        self.push("}");
        self.nl();
    }

    fn item(&mut self) {
        match self.rng.below(12) {
            0..=2 => {
                // struct
                self.doc(0, "///");
                let d = *self.rng.pick(DERIVES);
                self.push(d);
                self.nl();
                self.push("pub struct ");
                let t = self.rng.zipf_pick(&self.pools.types).clone();
                self.push(&t);
                self.push(" {");
                self.nl();
                for _ in 0..self.rng.range(1, 7) {
                    if self.rng.chance(0.4) {
                        self.doc(1, "///");
                    }
                    self.push("    ");
                    if self.rng.chance(0.5) {
                        self.push("pub ");
                    }
                    let f = self.field();
                    self.push(&f);
                    self.push(": ");
                    let ty = self.ty();
                    self.push(&ty);
                    self.push(",");
                    self.nl();
                }
                self.push("}");
                self.nl();
            }
            3 => {
                // enum
                self.doc(0, "///");
                let d = *self.rng.pick(DERIVES);
                self.push(d);
                self.nl();
                self.push("pub enum ");
                let t = self.rng.zipf_pick(&self.pools.types).clone();
                self.push(&t);
                self.push(" {");
                self.nl();
                for _ in 0..self.rng.range(2, 8) {
                    if self.rng.chance(0.5) {
                        self.doc(1, "///");
                    }
                    self.push("    ");
                    let v = self.variant();
                    self.push(&v);
                    if self.rng.chance(0.4) {
                        self.push("(");
                        let ty = self.ty();
                        self.push(&ty);
                        self.push(")");
                    }
                    self.push(",");
                    self.nl();
                }
                self.push("}");
                self.nl();
            }
            4..=7 => {
                // impl block
                self.push("impl");
                if self.rng.chance(0.3) {
                    self.push(" ");
                    let tr = *self.rng.pick(&[
                        "fmt::Display for",
                        "From<u32> for",
                        "Default for",
                        "Iterator for",
                        "Drop for",
                        "fmt::Debug for",
                    ]);
                    self.push(tr);
                }
                self.push(" ");
                let t = self.rng.zipf_pick(&self.pools.types).clone();
                self.push(&t);
                self.push(" {");
                self.nl();
                for i in 0..self.rng.range(1, 5) {
                    if i > 0 {
                        self.nl();
                    }
                    self.function(1, true);
                    if self.full() {
                        break;
                    }
                }
                self.push("}");
                self.nl();
            }
            8 => {
                self.doc(0, "///");
                let c = self.rng.zipf_pick(&self.pools.consts).clone();
                self.push("pub const ");
                self.push(&c);
                self.push(": ");
                let ty = *self.rng.pick(&["usize", "u32", "u64", "&str", "u8"]);
                self.push(ty);
                self.push(" = ");
                self.number();
                self.push(";");
                self.nl();
            }
            _ => self.function(0, false),
        }
    }

    fn file(&mut self) {
        if self.rng.chance(0.4) {
            self.doc(0, "//!");
            self.nl();
        }
        for _ in 0..self.rng.range(0, 6) {
            self.push("use ");
            let p = *self.rng.zipf_pick(USE_PATHS);
            self.push(p);
            self.push(";");
            self.nl();
        }
        self.nl();
        while !self.full() {
            if self.out.len() * 10 > self.target * 8 && self.rng.chance(0.15) {
                self.tests();
                continue;
            }
            self.item();
            self.nl();
        }
    }

    fn tests(&mut self) {
        self.push("#[cfg(test)]\nmod tests {\n    use super::*;\n");
        while !self.full() {
            self.nl();
            self.push("    #[test]\n    fn ");
            let f = self.func();
            self.push(&f);
            self.push("_works() {\n");
            let n = self.rng.range(2, 8);
            self.stmts(2, n);
            self.push("    }\n");
        }
        self.push("}\n");
    }
}

/// A pronounceable made-up word, specific to one file's domain.
fn domain_word(rng: &mut Rng) -> String {
    const ONSETS: &[&str] = &[
        "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z", "st",
        "tr", "pr", "gr", "ch", "sh", "th", "bl", "cr", "sp",
    ];
    const VOWELS: &[&str] = &["a", "e", "i", "o", "u", "ea", "io", "ou", "y"];
    const CODAS: &[&str] = &["", "", "n", "r", "s", "t", "l", "x", "m", "ck", "nd", "rt"];
    let mut w = String::new();
    for _ in 0..rng.range(1, 3) {
        w.push_str(rng.pick::<&str>(ONSETS));
        w.push_str(rng.pick::<&str>(VOWELS));
    }
    w.push_str(rng.pick::<&str>(CODAS));
    w
}

fn word(rng: &mut Rng, domain: &[String]) -> String {
    if rng.chance(0.35) {
        rng.zipf_pick(domain).clone()
    } else {
        (*rng.zipf_pick(CODE_WORDS)).to_owned()
    }
}

fn snake_ident(rng: &mut Rng, domain: &[String]) -> String {
    let n = 1 + rng.zipf(3);
    let mut s = word(rng, domain);
    for _ in 1..n {
        s.push('_');
        s.push_str(&word(rng, domain));
    }
    s
}

fn camel_ident(rng: &mut Rng, domain: &[String]) -> String {
    let n = 1 + rng.zipf(3);
    let mut s = String::new();
    for _ in 0..n {
        let w = word(rng, domain);
        let mut chars = w.chars();
        if let Some(c) = chars.next() {
            s.extend(c.to_uppercase());
            s.push_str(chars.as_str());
        }
    }
    s
}

fn const_ident(rng: &mut Rng, domain: &[String]) -> String {
    snake_ident(rng, domain).to_uppercase()
}

fn short_local(rng: &mut Rng, domain: &[String]) -> String {
    if rng.chance(0.3) {
        (*rng.pick(&[
            "i", "n", "x", "s", "v", "b", "c", "e", "f", "it", "buf", "len", "idx",
        ]))
        .to_owned()
    } else {
        snake_ident(rng, domain)
    }
}
