//! Checks on a blueprint's YAML text before it is read: its size, how deep it nests, and keys
//! given twice.
//!
//! serde_yaml_ng reads a whole document into events before deserializing, and its parser slows
//! down with nesting (200 KB of `[` took 20 s to refuse), and it keeps the last of two equal
//! keys of a map without a word. So [`check`] walks the text first with yaml-rust2's event
//! parser, which hands out one event at a time with its line: it stops at the first mapping or
//! list deeper than [`MAX_DEPTH`], having read only what comes before it, and notes every key
//! given twice with both lines. A text this parser cannot read is left to serde_yaml_ng, which
//! reports its own error.

use std::collections::HashMap;

use yaml_rust2::parser::{Event, Parser};

use crate::blueprint::BlueprintProblem;
use crate::text::escaped;

/// The largest blueprint file: the text is recorded in the deployment's history.
pub const MAX_BLUEPRINT_BYTES: usize = 1024 * 1024;

/// The deepest nesting of mappings and lists a blueprint may have; a real one needs about 8.
pub const MAX_DEPTH: usize = 64;

/// One open mapping or list, while walking the events.
enum Open {
    /// A mapping: where it is, the keys seen with their lines, and the key whose value comes
    /// next (`None` while a key is awaited).
    Mapping {
        path: String,
        keys: HashMap<String, usize>,
        pending: Option<String>,
    },
    /// A list: where it is, and how many items it has had.
    List { path: String, items: usize },
}

/// The problem of a blueprint of `size` bytes, more than [`MAX_BLUEPRINT_BYTES`]: said with the
/// file's whole size, also where only the first bytes past the limit were read.
pub fn too_large(size: u64) -> BlueprintProblem {
    BlueprintProblem {
        field: "(top level)".into(),
        problem: format!(
            "the file is {size} bytes, more than the {MAX_BLUEPRINT_BYTES} (1 MiB) a blueprint may have; keep large data in the steps' folders"
        ),
    }
}

/// Every problem with the text's shape: too large, too deep, or a key given twice. Empty when
/// the text may be handed to the YAML deserializer.
pub fn check(text: &str) -> Vec<BlueprintProblem> {
    if text.len() > MAX_BLUEPRINT_BYTES {
        return vec![too_large(text.len() as u64)];
    }
    let mut problems = Vec::new();
    let mut open: Vec<Open> = Vec::new();
    let mut parser = Parser::new_from_str(text);
    loop {
        let (event, mark) = match parser.next_token() {
            Ok(next) => next,
            // The scanner reads ahead while a key may still be coming, and gives up past 255
            // open brackets: that is nesting too deep too, found a little further on.
            Err(error) if error.info() == "recursion limit exceeded" => {
                let path = open.last().map_or("", Open::path);
                problems.push(too_deep(path, error.marker().line()));
                return problems;
            }
            // A text yaml-rust2 cannot read goes on to serde_yaml_ng, whose message users know.
            Err(_) => break,
        };
        let line = mark.line();
        match event {
            Event::StreamEnd => break,
            Event::MappingStart(..) | Event::SequenceStart(..) => {
                let path = next_path(&mut open);
                if open.len() >= MAX_DEPTH {
                    problems.push(too_deep(&path, line));
                    // What follows cannot be read in bounded time, so nothing more is checked.
                    return problems;
                }
                open.push(match event {
                    Event::MappingStart(..) => Open::Mapping {
                        path,
                        keys: HashMap::new(),
                        pending: None,
                    },
                    _ => Open::List { path, items: 0 },
                });
            }
            Event::MappingEnd | Event::SequenceEnd => {
                open.pop();
            }
            Event::Scalar(value, ..) => {
                if let Some(Open::Mapping {
                    path,
                    keys,
                    pending: pending @ None,
                }) = open.last_mut()
                {
                    let field = join(path, &value);
                    if let Some(first) = keys.get(&value) {
                        problems.push(BlueprintProblem {
                            field: display_path(&field),
                            problem: format!(
                                "`{}` is given twice, on lines {first} and {line}; only one would count, so remove or rename one",
                                escaped(&value)
                            ),
                        });
                    } else {
                        keys.insert(value, line);
                    }
                    *pending = Some(field);
                } else {
                    next_path(&mut open);
                }
            }
            // An alias stands for a node: as a key it cannot be compared by its text.
            Event::Alias(_) => {
                if let Some(Open::Mapping {
                    path,
                    pending: pending @ None,
                    ..
                }) = open.last_mut()
                {
                    *pending = Some(join(path, "(alias)"));
                } else {
                    next_path(&mut open);
                }
            }
            Event::DocumentStart | Event::DocumentEnd | Event::StreamStart | Event::Nothing => {}
        }
    }
    problems
}

