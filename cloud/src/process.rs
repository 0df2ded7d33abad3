//! Processes by pid, safely: a pid is only signalled while `/proc` shows the same start time as
//! when it was recorded, so a pid the kernel has since reused for another process is left alone.

use std::time::{Duration, Instant};

/// A recorded process: its pid and its start time (clock ticks after boot, from `/proc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProcessId {
    /// The pid.
    pub pid: u32,
    /// Its start time, which tells it apart from a later process with the same pid.
    pub start_time: u64,
}

/// Which signal to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Asks it to stop.
    Terminate,
    /// Ends it.
    Kill,
}

impl ProcessId {
    /// The running process with this pid, if any.
    pub fn of(pid: u32) -> Option<Self> {
        stat(pid).map(|(start_time, _)| Self { pid, start_time })
    }

    /// Whether this very process still runs (a zombie does not count).
    pub fn is_running(&self) -> bool {
        matches!(stat(self.pid), Some((start, state)) if start == self.start_time && state != 'Z' && state != 'X')
    }

    /// Signals it if it is still this process; whether it was signalled.
    pub fn signal(&self, signal: Signal) -> bool {
        if !self.is_running() {
            return false;
        }
        let Ok(pid) = libc::pid_t::try_from(self.pid) else {
            return false;
        };
        let signal = match signal {
            Signal::Terminate => libc::SIGTERM,
            Signal::Kill => libc::SIGKILL,
        };
        // SAFETY: kill(2) takes plain integers and touches no memory of ours.
        unsafe { libc::kill(pid, signal) == 0 }
    }

    /// Waits until it no longer runs, up to `limit`; whether it is gone.
    pub fn wait_gone(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while self.is_running() {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }

    /// Kills it and waits for it to be gone (up to `limit`); whether it is gone.
    pub fn kill(&self, limit: Duration) -> bool {
        self.signal(Signal::Kill);
        self.wait_gone(limit)
    }
}

/// The start time and state of a pid, from `/proc/PID/stat`.
fn stat(pid: u32) -> Option<(u64, char)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: fields are counted after the
    // last ')'. There, field 3 (the state) comes first and field 22 (the start time) 20th.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let start_time = fields.nth(18)?.parse().ok()?;
    Some((start_time, state))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_known_by_its_start_time() {
        let Some(me) = ProcessId::of(std::process::id()) else {
            panic!("no /proc entry for this process")
        };
        assert!(me.is_running());
        let impostor = ProcessId {
            start_time: me.start_time + 1,
            ..me
        };
        assert!(!impostor.is_running());
        assert!(!impostor.signal(Signal::Kill));
    }

    #[test]
    fn a_killed_child_is_gone() {
        let Ok(mut child) = std::process::Command::new("sleep").arg("30").spawn() else {
            panic!("cannot start sleep")
        };
        let Some(id) = ProcessId::of(child.id()) else {
            panic!("no /proc entry")
        };
        // A killed child stays a zombie until reaped; a zombie no longer counts as running.
        assert!(id.kill(Duration::from_secs(5)));
        let _ = child.wait();
    }
}
