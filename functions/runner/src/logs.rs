//! Every attempt's output, kept for `overture logs`: the [`AttemptLogs`] port, and the
//! [`MaskingWriter`] that replaces secret values before a byte reaches it.

use std::io::{self, Write};

use overture_domain::secret::Masker;
use overture_events::DeploymentId;

use crate::PortError;

/// Which run of a step a log holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogName {
    /// An attempt (1-based).
    Attempt(u32),
    /// The destruction of the step's resources.
    Destroy,
}

impl std::fmt::Display for LogName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LogName::Attempt(attempt) => write!(f, "{attempt}"),
            LogName::Destroy => f.write_str("destroy"),
        }
    }
}

/// Keeps the output of each attempt.
pub trait AttemptLogs: Send + Sync {
    /// A new, empty log for this run of the step; what is written to it is already masked.
    fn create(
        &self,
        deployment: DeploymentId,
        step: &str,
        name: LogName,
    ) -> Result<Box<dyn Write + Send + Sync>, PortError>;
}

/// The longest line held back while waiting for its end; a longer one is masked and written in
/// pieces, and a secret split across two pieces could then slip through.
const MAX_HELD: usize = 64 * 1024;

/// Writes output line by line with every secret value replaced by `***`.
///
/// A secret may arrive split across two reads of the pipe, so nothing is written before its
/// line is complete (or [`MAX_HELD`] bytes long); [`flush`](Write::flush) writes what is held.
pub struct MaskingWriter<W: Write> {
    inner: W,
    masker: Masker,
    held: Vec<u8>,
}

impl<W: Write> MaskingWriter<W> {
    /// Masks what is written with `masker` before passing it to `inner`.
    pub fn new(inner: W, masker: Masker) -> Self {
        Self {
            inner,
            masker,
            held: Vec::new(),
        }
    }

    fn write_held(&mut self, upto: usize) -> io::Result<()> {
        let line: Vec<u8> = self.held.drain(..upto).collect();
        self.inner
            .write_all(self.masker.mask_bytes(&line).as_bytes())
    }
}

impl<W: Write> Write for MaskingWriter<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.held.extend_from_slice(bytes);
        while let Some(end) = self.held.iter().position(|&b| b == b'\n') {
            self.write_held(end + 1)?;
        }
        if self.held.len() >= MAX_HELD {
            self.write_held(self.held.len())?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if !self.held.is_empty() {
            self.write_held(self.held.len())?;
        }
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use overture_domain::secret::SecretString;

    use super::*;

    #[test]
    fn a_secret_split_across_writes_is_still_masked() {
        let secret = SecretString::from("hunter2");
        let mut out = Vec::new();
        {
            let mut writer = MaskingWriter::new(&mut out, Masker::new([&secret]));
            for piece in ["login: hun", "ter2\nnext ", "line hunter2"] {
                writer.write_all(piece.as_bytes()).expect("written");
            }
            writer.flush().expect("flushed");
        }
        assert_eq!(
            String::from_utf8(out).expect("utf-8"),
            "login: ***\nnext line ***"
        );
    }

    #[test]
    fn nothing_of_a_line_is_written_before_it_ends() {
        let mut out = Vec::new();
        let mut writer = MaskingWriter::new(&mut out, Masker::default());
        writer.write_all(b"partial").expect("written");
        drop(writer);
        assert!(out.is_empty());
    }
}