impl Open {
    fn path(&self) -> &str {
        match self {
            Open::Mapping { path, .. } | Open::List { path, .. } => path,
        }
    }
}

fn too_deep(path: &str, line: usize) -> BlueprintProblem {
    BlueprintProblem {
        field: display_path(path),
        problem: format!(
            "mappings and lists nest more than {MAX_DEPTH} deep here (line {line}); a blueprint may nest at most {MAX_DEPTH} deep, so flatten it"
        ),
    }
}

/// The path of the node that comes next in the innermost open mapping or list, moving that one
/// on past it (a mapping's value, a list's next item).
fn next_path(open: &mut [Open]) -> String {
    match open.last_mut() {
        None => String::new(),
        Some(Open::Mapping { path, pending, .. }) => match pending.take() {
            Some(field) => field,
            // A mapping or list used as a key: rare, and not compared.
            None => {
                *pending = Some(format!("{path}.(key)"));
                format!("{path}.(key)")
            }
        },
        Some(Open::List { path, items }) => {
            *items += 1;
            format!("{path}[{}]", *items - 1)
        }
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn display_path(path: &str) -> String {
    if path.is_empty() {
        "(top level)".to_owned()
    } else {
        path.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(text: &str) -> Vec<(String, String)> {
        check(text)
            .into_iter()
            .map(|p| (p.field, p.problem))
            .collect()
    }

    #[test]
    fn a_key_given_twice_is_named_with_both_lines() {
        let text =
            "name: x\nsteps:\n  a: { run: noop }\n  b: { run: noop }\n  a: { run: script }\n";
        let found = fields(text);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0, "steps.a");
        assert!(
            found[0].1.contains("`a` is given twice, on lines 3 and 5")
                && found[0].1.contains("remove or rename one"),
            "{}",
            found[0].1
        );
    }

    #[test]
    fn duplicates_are_found_at_every_level_and_in_lists() {
        let text = "name: x\nname: y\nsteps:\n  a:\n    run: noop\n    with: { k: 1, \"k\": 2 }\n    run: noop\nlist:\n  - { p: 1, p: 2 }\n";
        let found: Vec<String> = fields(text).into_iter().map(|(f, _)| f).collect();
        assert_eq!(
            found,
            ["name", "steps.a.with.k", "steps.a.run", "list[0].p"]
        );
    }

    #[test]
    fn equal_keys_in_different_mappings_are_fine() {
        let text = "steps:\n  a: { run: noop, needs: [b] }\n  b: { run: noop }\nx: [{ run: 1 }, { run: 2 }]\n";
        assert_eq!(fields(text), vec![]);
    }

    #[test]
    fn deep_nesting_is_refused_at_the_limit() {
        for text in ["[".repeat(200_000), "{".repeat(200_000), "- ".repeat(1_000)] {
            let found = fields(&text);
            assert_eq!(found.len(), 1, "{found:?}");
            assert!(found[0].1.contains("more than 64 deep"), "{}", found[0].1);
        }
        let indented: String = (0..100)
            .map(|i| format!("{}k{i}:\n", " ".repeat(i)))
            .collect();
        let found = fields(&indented);
        assert!(found[0].0.starts_with("k0.k1.k2."), "{found:?}");
        assert!(found[0].1.contains("(line 65)"), "{found:?}");
        let fine = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert_eq!(fields(&fine), vec![]);
    }

    #[test]
    fn a_text_over_a_mebibyte_is_refused_unread() {
        let text = format!(
            "name: x\ndescription: \"{}\"\n",
            "y".repeat(MAX_BLUEPRINT_BYTES)
        );
        let found = fields(&text);
        assert!(found[0].1.contains("1 MiB"), "{found:?}");
    }
}
