//! A `script` command's `{{ ... }}` references, placed according to the shell quoting around
//! each.
//!
//! A value never enters the command text: each reference becomes a shell variable whose value
//! travels in the environment, and the shell never runs or re-reads what a variable expands to.
//! What this module decides is the text that names the variable, so the step sees exactly the
//! value whatever the user's quoting around the reference:
//!
//! | where the reference is                      | what it becomes                  |
//! |---------------------------------------------|----------------------------------|
//! | unquoted, in a command, `$( )` or backticks | `"${V}"`: one word, no globbing  |
//! | inside `"..."` or a here-document           | `${V}`                           |
//! | inside `'...'`                              | `'"${V}"'`: close, value, reopen |
//! | in a here-document with a quoted delimiter  | `${V}`, the here-document made unquoted with its `\`, `$` and `` ` `` escaped |
//! | in a `#` comment                            | `${V}`, which the shell ignores  |
//! | inside `$(( ))`                             | `${V}`, whose value the caller must check is a whole number |
//!
//! The contexts are found by a small lexer of POSIX `sh` over the template's text (quotes,
//! backslashes, `$( )`, backticks with their own backslash rules, `${ }`, `$(( ))`, here-documents,
//! comments, `case` patterns). Where a value cannot be given exactly or safely (inside `${ }` or
//! `$'...'`, after a `\` or a bare `$`, in a here-document's delimiter, or in a command whose
//! quoting does not close) the reference is refused with a [`QuotingError`] that says what to
//! write instead, so a blueprint is refused before anything runs.
//!
//! Inside `$(( ))` the shell evaluates what a variable holds as arithmetic, and bash runs the
//! commands of an array index in it (`a[$(...)]`). Values are only known when the step runs, so
//! [`ShellCommand::numbers`] names the references there, and the runner refuses to run the step
//! unless each of their values is a whole number.
//!
//! The lexer is [`lexer`]; this file decides what each reference becomes.

mod lexer;

use crate::template::{Reference, Segment, Template};
use lexer::{Findings, Frame, Item, Lexer, Place};

/// Why a reference cannot be placed where it stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unsafe {
    /// Inside `${ ... }`.
    #[error("is inside a `${{...}}` expansion, whose quoting sh and bash read differently; assign it to a variable first (`v={{{{ ... }}}}`) and use `$v` there")]
    ParameterExpansion,
    /// Inside `$'...'`.
    #[error("is inside `$'...'` quotes, which sh (dash) does not have; write '...' or \"...\" around it instead")]
    AnsiC,
    /// Right after a `\` that escapes it.
    #[error("follows a `\\`, which would escape the quoting that keeps the value whole; remove the backslash")]
    Backslash,
    /// Right after a bare `$`.
    #[error("follows a bare `$`, which the shell would read as the start of a variable; write `\\$` or '$' for a literal dollar")]
    Dollar,
    /// In a here-document's delimiter word.
    #[error(
        "is in a here-document's delimiter, which must be fixed text; write the delimiter out"
    )]
    Delimiter,
    /// In a quoted here-document inside backticks.
    #[error("is in a here-document with a quoted delimiter inside backticks; write `$( )` instead of the backticks")]
    HereDocInBackticks,
    /// In a quoted here-document whose delimiter cannot be written unquoted.
    #[error("is in a here-document whose quoted delimiter is not plain letters, digits and '_'; use a delimiter like 'EOF'")]
    OddDelimiter,
    /// The command's quoting could not be followed.
    #[error("cannot be placed: the command's quoting could not be followed ({0}); fix the command so it is valid sh")]
    Unfollowable(Unfollowable),
}

/// What made a command's quoting impossible to follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unfollowable {
    /// A quote or a substitution that does not close.
    #[error("a `{0}` is never closed")]
    Unclosed(&'static str),
    /// A `)` that closes nothing.
    #[error("a `)` closes nothing")]
    UnmatchedParen,
    /// A place the lexer did not reach (a bug of this module, refused to be safe).
    #[error("the quoting at this place was not followed")]
    Lost,
    /// A `$'...'` holding `\'`: sh and bash end it in different places.
    #[error("a `$'...'` holds `\\'`, and sh and bash end it in different places")]
    AnsiCQuote,
}

/// A reference of a `script` command that cannot be given to the step safely.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{reference}` {why}")]
pub struct QuotingError {
    /// The reference.
    pub reference: Reference,
    /// Why, and what to write instead.
    pub why: Unsafe,
}

/// A `script` command ready for `/bin/sh -c`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShellCommand {
    /// The command text, naming the variables instead of holding the values.
    pub text: String,
    /// The references (1-based, in order of appearance) inside `$(( ))`, whose values must be
    /// whole numbers.
    pub numbers: Vec<usize>,
}

