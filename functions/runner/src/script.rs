//! How a `script` step's command and environment are built, and its outputs read.
//!
//! Every `{{ ... }}` reference in the command becomes a shell variable (`${OVERTURE_REF_1}`) whose
//! value travels in the environment. The shell splits it into words as it would split the same
//! text written in place, but never runs it: a parameter or an output holding `; rm -rf /` or
//! `$(...)` cannot change what the command does. A secret reaches the step only as an environment
//! variable: never in the command text, never in an event. Quote a reference (`"{{ ... }}"`) to
//! keep a value with spaces as one word.

use std::collections::BTreeMap;

use overture_domain::template::Template;

use crate::step::{Prepared, Resolved, StepInput, Verdict};
use crate::SandboxResult;

/// The kind's name in blueprints.
pub const KIND: &str = "script";

/// Builds the command and environment of a script step from the deployment's state.
pub fn prepare(input: &StepInput) -> Result<Prepared, String> {
    let text = input
        .text_setting("command")
        .ok_or("the step has no `with.command` text")?;
    let template = Template::parse(text).map_err(|e| e.to_string())?;
    let mut env = Vec::new();
    let mut secret_env = Vec::new();
    let mut count = 0;
    let command = template.render(|reference| {
        count += 1;
        let name = format!("OVERTURE_REF_{count}");
        match input.lookup(reference)? {
            Resolved::Plain(value) => env.push((name.clone(), value.to_owned())),
            Resolved::Secret(value) => secret_env.push((name.clone(), value.clone())),
        }
        Ok::<_, String>(format!("${{{name}}}"))
    })?;
    Ok(Prepared {
        command,
        env,
        secret_env,
        ..Prepared::default()
    })
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
    use crate::testing::{input, requested, succeeded};
    use overture_domain::blueprint::parse;
    use overture_domain::secret::{SecretString, SecretValues};
    use overture_domain::Deployment;
    use secrecy::ExposeSecret;

    #[test]
    fn references_become_quoted_variables_and_secrets_stay_out_of_the_command() {
        let blueprint = parse(
            "name: x\nparams: { who: {} }\nsecrets: [key]\nsteps:\n  a: { run: noop }\n  b: { run: script, needs: [a], with: { command: 'echo {{ params.who }} {{ steps.a.outputs.url }} {{ secrets.key }}' } }\n",
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
            "echo ${OVERTURE_REF_1} ${OVERTURE_REF_2} ${OVERTURE_REF_3}"
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
