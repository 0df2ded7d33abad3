//! What every sandbox does with a step's working directory, once on the machine that runs it:
//! the checks on the paths a job names, the tail of its output, and reading back what the
//! command left (`$OVERTURE_OUTPUTS`, the files it collects). Shared by the bubblewrap sandbox
//! (`overture-sandbox`) and the Fargate step task's entrypoint (`overture_aws::step_task`), so
//! that a step's files and outputs come back the same way on both forms.

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path};

use crate::OutputsFile;

/// The most the engine reads back from a step's `$OVERTURE_OUTPUTS` file; a step that writes
/// more gets [`OutputsFile::TooLarge`].
pub const MAX_OUTPUTS_FILE: u64 = 1024 * 1024;
/// The most the engine reads back of each file a job collects (a Terraform state, say).
pub const MAX_COLLECTED_FILE: u64 = 64 * 1024 * 1024;

/// The last `limit` bytes written to it.
#[derive(Debug)]
pub struct TailBuffer {
    bytes: VecDeque<u8>,
    limit: usize,
}

impl TailBuffer {
    /// An empty buffer that keeps at most `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self {
            bytes: VecDeque::new(),
            limit,
        }
    }

    /// Appends `chunk`, dropping the oldest bytes beyond the limit.
    pub fn push(&mut self, chunk: &[u8]) {
        let chunk = &chunk[chunk.len().saturating_sub(self.limit)..];
        let excess = (self.bytes.len() + chunk.len()).saturating_sub(self.limit);
        self.bytes.drain(..excess);
        self.bytes.extend(chunk);
    }

    /// The bytes kept, oldest first.
    pub fn into_vec(self) -> Vec<u8> {
        self.bytes.into()
    }
}

/// Why a path a job names cannot be used under the working directory, or `None` when it can:
/// it must be relative, below the directory, with no `..` and no leading `./`.
pub fn path_outside(path: &Path) -> Option<&'static str> {
    if path.as_os_str().is_empty() {
        return Some("it is empty");
    }
    for component in path.components() {
        match component {
            Component::Normal(_) => {}
            Component::RootDir | Component::Prefix(_) => {
                return Some("it must be relative to the workspace")
            }
            Component::ParentDir => return Some("it must not contain '..'"),
            // `Path::components` drops inner `.`s, so this is only a leading `./`.
            Component::CurDir => return Some("it must not start with '.'"),
        }
    }
    None
}

/// The content of `work/relative` if it is a regular file reached through real directories only;
/// `None` when it is missing, or a link, or not a regular file. Read only once every process of
/// the step is gone, so nothing can swap a file for a link between the check and the read.
/// A file over `limit` bytes is [`io::ErrorKind::FileTooLarge`].
pub fn read_inside(work: &Path, relative: &Path, limit: u64) -> io::Result<Option<Vec<u8>>> {
    let mut path = work.to_owned();
    let mut components = relative.components().peekable();
    while let Some(component) = components.next() {
        path.push(component);
        let metadata = match fs::symlink_metadata(&path) {
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            other => other?,
        };
        let wanted = if components.peek().is_some() {
            metadata.is_dir()
        } else {
            metadata.is_file()
        };
        if !wanted {
            return Ok(None);
        }
    }
    let mut content = Vec::new();
    File::open(&path)?
        .take(limit.saturating_add(1))
        .read_to_end(&mut content)?;
    if u64::try_from(content.len()).map_or(true, |len| len > limit) {
        return Err(io::ErrorKind::FileTooLarge.into());
    }
    Ok(Some(content))
}

/// Reads back the step's `$OVERTURE_OUTPUTS` file at `path`; more than `limit` bytes is not read,
/// only measured. What the step may have put in its place is never followed nor waited on: a
/// link fails to open (the system's `ELOOP`), and anything but a regular file (a FIFO would
/// block the read for ever) is [`io::ErrorKind::InvalidInput`].
pub fn read_outputs_file(path: &Path, limit: u64) -> io::Result<OutputsFile> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "it is not a regular file",
        ));
    }
    let bytes = metadata.len();
    if bytes > limit {
        return Ok(OutputsFile::TooLarge { bytes, limit });
    }
    let mut content = Vec::new();
    file.take(limit).read_to_end(&mut content)?;
    Ok(OutputsFile::Read(content))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_the_tail() {
        let mut tail = TailBuffer::new(5);
        tail.push(b"abc");
        tail.push(b"def");
        assert_eq!(tail.into_vec(), b"bcdef");

        let mut tail = TailBuffer::new(3);
        tail.push(b"0123456789");
        assert_eq!(tail.into_vec(), b"789");

        let mut tail = TailBuffer::new(0);
        tail.push(b"x");
        assert!(tail.into_vec().is_empty());
    }

    #[test]
    fn an_outputs_file_is_read_up_to_its_limit_and_never_through_a_link_or_a_fifo() {
        let dir = tempfile::tempdir().expect("a directory");
        let file = dir.path().join("outputs");
        fs::write(&file, b"ip=10.0.0.5\n").expect("written");
        assert_eq!(
            read_outputs_file(&file, 64).expect("read"),
            OutputsFile::Read(b"ip=10.0.0.5\n".to_vec())
        );
        assert_eq!(
            read_outputs_file(&file, 4).expect("measured"),
            OutputsFile::TooLarge {
                bytes: 12,
                limit: 4
            }
        );
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).expect("linked");
        assert!(
            read_outputs_file(&link, 64).is_err(),
            "a link is not followed"
        );
        let fifo = dir.path().join("fifo");
        let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("a path");
        // SAFETY: mkfifo reads a NUL-terminated path that lives through the call.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        let error = read_outputs_file(&fifo, 64).expect_err("a FIFO is not read");
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn paths_stay_inside_the_workspace() {
        assert_eq!(path_outside(Path::new("a/b.txt")), None);
        for bad in ["", "/etc/x", "../x", "a/../../x", "./a"] {
            assert!(path_outside(Path::new(bad)).is_some(), "{bad}");
        }
    }
}
