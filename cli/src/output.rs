//! Terminal output helpers: progress bars on a terminal, silence otherwise.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// A byte-progress bar on stderr, shown only when stderr is a terminal.
pub struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    /// A bar labelled `what` (hidden when stderr is not a terminal).
    pub fn new(what: &str) -> Self {
        if !std::io::stderr().is_terminal() {
            return Self { bar: None };
        }
        let bar = ProgressBar::new(0);
        if let Ok(style) = ProgressStyle::with_template(
            "{msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(what.to_owned());
        Self { bar: Some(bar) }
    }

    /// Sets the position and total, in bytes.
    pub fn update(&self, done: u64, total: u64) {
        if let Some(bar) = &self.bar {
            bar.set_length(total);
            bar.set_position(done);
        }
    }

    /// Prints a line above the bar (or to stderr when there is no bar).
    pub fn println(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("jp-store: {line}"),
        }
    }

    /// Prints `line` to stderr as it is, above the bar if there is one.
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
