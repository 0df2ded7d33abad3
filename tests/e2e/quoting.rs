//! The quoting table, end to end: hostile parameter and output values put into a script step in
//! every quoting context a shell teaches, run by the real binary in real sandboxes. The step
//! must see exactly each value, and nothing in a value may run.

use crate::support::{text, Overture};

/// Values that would run a command, end a quote or change a word if they were pasted into the
/// command.
const VALUES: &[&str] = &[
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
    "*",
    "EOF",
    "EOF\ntouch pwned\ncat <<EOF",
    "trailing\\",
    "  spaced  ",
    ")\ntouch pwned\n(",
    "# not a comment",
    "-n",
];

/// (name, command, before, after): the command, `@` standing for the reference, writes to `out`
/// the value between `before` and `after`.
const CONTEXTS: &[(&str, &str, &str, &str)] = &[
    ("unquoted", "printf %s @ > out", "", ""),
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
        "single quotes in $( ) in double quotes",
        "printf %s \"$(printf %s '<@>')\" > out",
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
        "a case pattern",
        "v=@; case \"$v\" in @) printf %s \"$v\" > out;; *) echo no > out;; esac",
        "",
        "",
    ),
];

/// Writes every `o*` file of the workspace as an output of its bytes in hex (outputs are
/// `key=value` lines, and values hold newlines), and `pwned` if any value ran.
const REPORT: &str = r#"for f in o*; do printf '%s=%s\n' "$f" "$(od -An -tx1 -v "$f" | tr -d ' \n')" >> "$OVERTURE_OUTPUTS"; done
if [ -e pwned ] || [ -e /tmp/pwned ]; then echo pwned=yes >> "$OVERTURE_OUTPUTS"; fi"#;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn a_script_step_sees_exactly_each_value_in_every_quoting_context_and_runs_none() {
    let overture = Overture::new();
    let params: String = (0..VALUES.len())
        .map(|i| format!("  v{i}: {{}}\n"))
        .collect();
    // A step output is a value too: `source` passes one on, a hostile one.
    let output_value = r#"it's "q" $(touch pwned) `touch pwned` \ ${HOME}"#;
    let mut steps = format!(
        "  source:\n    run: script\n    with: {{ command: {} }}\n",
        serde_json::to_string(&format!(
            "printf 'o=%s\\n' '{{{{ params.v{} }}}}' >> \"$OVERTURE_OUTPUTS\"",
            VALUES.len()
        ))
        .expect("JSON")
    );
    for (k, (_, command, _, _)) in CONTEXTS.iter().enumerate() {
        let mut script = String::new();
        for i in 0..VALUES.len() {
            let one = command
                .replace('@', &format!("{{{{ params.v{i} }}}}"))
                .replace("> out", &format!("> o{i}"));
            script.push_str(&one);
            script.push('\n');
        }
        let from_output = command
            .replace('@', "{{ steps.source.outputs.o }}")
            .replace("> out", "> output");
        script.push_str(&from_output);
        script.push_str("\nmv output o_from_source\n");
        script.push_str(REPORT);
        steps.push_str(&format!(
            "  c{k}:\n    run: script\n    needs: [source]\n    with: {{ command: {} }}\n",
            serde_json::to_string(&script).expect("JSON")
        ));
    }
    let file = overture.blueprint(
        "quoting.yaml",
        &format!(
            "name: quoting\nparams:\n{params}  v{}: {{}}\nsteps:\n{steps}",
            VALUES.len()
        ),
    );
    let mut args: Vec<String> = VALUES
        .iter()
        .enumerate()
        .flat_map(|(i, value)| ["--param".to_owned(), format!("v{i}={value}")])
        .collect();
    args.extend([
        "--param".to_owned(),
        format!("v{}={output_value}", VALUES.len()),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, status, output) = overture.deploy(&file, &args);
    assert_eq!(code, 0, "{status}\n{}", text(&output.stderr));

    for (k, (name, _, before, after)) in CONTEXTS.iter().enumerate() {
        let outputs = &status["steps"][format!("c{k}")]["outputs"];
        assert!(outputs.get("pwned").is_none(), "{name}: a value ran");
        for (i, value) in VALUES.iter().enumerate() {
            assert_eq!(
                outputs[format!("o{i}")],
                hex(format!("{before}{value}{after}").as_bytes()),
                "{name}: {value:?}"
            );
        }
        assert_eq!(
            outputs["o_from_source"],
            hex(format!("{before}{output_value}{after}").as_bytes()),
            "{name}: the output of `source`"
        );
    }
}

#[test]
fn a_reference_whose_quoting_cannot_hold_a_value_is_refused_before_anything_runs() {
    let (overture, file) = Overture::with_blueprint(
        "unsafe.yaml",
        "name: unsafe\nparams: { v: {} }\nsteps:\n  a: { run: script, with: { command: 'echo ${X:-{{ params.v }}}' } }\n",
    );
    let output = overture.run(&["deploy", file.to_str().expect("path"), "--param", "v=x"]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
    let message = text(&output.stderr);
    assert!(
        message.contains("unsafe.yaml")
            && message
                .contains("steps.a.with.command: `{{ params.v }}` is inside a `${...}` expansion")
            && message.contains("assign it to a variable first"),
        "{message}"
    );
    assert_eq!(overture.json(&["list", "--json"]), serde_json::json!([]));
}
