//! The workflow DAG of a blueprint: cycles, ancestry, and drawings of it.

use std::collections::{BTreeSet, HashMap};

use overture_events::StepSpec;

/// Finds a dependency cycle, as the names of the steps on it with the first repeated at the end.
pub fn find_cycle(steps: &[StepSpec]) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Unseen,
        OnPath,
        Done,
    }
    let index: HashMap<&str, usize> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.as_str(), i))
        .collect();
    let mut marks = vec![Mark::Unseen; steps.len()];
    let mut path: Vec<usize> = Vec::new();

    fn visit(
        node: usize,
        steps: &[StepSpec],
        index: &HashMap<&str, usize>,
        marks: &mut [Mark],
        path: &mut Vec<usize>,
    ) -> Option<Vec<String>> {
        marks[node] = Mark::OnPath;
        path.push(node);
        for need in &steps[node].needs {
            let Some(&next) = index.get(need.as_str()) else {
                continue;
            };
            match marks[next] {
                Mark::OnPath => {
                    let start = path.iter().position(|&n| n == next).unwrap_or(0);
                    let mut cycle: Vec<String> = path[start..]
                        .iter()
                        .map(|&n| steps[n].name.clone())
                        .collect();
                    cycle.push(steps[next].name.clone());
                    return Some(cycle);
                }
                Mark::Unseen => {
                    if let Some(cycle) = visit(next, steps, index, marks, path) {
                        return Some(cycle);
                    }
                }
                Mark::Done => {}
            }
        }
        path.pop();
        marks[node] = Mark::Done;
        None
    }

    (0..steps.len()).find_map(|start| {
        if marks[start] == Mark::Unseen {
            visit(start, steps, &index, &mut marks, &mut path)
        } else {
            None
        }
    })
}

/// Every step `step` needs, directly or through other steps.
pub fn ancestors(steps: &[StepSpec], step: &str) -> BTreeSet<String> {
    let by_name: HashMap<&str, &StepSpec> = steps.iter().map(|s| (s.name.as_str(), s)).collect();
    let mut found = BTreeSet::new();
    let mut stack: Vec<&str> = by_name
        .get(step)
        .map(|s| s.needs.iter().map(String::as_str).collect())
        .unwrap_or_default();
    while let Some(name) = stack.pop() {
        if found.insert(name.to_owned()) {
            if let Some(spec) = by_name.get(name) {
                stack.extend(spec.needs.iter().map(String::as_str));
            }
        }
    }
    found
}

/// The steps in an order where every step comes after the steps it needs; among steps free to
/// go next, blueprint order decides. Steps on a cycle (which validation refuses) are left out.
pub fn topological_order(steps: &[StepSpec]) -> Vec<String> {
    let mut placed: BTreeSet<&str> = BTreeSet::new();
    let mut order = Vec::with_capacity(steps.len());
    loop {
        let next = steps.iter().find(|s| {
            !placed.contains(s.name.as_str())
                && s.needs.iter().all(|need| placed.contains(need.as_str()))
        });
        match next {
            Some(step) => {
                placed.insert(&step.name);
                order.push(step.name.clone());
            }
            None => return order,
        }
    }
}

/// A drawing format for `overture graph`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GraphFormat {
    /// Mermaid flowchart text.
    Mermaid,
    /// Graphviz dot.
    Dot,
}

/// Draws the DAG; `label` may add a state to each step's box (for a running deployment).
pub fn render(
    steps: &[StepSpec],
    format: GraphFormat,
    label: impl Fn(&str) -> Option<String>,
) -> String {
    let text = |name: &str| match label(name) {
        Some(state) => format!("{name} ({state})"),
        None => name.to_owned(),
    };
    let mut out = String::new();
    match format {
        GraphFormat::Mermaid => {
            out.push_str("flowchart LR\n");
            for step in steps {
                out.push_str(&format!(
                    "    {}[\"{}\"]\n",
                    node_id(&step.name),
                    text(&step.name)
                ));
            }
            for step in steps {
                for need in &step.needs {
                    out.push_str(&format!(
                        "    {} --> {}\n",
                        node_id(need),
                        node_id(&step.name)
                    ));
                }
            }
        }
        GraphFormat::Dot => {
            out.push_str("digraph deployment {\n    rankdir=LR;\n");
            for step in steps {
                out.push_str(&format!(
                    "    \"{}\" [label=\"{}\"];\n",
                    step.name,
                    text(&step.name)
                ));
            }
            for step in steps {
                for need in &step.needs {
                    out.push_str(&format!("    \"{}\" -> \"{}\";\n", need, step.name));
                }
            }
            out.push_str("}\n");
        }
    }
    out
}

/// Mermaid ids may not contain `-`.
fn node_id(step: &str) -> String {
    step.replace('-', "_")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(name: &str, needs: &[&str]) -> StepSpec {
        StepSpec {
            name: name.into(),
            kind: "noop".into(),
            with: Default::default(),
            needs: needs.iter().map(|n| (*n).to_owned()).collect(),
            timeout_ms: 1,
            retry: Default::default(),
        }
    }

    #[test]
    fn names_the_steps_on_a_cycle() {
        let steps = vec![
            step("a", &["c"]),
            step("b", &["a"]),
            step("c", &["b"]),
            step("d", &[]),
        ];
        assert_eq!(
            find_cycle(&steps),
            Some(vec!["a".into(), "c".into(), "b".into(), "a".into()])
        );
        assert_eq!(
            find_cycle(&[step("x", &["x"])]),
            Some(vec!["x".into(), "x".into()])
        );
    }

    #[test]
    fn a_diamond_has_no_cycle_and_known_ancestors() {
        let steps = vec![
            step("a", &[]),
            step("b", &["a"]),
            step("c", &["a"]),
            step("d", &["b", "c"]),
        ];
        assert_eq!(find_cycle(&steps), None);
        assert_eq!(
            ancestors(&steps, "d"),
            ["a", "b", "c"].into_iter().map(String::from).collect()
        );
        assert!(ancestors(&steps, "a").is_empty());
    }

    #[test]
    fn draws_edges_from_needs() {
        let steps = vec![step("fetch-code", &[]), step("build", &["fetch-code"])];
        let mermaid = render(&steps, GraphFormat::Mermaid, |_| None);
        assert!(mermaid.contains("fetch_code --> build"), "{mermaid}");
        let dot = render(&steps, GraphFormat::Dot, |name| {
            (name == "build").then(|| "running".into())
        });
        assert!(dot.contains("\"fetch-code\" -> \"build\""), "{dot}");
        assert!(dot.contains("label=\"build (running)\""), "{dot}");
    }
}
