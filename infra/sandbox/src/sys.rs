//! The few Linux calls the sandbox needs that neither std nor tokio offers: pipes and a memfd
//! handed to bubblewrap by number, stderr joined to stdout, process-group kill, and pidfds to
//! kill and await the sandbox's init process. All `unsafe` of the module lives here.

use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// Makes a pipe, `(read end, write end)`, both close-on-exec.
pub(super) fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1 as RawFd; 2];
    // SAFETY: `fds` is a valid array of two ints for the kernel to fill.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both are fresh descriptors that nothing else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Makes a connected pair of Unix stream sockets, both close-on-exec.
///
/// Used where the engine writes to bubblewrap: unlike a pipe, a socket can be written to with
/// `MSG_NOSIGNAL`, so a reader that died early cannot raise SIGPIPE in the engine.
pub(super) fn socket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let (a, b) = UnixStream::pair()?;
    Ok((OwnedFd::from(a), OwnedFd::from(b)))
}

/// Sends one byte on a socket, without SIGPIPE if the other end is closed.
pub(super) fn send_byte(socket: &OwnedFd) -> io::Result<()> {
    let byte = [1u8];
    // SAFETY: `byte` is valid for reads of one byte for the duration of the call.
    let sent = unsafe {
        libc::send(
            socket.as_raw_fd(),
            byte.as_ptr().cast(),
            byte.len(),
            libc::MSG_NOSIGNAL,
        )
    };
    if sent == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// An anonymous in-memory file holding `data`, positioned at its start, close-on-exec.
///
/// bubblewrap reads its `--args` from it, so what it holds never reaches a disk or an argv.
pub(super) fn memfd_with(data: &[u8]) -> io::Result<OwnedFd> {
    // SAFETY: the name is a NUL-terminated C string; the flags are valid.
    let fd = unsafe { libc::memfd_create(c"overture-sandbox-args".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: memfd_create succeeded, so `fd` is a fresh descriptor that nothing else owns.
    let mut file = unsafe { File::from_raw_fd(fd) };
    file.write_all(data)?;
    // bubblewrap reads from the shared file offset, so rewind it.
    file.seek(SeekFrom::Start(0))?;
    Ok(OwnedFd::from(file))
}

/// Clears close-on-exec on `fds`, so the program about to be exec'd inherits them.
///
/// Meant for `pre_exec`: it makes only async-signal-safe calls and does not allocate.
pub(super) fn clear_cloexec(fds: &[RawFd]) -> io::Result<()> {
    for &fd in fds {
        // SAFETY: fcntl on a descriptor number has no memory effects; a wrong number fails
        // with EBADF.
        if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } == -1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Makes stderr a duplicate of stdout, so both go down the same pipe in the order written.
///
/// Meant for `pre_exec`, after the child's stdio is set up: dup2 is async-signal-safe.
pub(super) fn stderr_to_stdout() -> io::Result<()> {
    // SAFETY: dup2 on descriptor numbers has no memory effects.
    if unsafe { libc::dup2(libc::STDOUT_FILENO, libc::STDERR_FILENO) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sends SIGKILL to process group `pgid`; a group that is already gone is not an error.
pub(super) fn kill_process_group(pgid: u32) -> io::Result<()> {
    let pgid = libc::pid_t::try_from(pgid)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "process group id too large"))?;
    // SAFETY: killpg has no memory effects.
    if unsafe { libc::killpg(pgid, libc::SIGKILL) } == -1 {
        let error = io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::ESRCH) {
            return Err(error);
        }
    }
    Ok(())
}

/// A handle on one process that stays valid after it exits, so a signal sent through it can
/// never reach another process that reused the pid.
#[derive(Debug)]
pub(super) struct Pidfd(OwnedFd);

impl Pidfd {
    /// Opens a handle on `pid`; `None` if no such process exists.
    pub(super) fn open(pid: u32) -> io::Result<Option<Self>> {
        let pid = libc::pid_t::try_from(pid)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "pid too large"))?;
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            let error = io::Error::last_os_error();
            return match error.raw_os_error() {
                Some(libc::ESRCH) => Ok(None),
                _ => Err(error),
            };
        }
        let fd = RawFd::try_from(fd)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "pidfd out of range"))?;
        // SAFETY: pidfd_open succeeded, so `fd` is a fresh descriptor that nothing else owns.
        Ok(Some(Self(unsafe { OwnedFd::from_raw_fd(fd) })))
    }

    /// Sends SIGKILL; a process that has already exited is not an error.
    pub(super) fn kill(&self) -> io::Result<()> {
        // SAFETY: pidfd_send_signal with a null siginfo and no flags has no memory effects.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.0.as_raw_fd(),
                libc::SIGKILL,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        if rc == -1 {
            let error = io::Error::last_os_error();
            if error.raw_os_error() != Some(libc::ESRCH) {
                return Err(error);
            }
        }
        Ok(())
    }

    /// Blocks until the process has exited (it need not be reaped) or `timeout` passes;
    /// returns whether it exited.
    pub(super) fn wait_exited_blocking(&self, timeout: Duration) -> io::Result<bool> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            // Rounded up, so that a wait that ends early is followed by one that reaches the
            // deadline instead of spinning on zero-millisecond polls.
            let millis =
                libc::c_int::try_from(left.as_micros().div_ceil(1000)).unwrap_or(libc::c_int::MAX);
            let mut poll = libc::pollfd {
                fd: self.0.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: `poll` points to one valid pollfd for the duration of the call.
            let ready = unsafe { libc::poll(&mut poll, 1, millis) };
            match ready {
                -1 => {
                    let error = io::Error::last_os_error();
                    if error.kind() != io::ErrorKind::Interrupted {
                        return Err(error);
                    }
                }
                0 if Instant::now() >= deadline => return Ok(false),
                0 => {}
                _ => return Ok(true),
            }
        }
    }

    /// A second handle on the same process, for a blocking task to own.
    pub(super) fn try_clone(&self) -> io::Result<Self> {
        self.0.try_clone().map(Self)
    }
}
