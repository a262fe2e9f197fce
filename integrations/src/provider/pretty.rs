//! A request body written as pretty JSON while it is walked, byte for byte
//! as `serde_json::to_writer_pretty` writes the same document built as a
//! `Value` (two-space indentation, `[]` and `{}` for empty containers,
//! strings escaped as `serde_json` escapes them), without building one.

use base64::Engine as _;

use jpstore_engine::internal::event::binary::value::{
    push_json_str, push_json_utf8_body, push_pretty_indent, push_u64, JsonStyle,
};
use jpstore_engine::internal::export::Arguments;

/// The writer: containers are opened and closed by the caller, each
/// member introduced by [`Pretty::key`] and each array item by
/// [`Pretty::item`].
pub(crate) struct Pretty<'o> {
    out: &'o mut Vec<u8>,
    /// Containers open.
    depth: usize,
    /// No member or item written yet in the innermost open container.
    empty: bool,
}

/// Items of at least this many bytes in all (estimated) are written on
/// two cores ([`Pretty::items`]): a thread's start costs some tens of
/// microseconds, writing a MiB of escaped text about half a millisecond.
const PARALLEL_WRITE: usize = 1 << 20;

/// The share of the items' weight, in percent, that [`Pretty::items`]
/// writes on the calling thread when it writes them on two: that thread
/// also appends the other's pieces, which costs about a sixth of writing
/// them (a request body's later 7.1 MB appended in 0.65 ms).
const FIRST_SHARE: usize = 45;

/// Bytes the later part of [`Pretty::items`] is handed over in.
const PIECE: usize = 1 << 20;

/// Bytes to make room for when writing `count` items of `weight` bytes of
/// content in all: their content with a quarter more for escapes, and the
/// keys and indentation of each. A request body of 7,840 messages of 11.9
/// MB of content measured 14.3 MB (this gives 15.9); what is not written
/// is never touched.
fn room(weight: usize, count: usize) -> usize {
    weight + weight / 4 + count * 128
}

impl<'o> Pretty<'o> {
    pub(crate) fn new(out: &'o mut Vec<u8>) -> Self {
        Pretty {
            out,
            depth: 0,
            empty: true,
        }
    }

    /// Writes `items` as the next items of the array the writer is in,
    /// each by `write`, as a loop over them would. When they are large
    /// (`weight` estimates each one's bytes) and there are two cores or
    /// more, the later part is written on another thread (a writer at the
    /// same depth, after an item) and handed over in pieces of about a MiB,
    /// which this thread appends once it has written the first part: the
    /// copy of the later part overlaps its writing, and the first part is
    /// the smaller by what the copy costs ([`FIRST_SHARE`]).
    pub(crate) fn items<T: Sync, E: Send>(
        &mut self,
        items: &[T],
        weight: impl Fn(&T) -> usize,
        write: impl Fn(&mut Pretty<'_>, &T) -> Result<(), E> + Sync,
    ) -> Result<(), E> {
        let weights: Vec<usize> = items.iter().map(weight).collect();
        let total: usize = weights.iter().sum();
        // Room for all of them at once: a body of megabytes grown by
        // doubling copies itself at each step (glibc's `realloc` moves a
        // large block of the heap), and the later part is appended.
        self.out.reserve(room(total, items.len()));
        // The first item past the first part's share of the weight starts
        // the later part; it is never the first item (the later part
        // writes a comma first).
        let mut sum = 0;
        let split = weights
            .iter()
            .position(|w| {
                sum += w;
                sum * 100 >= total * FIRST_SHARE
            })
            .map_or(0, |i| i + 1);
        if total < PARALLEL_WRITE
            || split == 0
            || split >= items.len()
            || jpstore_engine::internal::cores() < 2
        {
            return items.iter().try_for_each(|item| write(self, item));
        }
        let (first, later) = items.split_at(split);
        let depth = self.depth;
        let (pieces, handed) = std::sync::mpsc::channel::<Vec<u8>>();
        let write = &write;
        std::thread::scope(|scope| {
            let helper = scope.spawn(move || {
                let mut out = Vec::with_capacity(PIECE + PIECE / 4);
                let mut w = Pretty {
                    out: &mut out,
                    depth,
                    empty: false,
                };
                for item in later {
                    write(&mut w, item)?;
                    if w.out.len() >= PIECE {
                        let piece = std::mem::replace(w.out, Vec::with_capacity(PIECE + PIECE / 4));
                        // The receiver lives until this thread is joined.
                        let _ = pieces.send(piece);
                    }
                }
                let _ = pieces.send(out);
                Ok(())
            });
            let mine = first.iter().try_for_each(|item| write(self, item));
            if mine.is_ok() {
                // In order, until the helper is done (its sender dropped).
                // Waited for without sleeping (a thread put to sleep on a
                // virtual machine may take milliseconds to wake), yielding
                // the core in case the helper waits for it.
                loop {
                    match handed.try_recv() {
                        Ok(piece) => self.out.extend_from_slice(&piece),
                        Err(std::sync::mpsc::TryRecvError::Empty) => std::thread::yield_now(),
                        Err(std::sync::mpsc::TryRecvError::Disconnected) => break,
                    }
                }
            }
            let theirs = helper
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            mine.and(theirs)
        })?;
        self.empty = false;
        Ok(())
    }

    /// Before an array item: the comma after the previous one and the
    /// item's line.
    pub(crate) fn item(&mut self) {
        if !self.empty {
            self.out.push(b',');
        }
        self.empty = false;
        push_pretty_indent(self.out, self.depth);
    }

    /// An object member's key; its value is written next.
    pub(crate) fn key(&mut self, key: &str) {
        self.item();
        push_json_str(self.out, key);
        self.out.extend_from_slice(b": ");
    }

    pub(crate) fn begin_object(&mut self) {
        self.open(b'{');
    }

    pub(crate) fn end_object(&mut self) {
        self.close(b'}');
    }

    pub(crate) fn begin_array(&mut self) {
        self.open(b'[');
    }

    pub(crate) fn end_array(&mut self) {
        self.close(b']');
    }

    fn open(&mut self, bracket: u8) {
        self.out.push(bracket);
        self.depth += 1;
        self.empty = true;
    }

    fn close(&mut self, bracket: u8) {
        self.depth -= 1;
        if !self.empty {
            push_pretty_indent(self.out, self.depth);
        }
        // The container is an item or member of its parent, which is
        // therefore not empty.
        self.empty = false;
        self.out.push(bracket);
    }

    /// A string.
    pub(crate) fn str(&mut self, s: &str) {
        push_json_str(self.out, s);
    }

    /// One string made of `pieces` in order, none of them joined first
    /// (each UTF-8: a `str`'s bytes, or a blob's text checked when read).
    pub(crate) fn str_pieces<'s>(&mut self, pieces: impl IntoIterator<Item = &'s [u8]>) {
        self.out.push(b'"');
        for piece in pieces {
            push_json_utf8_body(self.out, piece);
        }
        self.out.push(b'"');
    }

