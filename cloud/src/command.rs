//! External commands (`ip`, `nft`) as values: built once, run either from async code (the live
//! cloud, through tokio) or blocking (clean-up, which must also work from `Drop` and after a
//! crash). Arguments are passed as a list, never through a shell.

use std::fmt;
use std::io::Write as _;
use std::process::{Output, Stdio};

use tokio::io::AsyncWriteExt as _;

/// One command to run: a program, its arguments, and maybe text for its stdin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    program: &'static str,
    args: Vec<String>,
    stdin: Option<String>,
}

/// A command that could not run or failed.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The program could not be started (missing?).
    #[error("cannot run `{command}`: {source} (is it installed? `apt-get install -y iproute2 nftables`)")]
    Spawn {
        /// The command line.
        command: String,
        /// Why.
        source: std::io::Error,
    },
    /// The program ran and failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    Failed {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// What it wrote on stderr.
        stderr: String,
    },
}

impl CommandError {
    /// Whether the command failed because what it was to remove does not exist.
    pub fn is_missing(&self) -> bool {
        match self {
            CommandError::Failed { stderr, .. } => {
                stderr.contains("No such file or directory")
                    || stderr.contains("Cannot find device")
                    // A veth end the kernel removed with its peer's namespace meanwhile.
                    || stderr.contains("No such device")
                    || stderr.contains("does not exist")
            }
            CommandError::Spawn { .. } => false,
        }
    }
}

impl Invocation {
    /// `program` with `args`.
    pub fn new<I, S>(program: &'static str, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            program,
            args: args.into_iter().map(Into::into).collect(),
            stdin: None,
        }
    }

    /// The same command, reading `text` on stdin.
    pub fn with_stdin(mut self, text: String) -> Self {
        self.stdin = Some(text);
        self
    }

    /// Runs it from async code; returns its stdout.
    pub async fn run(&self) -> Result<String, CommandError> {
        let mut child = tokio::process::Command::new(self.program)
            .args(&self.args)
            .stdin(if self.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| self.spawn_error(source))?;
        if let (Some(text), Some(mut stdin)) = (&self.stdin, child.stdin.take()) {
            stdin
                .write_all(text.as_bytes())
                .await
                .map_err(|source| self.spawn_error(source))?;
        }
        let output = child
            .wait_with_output()
            .await
            .map_err(|source| self.spawn_error(source))?;
        self.outcome(output)
    }

    /// Runs it, blocking the calling thread; returns its stdout.
    pub fn run_blocking(&self) -> Result<String, CommandError> {
        let mut child = std::process::Command::new(self.program)
            .args(&self.args)
            .stdin(if self.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| self.spawn_error(source))?;
        if let (Some(text), Some(mut stdin)) = (&self.stdin, child.stdin.take()) {
            stdin
                .write_all(text.as_bytes())
                .map_err(|source| self.spawn_error(source))?;
        }
        let output = child
            .wait_with_output()
            .map_err(|source| self.spawn_error(source))?;
        self.outcome(output)
    }

    fn spawn_error(&self, source: std::io::Error) -> CommandError {
        CommandError::Spawn {
            command: self.to_string(),
            source,
        }
    }

    fn outcome(&self, output: Output) -> Result<String, CommandError> {
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(CommandError::Failed {
                command: self.to_string(),
                status: output.status.to_string(),
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
            })
        }
    }
}

impl fmt::Display for Invocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.program)?;
        for arg in &self.args {
            write!(f, " {arg}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_keeps_the_command_and_its_stderr() {
        let error = Invocation::new(
            "sh",
            ["-c", "echo gone: No such file or directory >&2; exit 3"],
        )
        .run_blocking();
        match error {
            Err(error @ CommandError::Failed { .. }) => {
                assert!(error.is_missing());
                assert!(error.to_string().starts_with("`sh -c "), "{error}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn stdin_reaches_the_command() {
        let echoed = Invocation::new("cat", Vec::<String>::new())
            .with_stdin("hello\n".into())
            .run()
            .await;
        assert_eq!(echoed.ok().as_deref(), Some("hello\n"));
    }
}
