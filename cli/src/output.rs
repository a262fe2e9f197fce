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

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

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

/// Prints a note (`jp-store: LINE`) unless `-q`.
pub fn note(line: &str) {
    if verbosity() > Verbosity::Quiet {
        eprintln!("jp-store: {line}");
    }
}

/// Prints a note only with `-v`.
pub fn detail(line: &str) {
    if verbosity() == Verbosity::Verbose {
        eprintln!("jp-store: {line}");
    }
}

/// Progress of a long command on standard error (see the module
/// documentation).
pub struct Progress {
    what: String,
    bar: Option<ProgressBar>,
    /// With `-v` and no bar: the last tenth reported (+1; 0 for none).
    lines: Option<AtomicU64>,
}

impl Progress {
    /// Progress labelled `what`.
    pub fn new(what: &str) -> Self {
        let shown = verbosity() > Verbosity::Quiet && !JSON.load(Ordering::Relaxed);
        let terminal = std::io::stderr().is_terminal();
        let bar = (shown && terminal).then(|| {
            let bar = ProgressBar::new(0);
            if let Ok(style) = ProgressStyle::with_template(
                "{msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
            ) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar.set_message(what.to_owned());
            bar
        });
        let lines =
            (shown && !terminal && verbosity() == Verbosity::Verbose).then(|| AtomicU64::new(0));
        Self {
            what: what.to_owned(),
            bar,
            lines,
        }
    }

    /// Sets the position and total, in bytes (or items).
    pub fn update(&self, done: u64, total: u64) {
        if let Some(bar) = &self.bar {
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
                    "jp-store: {}: {}% ({done} of {total})",
                    self.what,
                    tenth * 10
                );
            }
        }
    }

    /// Prints a note above the bar (or as `jp-store: LINE`), unless `-q`.
    pub fn println(&self, line: &str) {
        if verbosity() == Verbosity::Quiet {
            return;
        }
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("jp-store: {line}"),
        }
    }

    /// Prints `line` to standard error as it is, above the bar if there is
    /// one (warnings: printed whatever the verbosity).
    pub fn eprintln(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.suspend(|| eprintln!("{line}")),
            None => eprintln!("{line}"),
        }
    }

    /// Removes the bar.
    pub fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

/// Writes one line of a command's result to standard output. When the
/// reader of the output has gone away (`jp-store ls | head -1`), the
/// command ends quietly with status 0, as `head` asked for no more; any
/// other failure to write is reported and ends it with status 1.
pub fn write_line(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{args}") {
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

/// `println!` for a command's results, through [`write_line`].
#[macro_export]
macro_rules! outln {
    () => {
        $crate::output::write_line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::output::write_line(format_args!($($arg)*))
    };
}