    /// One string: `prefix` (which needs no escape: a fixed ASCII text
    /// such as a data URL's start) and then `bytes` in standard base64.
    pub(crate) fn base64(&mut self, prefix: &str, bytes: &[u8]) {
        let engine = base64::engine::general_purpose::STANDARD;
        self.out.push(b'"');
        self.out.extend_from_slice(prefix.as_bytes());
        self.out.extend_from_slice(engine.encode(bytes).as_bytes());
        self.out.push(b'"');
    }

    pub(crate) fn u64(&mut self, n: u64) {
        push_u64(self.out, n);
    }

    pub(crate) fn bool(&mut self, b: bool) {
        self.out
            .extend_from_slice(if b { b"true" } else { b"false" });
    }

    pub(crate) fn null(&mut self) {
        self.out.extend_from_slice(b"null");
    }

    /// A tool call's arguments, as they are held.
    pub(crate) fn arguments(
        &mut self,
        arguments: &Arguments<'_>,
    ) -> Result<(), jpstore_engine::error::Error> {
        arguments.write_json(self.out, JsonStyle::Pretty(self.depth))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Each way of writing, against `serde_json`'s pretty printer of the
    /// same document.
    #[test]
    fn writes_what_serde_json_writes_pretty() {
        let nested = json!({"a": [1, {"b": null}, [], {}], "c": "q\"\n\u{1}"});
        let image = [0u8, 1, 2, 250, 251, 252, 253];
        let mut out = Vec::new();
        let mut w = Pretty::new(&mut out);
        w.begin_object();
        w.key("empty array");
        w.begin_array();
        w.end_array();
        w.key("empty object");
        w.begin_object();
        w.end_object();
        w.key("items");
        w.begin_array();
        w.item();
        w.str("tab\there");
        w.item();
        w.str_pieces(["uri\n", "```", "rs\n", "fn \"x\"", "\n```"].map(str::as_bytes));
        w.item();
        w.u64(4096);
        w.item();
        w.bool(false);
        w.item();
        w.null();
        w.item();
        w.begin_object();
        w.key("map");
        w.arguments(&Arguments::Object(nested.as_object().expect("an object")))
            .expect("arguments of the model are written");
        w.end_object();
        w.item();
        w.base64("data:image/png;base64,", &image);
        w.end_array();
        w.end_object();
        let expected = json!({
            "empty array": [],
            "empty object": {},
            "items": [
                "tab\there",
                "uri\n```rs\nfn \"x\"\n```",
                4096,
                false,
                null,
                {"map": nested},
                format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(image)),
            ],
        });
        let want = serde_json::to_vec_pretty(&expected).expect("serialize");
        assert_eq!(
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&want)
        );
    }
}
