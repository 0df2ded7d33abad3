//! The runner's half of the `script` kind: how a step's command and environment are built,
//! and its outputs read. Its settings ([`ScriptSettings`]: the command) and their checks are the
//! kind's other half, `domain/src/kind/script.rs`.
//!
//! Every `{{ ... }}` reference in the command becomes an expansion of a shell variable
//! (`OVERTURE_REF_1`, ...) whose value travels in the environment, so the shell never runs or
//! re-reads it: a parameter or an output holding `; rm -rf /`, `$(...)` or a quote cannot change
//! what the command does. How the expansion is written depends on the quoting around the
//! reference (unquoted, "...", '...', here-documents, `$( )`, backticks), so the step sees exactly
//! the value in every one: see [`overture_domain::shell`]. A secret reaches the step only as an
//! environment variable: never in the command text, never in an event.
//!
//! A script succeeds when it exits 0; its outputs are the `key=value` lines it writes to
//! `$OVERTURE_OUTPUTS` ([`parse_outputs`]).

use std::collections::BTreeMap;

use overture_domain::kind::ScriptSettings;
use overture_domain::shell::script_command;
use overture_domain::template::Template;
use secrecy::ExposeSecret;

use crate::step::{Prepared, Resolved, StepInput, Verdict};
use crate::SandboxResult;

/// Builds the command and environment of a script step from the deployment's state.
pub fn prepare(input: &StepInput, settings: &ScriptSettings) -> Result<Prepared, String> {
    let template = Template::parse(&settings.command).map_err(|e| e.to_string())?;
    // Reading the settings refused a reference the shell cannot take, so this does not fail.
    let command = script_command(&template, variable).map_err(|errors| {
        let problems: Vec<String> = errors.iter().map(ToString::to_string).collect();
        problems.join("; ")
    })?;
    let mut env = Vec::new();
    let mut secret_env = Vec::new();
    for (index, reference) in template.references().enumerate() {
        let name = variable(index + 1);
        let resolved = input.lookup(reference)?;
        let value = match &resolved {
            Resolved::Plain(value) => value.as_ref(),
            Resolved::Secret(value) => value.expose_secret(),
        };
        // The shell evaluates what these expand to as arithmetic, where bash would run the
        // commands of an array index; a whole number is all a user means there. The value is
        // not shown: it may be a secret.
        if command.numbers.contains(&(index + 1)) && value.trim().parse::<i64>().is_err() {
            return Err(format!(
                "`{reference}` is used inside `$(( ))`, so its value must be a whole number, and it is not"
            ));
        }
        match resolved {
            Resolved::Plain(value) => env.push((name, value.into_owned())),
            Resolved::Secret(value) => secret_env.push((name, value.clone())),
        }
    }
    Ok(Prepared {
        command: command.text,
        env,
        secret_env,
        ..Prepared::default()
    })
}

/// The variable holding the value of the command's `n`th reference (1-based).
fn variable(n: usize) -> String {
    format!("OVERTURE_REF_{n}")
}

/// A script succeeds when it exits 0, with the outputs it wrote to `$OVERTURE_OUTPUTS`.
pub fn conclude(code: i32, result: &SandboxResult) -> Verdict {
    if code != 0 {
        return Verdict::failed(format!("exited with code {code}"));
    }
    match result
        .outputs_file
        .content()
        .and_then(|content| parse_outputs(&String::from_utf8_lossy(content)))
    {
        Ok(outputs) => Verdict::Success(outputs),
        Err(problem) => Verdict::failed(problem),
    }
}

