//! The progress bar of a run: documents done of all, with documents and chunks per second.
//! Drawn on stderr only when asked and stderr is a terminal, so logs and pipes stay clean.

use std::io::IsTerminal;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

pub(crate) struct Progress {
    bar: ProgressBar,
    start: Instant,
    written: u64,
    chunks: u64,
}

impl Progress {
    pub fn new(show: bool, files: usize) -> Progress {
        let bar = if show && std::io::stderr().is_terminal() {
            let style = ProgressStyle::with_template(
                "{elapsed_precise} [{wide_bar}] {pos}/{len} documents  {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar());
            ProgressBar::new(files as u64).with_style(style)
        } else {
            ProgressBar::hidden()
        };
        Progress {
            bar,
            start: Instant::now(),
            written: 0,
            chunks: 0,
        }
    }

    /// A file looked at and left as it was (unchanged or skipped).
    pub fn passed(&mut self) {
        self.bar.inc(1);
    }

    /// A document written with its chunks.
    pub fn written(&mut self, chunks: usize) {
        self.written += 1;
        self.chunks += chunks as u64;
        let secs = self.start.elapsed().as_secs_f64().max(1e-3);
        self.bar.set_message(format!(
            "{:.1} docs/s, {} chunks, {:.1} chunks/s",
            self.written as f64 / secs,
            self.chunks,
            self.chunks as f64 / secs
        ));
        self.bar.inc(1);
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