/// The command of `template` for `/bin/sh -c`, with the `n`th reference (1-based, in order of
/// appearance) replaced by an expansion of the variable `variable(n)` quoted for where it
/// stands; the caller puts each value in that variable. Every reference that cannot be placed
/// safely is an error.
pub fn script_command(
    template: &Template,
    variable: impl Fn(usize) -> String,
) -> Result<ShellCommand, Vec<QuotingError>> {
    let mut references = Vec::new();
    let mut items = Vec::new();
    for segment in template.segments() {
        match segment {
            Segment::Text(text) => items.extend(text.chars().map(Item::Char)),
            Segment::Reference(reference) => {
                items.push(Item::Ref(references.len()));
                references.push(reference.clone());
            }
        }
    }
    let mut found = Findings {
        places: vec![None; references.len()],
        numbers: Vec::new(),
        heredocs: Vec::new(),
        unfollowable: None,
    };
    Lexer::new(
        items.iter().copied().enumerate().collect(),
        &mut found,
        false,
    )
    .code(Frame::Top);

    let mut errors = Vec::new();
    let refuse = |index: usize, why: Unsafe, errors: &mut Vec<QuotingError>| {
        errors.push(QuotingError {
            reference: references[index].clone(),
            why,
        })
    };
    if let Some(why) = found.unfollowable {
        if !references.is_empty() {
            refuse(0, Unsafe::Unfollowable(why), &mut errors);
            return Err(errors);
        }
    }
    // Quoted here-documents that hold references are made unquoted, their text escaped (below).
    let mut converted = Vec::new();
    for heredoc in &found.heredocs {
        if !heredoc.quoted || heredoc.references.is_empty() {
            continue;
        }
        let why = if heredoc.in_backticks {
            Some(Unsafe::HereDocInBackticks)
        } else if !heredoc
            .delimiter
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            Some(Unsafe::OddDelimiter)
        } else {
            None
        };
        match why {
            Some(why) => {
                for &index in &heredoc.references {
                    found.places[index] = Some(Place::Refused(why));
                }
            }
            None => converted.push(heredoc),
        }
    }

    let mut out = String::new();
    let mut at = 0;
    while at < items.len() {
        if let Some(heredoc) = converted.iter().find(|h| h.word.start == at) {
            out.push_str(&heredoc.delimiter);
            at = heredoc.word.end.max(at + 1);
            continue;
        }
        match items[at] {
            Item::Char(c) => {
                let escaped =
                    matches!(c, '\\' | '$' | '`') && converted.iter().any(|h| h.body.contains(&at));
                if escaped {
                    out.push('\\');
                }
                out.push(c);
            }
            Item::Ref(index) => {
                let name = variable(index + 1);
                match found.places[index] {
                    Some(Place::Word) => out.push_str(&format!("\"${{{name}}}\"")),
                    Some(Place::SingleQuoted) => out.push_str(&format!("'\"${{{name}}}\"'")),
                    Some(
                        Place::DoubleQuoted | Place::HereDoc | Place::Comment | Place::Arithmetic,
                    ) => out.push_str(&format!("${{{name}}}")),
                    Some(Place::Refused(why)) => refuse(index, why, &mut errors),
                    // The lexer visits every item; an unvisited one is a bug, refused to be safe.
                    None => refuse(index, Unsafe::Unfollowable(Unfollowable::Lost), &mut errors),
                }
            }
        }
        at += 1;
    }
    if errors.is_empty() {
        let mut numbers: Vec<usize> = found.numbers.iter().map(|index| index + 1).collect();
        numbers.sort_unstable();
        numbers.dedup();
        Ok(ShellCommand { text: out, numbers })
    } else {
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(text: &str) -> Result<String, Vec<Unsafe>> {
        let template = Template::parse(text).expect("a template");
        script_command(&template, |n| format!("V{n}"))
            .map(|command| command.text)
            .map_err(|errors| errors.into_iter().map(|e| e.why).collect())
    }

    #[test]
    fn each_quoting_context_gets_its_own_form() {
        let cases = [
            ("echo {{ params.a }}", r#"echo "${V1}""#),
            (r#"echo "x {{ params.a }} y""#, r#"echo "x ${V1} y""#),
            ("echo 'x {{ params.a }} y'", r#"echo 'x '"${V1}"' y'"#),
            ("echo '{{ params.a }}'", r#"echo ''"${V1}"''"#),
            ("a={{ params.a }}b", r#"a="${V1}"b"#),
            (
                "cat <<EOF\n{{ params.a }} \"{{ params.b }}\" '{{ params.c }}'\nEOF\necho {{ params.d }}",
                "cat <<EOF\n${V1} \"${V2}\" '${V3}'\nEOF\necho \"${V4}\"",
            ),
            (
                "cat <<'EOF'\n$HOME \\ `x` {{ params.a }}\nEOF\necho '{{ params.b }}'",
                "cat <<EOF\n\\$HOME \\\\ \\`x\\` ${V1}\nEOF\necho ''\"${V2}\"''",
            ),
            (
                "cat <<-\"END\" | tr a b\n\t{{ params.a }}\n\tEND\n",
                "cat <<-END | tr a b\n\t${V1}\n\tEND\n",
            ),
            (
                "cat <<\\EOF\n{{ params.a }}\nEOF",
                "cat <<EOF\n${V1}\nEOF",
            ),
            // A quoted here-document without references is left as written.
            ("cat <<'EOF'\n$HOME\nEOF", "cat <<'EOF'\n$HOME\nEOF"),
            (
                r#"echo "$(echo '{{ params.a }}' "{{ params.b }}")""#,
                r#"echo "$(echo ''"${V1}"'' "${V2}")""#,
            ),
            (
                "echo `echo '{{ params.a }}' {{ params.b }}`",
                "echo `echo ''\"${V1}\"'' \"${V2}\"`",
            ),
            (
                r#"echo "`echo {{ params.a }} \"{{ params.b }}\"`""#,
                r#"echo "`echo "${V1}" \"${V2}\"`""#,
            ),
            ("echo hi # {{ params.a }}\necho {{ params.b }}", "echo hi # ${V1}\necho \"${V2}\""),
            ("echo a#{{ params.a }}", r#"echo a#"${V1}""#),
            (
                "x=$(case y in y) echo '{{ params.a }}';; esac)\necho \"{{ params.b }}\"",
                "x=$(case y in y) echo ''\"${V1}\"'';; esac)\necho \"${V2}\"",
            ),
            (
                "case $1 in\n  a) echo {{ params.a }};;\nesac",
                "case $1 in\n  a) echo \"${V1}\";;\nesac",
            ),
            ("echo \\$'{{ params.a }}'", r#"echo \$''"${V1}"''"#),
            ("echo \\\\{{ params.a }}", r#"echo \\"${V1}""#),
            ("echo \"\\\\{{ params.a }}\"", r#"echo "\\${V1}""#),
        ];
        for (text, expected) in cases {
            assert_eq!(command(text), Ok(expected.to_owned()), "{text}");
        }
    }

    #[test]
    fn places_where_a_value_cannot_be_exact_are_refused() {
        let cases = [
            ("echo ${X:-{{ params.a }}}", Unsafe::ParameterExpansion),
            ("echo \"${X:-{{ params.a }}}\"", Unsafe::ParameterExpansion),
            ("echo $'a{{ params.a }}'", Unsafe::AnsiC),
            ("echo \\{{ params.a }}", Unsafe::Backslash),
            ("echo \"\\{{ params.a }}\"", Unsafe::Backslash),
            ("cat <<EOF\n\\{{ params.a }}\nEOF", Unsafe::Backslash),
            ("echo `echo \\{{ params.a }}`", Unsafe::Backslash),
            ("echo ${{ params.a }}", Unsafe::Dollar),
            ("echo \"${{ params.a }}\"", Unsafe::Dollar),
            ("cat <<{{ params.a }}\nx\n", Unsafe::Delimiter),
            (
                "echo `cat <<'EOF'\n{{ params.a }}\nEOF\n`",
                Unsafe::HereDocInBackticks,
            ),
            ("cat <<'E-F'\n{{ params.a }}\nE-F", Unsafe::OddDelimiter),
            (
                "echo '{{ params.a }}",
                Unsafe::Unfollowable(Unfollowable::Unclosed("'")),
            ),
            (
                "echo \"{{ params.a }}",
                Unsafe::Unfollowable(Unfollowable::Unclosed("\"")),
            ),
            (
                "echo $(echo {{ params.a }}",
                Unsafe::Unfollowable(Unfollowable::Unclosed("$(")),
            ),
            (
                "echo {{ params.a }})",
                Unsafe::Unfollowable(Unfollowable::UnmatchedParen),
            ),
            (
                "echo $'it\\'s' '{{ params.a }}'",
                Unsafe::Unfollowable(Unfollowable::AnsiCQuote),
            ),
        ];
        for (text, why) in cases {
            assert_eq!(command(text), Err(vec![why]), "{text}");
        }
    }

    #[test]
    fn references_evaluated_as_arithmetic_are_named_to_be_checked() {
        let template = Template::parse(
            "echo {{ params.a }} $(( {{ params.b }} * $(echo '{{ params.c }}') )) \"$(( 1 + {{ params.d }} ))\"",
        )
        .expect("a template");
        assert_eq!(
            script_command(&template, |n| format!("V{n}")),
            Ok(ShellCommand {
                text: r#"echo "${V1}" $(( ${V2} * $(echo ''"${V3}"'') )) "$(( 1 + ${V4} ))""#
                    .into(),
                numbers: vec![2, 3, 4],
            })
        );
    }

    #[test]
    fn a_command_without_references_is_kept_whatever_it_holds() {
        for text in ["echo 'unclosed", "echo $'it\\'s'", "echo )", "true"] {
            assert_eq!(command(text), Ok(text.to_owned()));
        }
    }

    #[test]
    fn every_refused_reference_is_named_with_the_fix() {
        let template = Template::parse("echo ${A:-{{ params.a }}} \\{{ params.b }} {{ params.c }}")
            .expect("a template");
        let errors = script_command(&template, |n| format!("V{n}")).expect_err("refused");
        let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(messages.len(), 2, "{messages:?}");
        assert!(messages[0].starts_with("`{{ params.a }}` is inside a `${...}` expansion"));
        assert!(messages[1].starts_with("`{{ params.b }}` follows a `\\`"));
        assert!(messages[1].ends_with("remove the backslash"));
    }
}