/// Reads the `key=value` lines a step wrote to `$OVERTURE_OUTPUTS`.
pub fn parse_outputs(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut outputs = BTreeMap::new();
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let valid_key = |key: &str| {
            key.chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        match line.split_once('=') {
            // No variable can carry a NUL byte to the steps that use the output.
            Some((_, value)) if value.contains('\0') => {
                return Err(format!(
                    "line {} of $OVERTURE_OUTPUTS holds a NUL byte, which no output can carry",
                    number + 1
                ))
            }
            Some((key, value)) if valid_key(key) => {
                outputs.insert(key.to_owned(), value.to_owned());
            }
            _ => {
                return Err(format!(
                    "line {} of $OVERTURE_OUTPUTS is not `key=value` with a key of letters, digits and '_': {line:?}",
                    number + 1
                ))
            }
        }
    }
    Ok(outputs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::prepare;
    use crate::testing::{input, requested, succeeded};
    use overture_domain::blueprint::parse;
    use overture_domain::secret::{SecretString, SecretValues};
    use overture_domain::Deployment;

    #[test]
    fn references_become_variables_quoted_for_their_place_and_secrets_stay_out_of_the_command() {
        let blueprint = parse(
            "name: x\nparams: { who: {} }\nsecrets: [key]\nsteps:\n  a: { run: noop }\n  b: { run: script, needs: [a], with: { command: 'echo {{ params.who }} \"{{ steps.a.outputs.url }}\" ''{{ secrets.key }}''' } }\n",
        )
        .expect("valid")
        .snapshot;
        let state = Deployment::apply(
            requested(&blueprint, &[("who", "a; rm -rf /")]),
            succeeded("a", &[("url", "http://x")]),
        );
        let secrets: SecretValues = [("key".to_owned(), SecretString::from("s3cr3t"))].into();

        let input = input(&state, "b", &secrets);
        let prepared = prepare(&input).expect("prepares");
        assert_eq!(
            prepared.command,
            r#"echo "${OVERTURE_REF_1}" "${OVERTURE_REF_2}" ''"${OVERTURE_REF_3}"''"#
        );
        assert_eq!(
            prepared.env,
            vec![
                ("OVERTURE_REF_1".into(), "a; rm -rf /".into()),
                ("OVERTURE_REF_2".into(), "http://x".into())
            ]
        );
        assert_eq!(prepared.secret_env.len(), 1);
        assert_eq!(prepared.secret_env[0].1.expose_secret(), "s3cr3t");
        assert!(!prepared.command.contains("s3cr3t"));
    }

    /// Values that would run a command, end a quote or change a word if they were pasted into
    /// a command instead of expanded: every one must reach the step byte for byte.
    const HOSTILE: &[&str] = &[
        "",
        "'",
        "\"",
        "it's \"quoted\"",
        "$(touch pwned)",
        "`touch pwned`",
        "; touch pwned",
        "'; touch pwned; '",
        "\"; touch pwned; \"",
        "a\\b\\\\c",
        "line1\nline2",
        "${HOME}",
        "$HOME $((1+1)) $$",
        "*",
        "EOF",
        "EOF\ntouch pwned\ncat <<EOF",
        "\tEOF",
        "trailing\\",
        "\\",
        "  spaced  ",
        ")\ntouch pwned\n(",
        "esac; touch pwned; case x in x)",
        "# not a comment",
        "-n",
        "}}{{",
        "ünï©ødé \u{1} \u{7f}",
    ];

    /// Every quoting context a user may put a reference in: the command (`@` standing for the
    /// reference) writes into the file `out`, which must then hold `before`, the value, `after`.
    const CONTEXTS: &[(&str, &str, &str, &str)] = &[
        ("unquoted", "printf %s @ > out", "", ""),
        ("unquoted, glued", "printf %s x@y > out", "x", "y"),
        ("double quotes", "printf %s \"<@>\" > out", "<", ">"),
        ("single quotes", "printf %s '<@>' > out", "<", ">"),
        ("here-document", "cat > out <<EOF\n<@>\nEOF", "<", ">\n"),
        (
            "here-document, quoted delimiter",
            "cat > out <<'EOF'\n$HOME\\`<@>`\nEOF",
            "$HOME\\`<",
            ">`\n",
        ),
        (
            "here-document, <<-\"EOF\"",
            "cat > out <<-\"EOF\"\n\t<@>\n\tEOF",
            "<",
            ">\n",
        ),
        (
            "here-document, <<\\EOF",
            "cat > out <<\\EOF\n<@>\nEOF",
            "<",
            ">\n",
        ),
        (
            "$( ) in a here-document",
            "cat > out <<EOF\n$(printf %s '<@>')\nEOF",
            "<",
            ">\n",
        ),
        (
            "here-document in $( )",
            "x=$(cat <<EOF\n<@>\nEOF\n); printf %s \"$x\" > out",
            "<",
            ">",
        ),
        (
            "unquoted in $( )",
            "x=$(printf %s @; printf .); printf %s \"$x\" > out",
            "",
            ".",
        ),
        (
            "single quotes in $( ) in double quotes",
            "printf %s \"$(printf %s '<@>')\" > out",
            "<",
            ">",
        ),
        (
            "$( ) in $( ) in double quotes",
            "printf %s \"$(printf %s \"$(printf %s \"<@>\")\")\" > out",
            "<",
            ">",
        ),
        (
            "backticks",
            "x=`printf %s @; printf .`; printf %s \"$x\" > out",
            "",
            ".",
        ),
        (
            "single quotes in backticks",
            "x=`printf %s '<@>'`; printf %s \"$x\" > out",
            "<",
            ">",
        ),
        (
            "backticks in double quotes",
            "printf %s \"`printf %s @; printf .`\" > out",
            "",
            ".",
        ),
        (
            "escaped double quotes in backticks in double quotes",
            "printf %s \"`printf %s \\\"<@>\\\"`\" > out",
            "<",
            ">",
        ),
        (
            "a case pattern",
            "v=@; case \"$v\" in @) printf %s \"$v\" > out;; *) echo no > out;; esac",
            "",
            "",
        ),
        (
            "a case pattern in $( )",
            "x=$(case a in a) printf %s '<@>';; esac); printf %s \"$x\" > out",
            "<",
            ">",
        ),
        ("a comment", "# @\nprintf %s '<@>' > out", "<", ">"),
        (
            "an assignment",
            "export X=@; printf %s \"$X\" > out",
            "",
            "",
        ),
    ];

    /// The shells to run the table with: `/bin/sh` (dash, as in the sandbox) and bash if it is
    /// installed.
    fn shells() -> Vec<&'static str> {
        ["/bin/sh", "/usr/bin/dash", "/bin/bash"]
            .into_iter()
            .filter(|shell| std::path::Path::new(shell).exists())
            .collect()
    }

    /// Prepares `command` with the value of `{{ params.v }}` or `{{ secrets.s }}` being `value`,
    /// runs it with `shell` in a fresh folder, and returns what it wrote to `out` and whether
    /// anything wrote the file `pwned`.
    fn run(shell: &str, command: &str, value: &str) -> (Vec<u8>, bool, String) {
        let yaml = serde_json::to_string(command).expect("JSON text is YAML");
        let blueprint = parse(&format!(
            "name: x\nparams: {{ v: {{}} }}\nsecrets: [s]\nsteps:\n  a: {{ run: script, with: {{ command: {yaml} }} }}\n"
        ))
        .unwrap_or_else(|e| panic!("{command:?}: {e}"))
        .snapshot;
        let state = requested(&blueprint, &[("v", value)]);
        let secrets: SecretValues = [("s".to_owned(), SecretString::from(value))].into();
        let prepared = prepare(&input(&state, "a", &secrets)).expect("prepares");
        let dir = std::env::temp_dir().join(format!("overture-quoting-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let ran = std::process::Command::new(shell)
            .arg("-c")
            .arg(&prepared.command)
            .env_clear()
            .env("HOME", "/home/nobody")
            .env("PATH", "/usr/bin:/bin")
            .envs(prepared.env.iter().map(|(k, v)| (k, v)))
            .envs(
                prepared
                    .secret_env
                    .iter()
                    .map(|(k, v)| (k, v.expose_secret())),
            )
            .current_dir(&dir)
            .output()
            .expect("run the shell");
        let out = std::fs::read(dir.join("out")).unwrap_or_default();
        let pwned = dir.join("pwned").exists();
        let _ = std::fs::remove_dir_all(&dir);
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&ran.stdout),
            String::from_utf8_lossy(&ran.stderr)
        );
        (out, pwned, said)
    }

    fn check(shell: &str, context: &(&str, &str, &str, &str), value: &str) {
        let (name, command, before, after) = context;
        for reference in ["{{ params.v }}", "{{ secrets.s }}"] {
            let (out, pwned, said) = run(shell, &command.replace('@', reference), value);
            let expected = format!("{before}{value}{after}");
            assert!(
                out == expected.as_bytes() && !pwned,
                "{shell}, {name}, {reference} = {value:?}: wrote {:?}, expected {expected:?}{}; said {said}",
                String::from_utf8_lossy(&out),
                if pwned { ", and ran an injected command" } else { "" },
            );
        }
    }

    #[test]
    fn the_step_sees_exactly_the_value_in_every_quoting_context_and_runs_none_of_it() {
        for shell in shells() {
            for context in CONTEXTS {
                for value in HOSTILE {
                    check(shell, context, value);
                }
            }
        }
    }

    #[test]
    fn random_values_built_of_shell_syntax_reach_the_step_exactly() {
        // A small deterministic generator: the same values every run, so a failure reproduces.
        const PIECES: &[&str] = &[
            "'",
            "\"",
            "`",
            "$",
            "(",
            ")",
            "{",
            "}",
            "\\",
            "\n",
            " ",
            "\t",
            ";",
            "&",
            "|",
            "*",
            "?",
            "#",
            "~",
            "<",
            ">",
            "EOF",
            "$(",
            "${",
            "touch pwned",
            "a",
            "é",
            "=",
        ];
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let shell = "/bin/sh";
        for _ in 0..40 {
            let length = next() % 12;
            let value: String = (0..length)
                .map(|_| PIECES[(next() % PIECES.len() as u64) as usize])
                .collect();
            let context = &CONTEXTS[(next() % CONTEXTS.len() as u64) as usize];
            check(shell, context, &value);
        }
    }

    #[test]
    fn a_value_evaluated_as_arithmetic_must_be_a_whole_number() {
        let command = "echo $(( {{ params.v }} * 2 )) > out";
        for value in ["21", " 21 ", "-21"] {
            let expected = if value.contains('-') { "-42\n" } else { "42\n" };
            for shell in shells() {
                let (out, _, said) = run(shell, command, value);
                assert_eq!(String::from_utf8_lossy(&out), expected, "{shell}: {said}");
            }
        }
        for value in [
            "a[$(touch pwned)]",
            "1+1",
            "x",
            "",
            "1 2",
            "9999999999999999999999",
        ] {
            let blueprint = parse(&format!(
                "name: x\nparams: {{ v: {{}} }}\nsteps:\n  a: {{ run: script, with: {{ command: '{command}' }} }}\n"
            ))
            .expect("valid")
            .snapshot;
            let state = requested(&blueprint, &[("v", value)]);
            let problem = prepare(&input(&state, "a", &SecretValues::new()))
                .err()
                .unwrap_or_else(|| panic!("{value:?} accepted"));
            assert_eq!(
                problem,
                "`{{ params.v }}` is used inside `$(( ))`, so its value must be a whole number, and it is not"
            );
        }
    }

    #[test]
    fn outputs_are_key_value_lines() {
        assert_eq!(
            parse_outputs("a=1\n\nb=x=y\n"),
            Ok([
                ("a".to_owned(), "1".to_owned()),
                ("b".to_owned(), "x=y".to_owned())
            ]
            .into())
        );
        assert!(parse_outputs("no equals sign")
            .expect_err("refused")
            .contains("line 1"));
        assert!(parse_outputs("ok=1\n1bad=2")
            .expect_err("refused")
            .contains("line 2"));
        assert!(parse_outputs("ok=1\nnul=a\0b")
            .expect_err("refused")
            .contains("line 2 of $OVERTURE_OUTPUTS holds a NUL byte"));
    }

    #[test]
    fn an_outputs_file_too_large_to_read_fails_the_attempt_naming_its_size() {
        let mut result = crate::testing::sandbox_result(0, "", &[]);
        result.outputs_file = crate::OutputsFile::TooLarge {
            bytes: 2_000_000,
            limit: 1024 * 1024,
        };
        let Verdict::Failure { class, headline } = conclude(0, &result) else {
            panic!("fails");
        };
        assert_eq!(class, overture_events::ErrorClass::StepFailed);
        assert!(
            headline
                .starts_with("wrote 1.9 MiB (2000000 bytes) to $OVERTURE_OUTPUTS; at most 1 MiB"),
            "{headline}"
        );
    }
}
