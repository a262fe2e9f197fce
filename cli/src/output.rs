//! What a command says on standard error besides its results and errors:
//! progress, notes and warnings, as `-q`/`-v` and `--json` ask.
//!
//! - Progress is a bar on a terminal, nothing when standard error is piped
//!   or the command prints JSON; with `-v` and no terminal, a line at every
//!   tenth of the work; with `-q`, nothing.
//! - Notes (what was done besides the result: a torn tail cut, a
//!   conversation skipped or replaced) are printed unless `-q`.
//! - Warnings and errors are always printed.
//!
//! Nothing is coloured: `NO_COLOR` is honoured as it is (clap's help and
//! usage messages, the only styled text, follow it too).
//!
//! Text written for a person goes through [`shown`]: a stored title or
//! message, a name found on disk, a request's target may hold control
//! characters (an escape sequence that clears the screen, a line break that
//! breaks a table), which are written as escapes. Results printed as JSON
//! ([`jsonln!`](crate::jsonln)) are exact.

use std::borrow::Cow;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::OnceLock;

use indicatif::{ProgressBar, ProgressStyle};

/// How much a command says besides its results, warnings and errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verbosity {
    /// `-q`: no progress, no notes.
    Quiet,
    /// The default: a progress bar on a terminal, notes.
    Normal,
    /// `-v`: progress as lines when there is no terminal, and notes of what
    /// is being done.
    Verbose,
}

static VERBOSITY: AtomicU8 = AtomicU8::new(1);
static JSON: AtomicBool = AtomicBool::new(false);

/// Sets what the command says (once, in `main`): `json` when it prints its
/// result as JSON (no progress then).
pub fn configure(verbosity: Verbosity, json: bool) {
    VERBOSITY.store(verbosity as u8, Ordering::Relaxed);
    JSON.store(json, Ordering::Relaxed);
}

/// The verbosity in effect.
pub fn verbosity() -> Verbosity {
    match VERBOSITY.load(Ordering::Relaxed) {
        0 => Verbosity::Quiet,
        1 => Verbosity::Normal,
        _ => Verbosity::Verbose,
    }
}

/// `text` as it is written for a person, on one line: every control
/// character (C0, DEL, C1: `\n`, `\r`, `\t` by name, the others as
/// `\x1b` or `\u{9b}`), and every character that reorders or breaks the
/// text around it on a terminal (the bidirectional embeddings, overrides,
/// isolates and marks, U+2028 and U+2029, as `\u{202e}`), escaped.
/// Anything else is written as it is (a backslash too: the text is for
/// reading, not for parsing back).
pub fn shown(text: &str) -> Cow<'_, str> {
    escape(text, false)
}

/// [`shown`] keeping line breaks (`\n`): a message of several lines that
/// jp-store wrote, with stored text inside it.
pub fn shown_lines(text: &str) -> Cow<'_, str> {
    escape(text, true)
}

