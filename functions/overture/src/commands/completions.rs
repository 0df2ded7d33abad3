//! `overture completions bash|zsh|fish`: a shell's completion script, generated from the very
//! clap definitions the program parses with, so it never drifts from the commands.

use clap::CommandFactory;
use clap_complete::Shell;

use crate::app::Cli;

/// `overture completions`.
#[derive(clap::Args)]
pub struct CompletionsArgs {
    /// The shell to complete in.
    #[arg(value_enum)]
    shell: CompletionShell,
}

/// The shells a script is printed for.
#[derive(Clone, Copy, clap::ValueEnum)]
enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

impl CompletionsArgs {
    /// Prints the script on stdout.
    pub fn run(self) {
        let shell = match self.shell {
            CompletionShell::Bash => Shell::Bash,
            CompletionShell::Zsh => Shell::Zsh,
            CompletionShell::Fish => Shell::Fish,
        };
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), "overture", &mut script);
        out!("{}", String::from_utf8_lossy(&script));
    }
}
