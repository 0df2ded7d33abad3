//! What an attempt may use of the machine, seen from the runner: the limit a failed attempt ran
//! into ([`LimitReached`], which names it to the user), and the attempt's log kept to its size
//! ([`CappedLog`]: the head and the tail, with a line saying how much was cut between them).

use std::io::{self, Write};

use overture_events::limits::Bytes;

use crate::workspace::TailBuffer;

/// The limit an attempt ran into before it failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LimitReached {
    /// The kernel killed one of its processes for lack of memory.
    Memory {
        /// The memory limit, in bytes.
        limit: u64,
    },
    /// It tried to run more processes at once than it may.
    Processes {
        /// The process limit.
        limit: u32,
    },
    /// Its `/work` filled up.
    Workspace {
        /// The workspace limit, in bytes.
        limit: u64,
    },
}

impl std::fmt::Display for LimitReached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LimitReached::Memory { limit } => {
                write!(f, "out of memory (limit {})", Bytes(*limit))
            }
            LimitReached::Processes { limit } => {
                write!(f, "process limit reached (limit {limit})")
            }
            LimitReached::Workspace { limit } => {
                write!(f, "workspace full (limit {})", Bytes(*limit))
            }
        }
    }
}

/// Passes the first half of `limit` bytes through as they come, keeps only the last half of
/// the rest, and writes that tail, after a line saying how many bytes were cut, when flushed
/// (the sandbox flushes once, at the end of the output) or dropped.
///
/// A flood of output thus costs the log at most `limit` bytes and a line, and still shows how
/// the step started and how it ended.
pub struct CappedLog<W: Write> {
    inner: W,
    /// What the head may still take.
    head_left: u64,
    tail: TailBuffer,
    /// Bytes past the head, kept or not.
    past_head: u64,
    /// Whether the head ended a line, for where the cut line starts.
    head_ended_line: bool,
}

impl<W: Write> CappedLog<W> {
    /// Keeps at most `limit` bytes of what is written to `inner`.
    pub fn new(inner: W, limit: u64) -> Self {
        let half = limit / 2;
        Self {
            inner,
            head_left: half,
            tail: TailBuffer::new(usize::try_from(limit - half).unwrap_or(usize::MAX)),
            past_head: 0,
            head_ended_line: true,
        }
    }

    /// Writes the cut line and the tail, once.
    fn finish(&mut self) -> io::Result<()> {
        if self.past_head == 0 {
            return Ok(());
        }
        let tail = std::mem::replace(&mut self.tail, TailBuffer::new(0)).into_vec();
        let cut = self.past_head - tail.len() as u64;
        self.past_head = 0;
        if cut > 0 {
            let start = if self.head_ended_line { "" } else { "\n" };
            writeln!(self.inner, "{start}… {cut} bytes cut …")?;
        }
        self.inner.write_all(&tail)
    }
}

impl<W: Write> Write for CappedLog<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let head = usize::try_from(self.head_left)
            .unwrap_or(usize::MAX)
            .min(bytes.len());
        if head > 0 && self.past_head == 0 {
            self.inner.write_all(&bytes[..head])?;
            self.head_left -= head as u64;
            self.head_ended_line = bytes[head - 1] == b'\n';
        }
        let rest = if self.past_head == 0 {
            &bytes[head..]
        } else {
            bytes
        };
        if !rest.is_empty() {
            self.past_head += rest.len() as u64;
            self.tail.push(rest);
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.finish()?;
        self.inner.flush()
    }
}

impl<W: Write> Drop for CappedLog<W> {
    fn drop(&mut self) {
        if let Err(error) = self.finish() {
            tracing::warn!(%error, "could not finish the step's log");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capped(limit: u64, pieces: &[&[u8]]) -> String {
        let mut out = Vec::new();
        {
            let mut log = CappedLog::new(&mut out, limit);
            for piece in pieces {
                log.write_all(piece).expect("written");
            }
            log.flush().expect("flushed");
        }
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn output_within_the_limit_is_kept_whole() {
        assert_eq!(capped(100, &[b"one\n", b"two\n"]), "one\ntwo\n");
    }

    #[test]
    fn a_flood_keeps_the_head_and_the_tail_and_says_how_much_was_cut() {
        let flood = "x".repeat(1000);
        let log = capped(20, &[b"start\n", flood.as_bytes(), b"\nthe end\n"]);
        assert!(log.starts_with("start\nxxxx"), "{log}");
        assert!(log.ends_with("x\nthe end\n"), "{log}");
        assert!(log.contains("xxxx\n… 995 bytes cut …\nx\nthe end"), "{log}");
    }

    #[test]
    fn the_limits_read_as_the_user_wrote_them() {
        assert_eq!(
            LimitReached::Memory { limit: 1 << 30 }.to_string(),
            "out of memory (limit 1 GiB)"
        );
        assert_eq!(
            LimitReached::Processes { limit: 256 }.to_string(),
            "process limit reached (limit 256)"
        );
        assert_eq!(
            LimitReached::Workspace { limit: 64 << 20 }.to_string(),
            "workspace full (limit 64 MiB)"
        );
    }
}
