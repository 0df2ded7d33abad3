//! `overture completions SHELL`: the completion script a user installs, printed from the very
//! clap definitions the program parses with.

use std::process::{Command, Output};

fn completions(shell: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_overture"))
        .args(["completions", shell])
        .output()
        .expect("overture runs")
}

#[test]
fn each_shell_gets_a_script_that_completes_the_commands() {
    for shell in ["bash", "zsh", "fish"] {
        let output = completions(shell);
        let script = String::from_utf8_lossy(&output.stdout);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{shell}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(script.contains("deploy"), "{shell} script: {script}");
        assert!(script.contains("redrive"), "{shell} script: {script}");
    }
}

#[test]
fn a_shell_it_does_not_know_is_bad_input() {
    let output = completions("powershell-ish");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(output.stdout.is_empty());
    assert!(
        stderr.contains("invalid value 'powershell-ish'"),
        "clap names the value: {stderr}"
    );
    assert!(
        stderr.contains("[possible values: bash, zsh, fish]"),
        "clap names the shells: {stderr}"
    );
}
