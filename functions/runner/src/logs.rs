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

/// The most of one line held back while waiting for its end; of a longer one, all but its last
/// [`Masker::hold_back`] bytes is masked and written, so that no secret is split.
const MAX_HELD: usize = 64 * 1024;

/// Writes output line by line with every secret value replaced by `***`.
///
/// A secret may arrive split across two reads of the pipe, so nothing is written before its
/// line is complete; of a line longer than [`MAX_HELD`] bytes, what [`Masker::releasable`] lets
/// go is written, and the last bytes, which may begin a secret, wait for what follows.
/// [`flush`](Write::flush) means the output has ended: it writes all that is held.
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
            let cut = self.masker.releasable(&self.held);
            self.write_held(cut)?;
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

    /// What `text`, written in pieces of `piece` bytes and flushed, leaves in the log.
    fn logged(masker: &Masker, text: &[u8], piece: usize) -> String {
        let mut out = Vec::new();
        {
            let mut writer = MaskingWriter::new(&mut out, masker.clone());
            for chunk in text.chunks(piece) {
                writer.write_all(chunk).expect("written");
            }
            writer.flush().expect("flushed");
        }
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn a_secret_anywhere_around_the_held_limit_of_one_long_line_is_masked() {
        let secret = "s3cr3t-at-the-boundary";
        let masker = Masker::new([&SecretString::from(secret)]);
        // The pipe is read 16 KiB at a time; 4093 is prime, so its boundaries fall everywhere.
        for piece in [16 * 1024, 4093] {
            for offset in MAX_HELD - 2 * secret.len()..MAX_HELD + 2 * secret.len() {
                let mut line = "a".repeat(offset) + secret;
                line.push_str(&"b".repeat(3 * MAX_HELD - line.len()));
                let out = logged(&masker, line.as_bytes(), piece);
                assert!(
                    !out.contains(&secret[..secret.len() / 2])
                        && !out.contains(&secret[secret.len() / 2..]),
                    "secret at byte {offset}, written {piece} bytes at a time"
                );
                assert_eq!(
                    out.len(),
                    line.len() - secret.len() + 3,
                    "nothing else changes"
                );
            }
        }
    }

    #[test]
    fn a_long_line_is_written_before_it_ends() {
        let mut out = Vec::new();
        let mut writer = MaskingWriter::new(&mut out, Masker::new([&SecretString::from("abcd")]));
        writer.write_all(&vec![b'x'; MAX_HELD]).expect("written");
        drop(writer);
        assert_eq!(
            out.len(),
            MAX_HELD - 3,
            "all but the 3 bytes a secret could start in"
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