/// Whether `c` is written as an escape.
fn escaped(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

fn escape(text: &str, keep_newlines: bool) -> Cow<'_, str> {
    let needs = |c: char| escaped(c) && !(keep_newlines && c == '\n');
    if !text.chars().any(needs) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if !needs(c) {
            out.push(c);
            continue;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    Cow::Owned(out)
}

/// A human-readable size.
pub fn size(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

/// `n` and `noun`, the noun in the plural unless `n` is 1: `1 conversation`,
/// `2 entries`, `0 files`.
pub fn count(n: impl Into<u64>, noun: &str) -> String {
    let n: u64 = n.into();
    if n == 1 {
        return format!("1 {noun}");
    }
    let consonant_y = noun.strip_suffix('y').is_some_and(|stem| {
        stem.chars()
            .last()
            .is_some_and(|c| !matches!(c, 'a' | 'e' | 'i' | 'o' | 'u'))
    });
    if consonant_y {
        format!("{n} {}ies", &noun[..noun.len() - 1])
    } else if ["s", "x", "ch", "sh"].iter().any(|end| noun.ends_with(end)) {
        format!("{n} {noun}es")
    } else {
        format!("{n} {noun}s")
    }
}

/// [`count`] of a `usize`.
pub fn count_of(n: usize, noun: &str) -> String {
    count(n as u64, noun)
}

/// Prints `line` on standard error for a person ([`shown_lines`]).
pub fn eprint_line(line: &str) {
    eprintln!("{}", shown_lines(line));
}

/// Prints a note (`jp-store: LINE`) unless `-q`.
pub fn note(line: &str) {
    if verbosity() > Verbosity::Quiet {
        eprint_line(&format!("jp-store: {line}"));
    }
}

/// Prints a note only with `-v`.
pub fn detail(line: &str) {
    if verbosity() == Verbosity::Verbose {
        eprint_line(&format!("jp-store: {line}"));
    }
}

/// What a [`Progress`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Bytes: `1.2 MiB/30.0 MiB`, with the rate and the time left.
    Bytes,
    /// Things, named in the singular (`conversation`, `blob`):
    /// `3/30 conversations`.
    Items(&'static str),
    /// The seconds of a wait, counted down: `12 s left of 750 s`.
    Countdown,
}

impl Unit {
    /// The bar's template (indicatif's keys).
    fn template(self) -> String {
        match self {
            Unit::Bytes => "{msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})".into(),
            Unit::Items(noun) => {
                let plural = count(2u64, noun);
                let plural = plural.trim_start_matches("2 ");
                format!("{{msg}} [{{bar:30}}] {{pos}}/{{len}} {plural} ({{eta}})")
            }
            Unit::Countdown => "{msg} [{bar:30}] {prefix}".into(),
        }
    }

    /// `done` of `total` in words: `3 of 30 conversations`, `1.2 KiB of
    /// 2.0 KiB`, `12 s left of 750 s`.
    pub fn amount(self, done: u64, total: u64) -> String {
        match self {
            Unit::Bytes => format!("{} of {}", size(done), size(total)),
            Unit::Items(noun) => format!("{done} of {}", count(total, noun)),
            Unit::Countdown => format!("{} s left of {total} s", total.saturating_sub(done)),
        }
    }
}

/// Progress of a long command on standard error (see the module
/// documentation).
pub struct Progress {
    what: String,
    unit: Unit,
    /// Whether a bar is shown (on a terminal, unless `-q` or JSON); it is
    /// made at the first update with something to count, so that no frame
    /// of `0/0` is drawn.
    terminal: bool,
    bar: OnceLock<ProgressBar>,
    /// With `-v` and no bar: the last tenth reported (+1; 0 for none).
    lines: Option<AtomicU64>,
}

impl Progress {
    /// Progress labelled `what`, counting in `unit`.
    pub fn new(what: &str, unit: Unit) -> Self {
        let shown = verbosity() > Verbosity::Quiet && !JSON.load(Ordering::Relaxed);
        let terminal = std::io::stderr().is_terminal();
        let lines =
            (shown && !terminal && verbosity() == Verbosity::Verbose).then(|| AtomicU64::new(0));
        Self {
            what: what.to_owned(),
            unit,
            terminal: shown && terminal,
            bar: OnceLock::new(),
            lines,
        }
    }

    /// The bar, made now if there is something to count.
    fn bar_for(&self, total: u64) -> Option<&ProgressBar> {
        if !self.terminal || (total == 0 && self.bar.get().is_none()) {
            return self.bar.get();
        }
        Some(self.bar.get_or_init(|| {
            let bar = ProgressBar::new(total);
            if let Ok(style) = ProgressStyle::with_template(&self.unit.template()) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar.set_message(self.what.clone());
            bar
        }))
    }

    /// Sets the position and total, in the progress's unit.
    pub fn update(&self, done: u64, total: u64) {
        if let Some(bar) = self.bar_for(total) {
            if self.unit == Unit::Countdown {
                bar.set_prefix(format!("{} s left", total.saturating_sub(done)));
            }
            bar.set_length(total);
            bar.set_position(done);
        }
        if let Some(last) = &self.lines {
            let tenth = (done.min(total).saturating_mul(10))
                .checked_div(total)
                .unwrap_or(10)
                .min(10);
            if last.fetch_max(tenth + 1, Ordering::Relaxed) < tenth + 1 {
                eprintln!(
                    "jp-store: {}: {}% ({})",
                    self.what,
                    tenth * 10,
                    self.unit.amount(done, total)
                );
            }
        }
    }

    /// Prints a note above the bar (or as `jp-store: LINE`), unless `-q`.
    pub fn println(&self, line: &str) {
        if verbosity() == Verbosity::Quiet {
            return;
        }
        match self.bar.get() {
            Some(bar) => bar.println(shown_lines(line)),
            None => eprint_line(&format!("jp-store: {line}")),
        }
    }

    /// Prints `line` to standard error ([`shown_lines`]), above the bar if
    /// there is one (warnings: printed whatever the verbosity).
    pub fn eprintln(&self, line: &str) {
        match self.bar.get() {
            Some(bar) => bar.suspend(|| eprint_line(line)),
            None => eprint_line(line),
        }
    }

    /// Removes the bar.
    pub fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

/// Writes one line of a command's result to standard output, exactly as
/// given. When the reader of the output has gone away (`jp-store ls |
/// head -1`), the command ends quietly with status 0, as `head` asked for
/// no more; any other failure to write is reported and ends it with
/// status 1.
pub fn write_line(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{line}") {
        exit_on_write_error(&e);
    }
}

/// Ends the command for an error writing its output (see [`write_line`]).
pub fn exit_on_write_error(e: &std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    eprintln!("jp-store: error: writing to standard output: {e}");
    std::process::exit(1);
}

/// `println!` for a command's results for a person, one line, through
/// [`shown`] and [`write_line`].
#[macro_export]
macro_rules! outln {
    () => {
        $crate::output::write_line("")
    };
    ($($arg:tt)*) => {
        $crate::output::write_line(&$crate::output::shown(&format!($($arg)*)))
    };
}

/// `println!` for a command's results as JSON (or another form a program
/// reads), exactly as given, through [`write_line`].
#[macro_export]
macro_rules! jsonln {
    ($($arg:tt)*) => {
        $crate::output::write_line(&format!($($arg)*))
    };
}

/// `eprintln!` for a person, through [`shown_lines`].
#[macro_export]
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::output::eprint_line(&format!($($arg)*))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        assert!(matches!(shown("plain é 日本 \\ \"q\""), Cow::Borrowed(_)));
        assert_eq!(
            shown("a\u{1b}[2Jb\nc\r\td\u{7f}e\u{9b}f\u{202e}g\u{2028}h\u{2066}i\u{0}"),
            "a\\x1b[2Jb\\nc\\r\\td\\x7fe\\u{9b}f\\u{202e}g\\u{2028}h\\u{2066}i\\x00"
        );
        assert_eq!(shown_lines("one\ntwo\u{1b}"), "one\ntwo\\x1b");
    }

    #[test]
    fn progress_says_its_unit() {
        assert_eq!(
            Unit::Items("conversation").amount(3, 30),
            "3 of 30 conversations"
        );
        assert_eq!(
            Unit::Items("conversation").amount(1, 1),
            "1 of 1 conversation"
        );
        assert_eq!(Unit::Items("blob").amount(0, 2), "0 of 2 blobs");
        assert_eq!(Unit::Bytes.amount(1340, 4096), "1.3 KiB of 4.0 KiB");
        assert_eq!(Unit::Countdown.amount(19, 750), "731 s left of 750 s");
        assert!(Unit::Items("entry")
            .template()
            .contains("{pos}/{len} entries"));
        assert!(!Unit::Items("conversation").template().contains("bytes"));
        assert!(Unit::Bytes.template().contains("{bytes}/{total_bytes}"));
        assert!(!Unit::Countdown.template().contains("bytes"));
    }

    #[test]
    fn counts_are_singular_for_one_and_plural_otherwise() {
        assert_eq!(count(1u64, "conversation"), "1 conversation");
        assert_eq!(count(0u64, "conversation"), "0 conversations");
        assert_eq!(count(2u64, "conversation"), "2 conversations");
        assert_eq!(count(1u64, "entry"), "1 entry");
        assert_eq!(count(3u64, "entry"), "3 entries");
        assert_eq!(count(2u64, "key"), "2 keys");
        assert_eq!(count(2u64, "pass"), "2 passes");
        assert_eq!(count_of(1, "payload"), "1 payload");
        assert_eq!(count_of(1, "file"), "1 file");
        assert_eq!(count_of(7, "blob"), "7 blobs");
    }
}
