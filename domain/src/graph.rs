//! The workflow DAG of a blueprint: cycles, ancestry, and drawings of it.

use std::collections::{BTreeSet, HashMap};

use overture_events::StepSpec;

/// A knot of needs that can never all be met.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cycle {
    /// A step that needs itself.
    SelfNeed(String),
    /// Steps that need each other, round: `path` is a shortest way round from its first step
    /// (which is repeated at the end), `others` the other steps caught in the same knot (on
    /// other cycles through these), in blueprint order.
    Round {
        /// The steps on the cycle, the first repeated at the end.
        path: Vec<String>,
        /// Steps of the same knot not on `path`.
        others: Vec<String>,
    },
}

/// Every cycle of needs, in blueprint order: each step that needs itself, and one cycle for each
/// knot of steps that need each other round (a strongly connected component of the DAG). A knot
/// can hold many cycles; naming one and the knot's other steps says what to untie without
/// listing every combination, which can be exponentially many.
pub fn find_cycles(steps: &[StepSpec]) -> Vec<Cycle> {
    let index: HashMap<&str, usize> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.as_str(), i))
        .collect();
    // Needs as indices, unknown steps left out (validation names those on their own).
    let edges: Vec<Vec<usize>> = steps
        .iter()
        .map(|s| {
            s.needs
                .iter()
                .filter_map(|need| index.get(need.as_str()).copied())
                .collect()
        })
        .collect();
    let mut found = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        if edges[i].contains(&i) {
            found.push(Cycle::SelfNeed(step.name.clone()));
        }
    }
    for component in strongly_connected(&edges) {
        if component.len() < 2 {
            continue;
        }
        let Some(&first) = component.iter().min() else {
            continue;
        };
        let members: BTreeSet<usize> = component.iter().copied().collect();
        let path = shortest_round(first, &edges, &members);
        let on_path: BTreeSet<usize> = path.iter().copied().collect();
        found.push(Cycle::Round {
            path: path.iter().map(|&n| steps[n].name.clone()).collect(),
            others: members
                .iter()
                .filter(|n| !on_path.contains(n))
                .map(|&n| steps[n].name.clone())
                .collect(),
        });
    }
    found
}

/// The strongly connected components of a graph (Tarjan's algorithm), each as its nodes. Kept
/// iterative: a blueprint of a long chain of steps would overflow the stack of a recursive one.
fn strongly_connected(edges: &[Vec<usize>]) -> Vec<Vec<usize>> {
    const UNSEEN: usize = usize::MAX;
    let n = edges.len();
    let mut order = vec![UNSEEN; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut components = Vec::new();
    let mut next = 0;
    for root in 0..n {
        if order[root] != UNSEEN {
            continue;
        }
        // Each frame: a node and how many of its edges have been followed.
        let mut frames = vec![(root, 0)];
        order[root] = next;
        low[root] = next;
        next += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(frame) = frames.last_mut() {
            let (node, followed) = *frame;
            if let Some(&to) = edges[node].get(followed) {
                frame.1 += 1;
                if order[to] == UNSEEN {
                    order[to] = next;
                    low[to] = next;
                    next += 1;
                    stack.push(to);
                    on_stack[to] = true;
                    frames.push((to, 0));
                } else if on_stack[to] {
                    low[node] = low[node].min(order[to]);
                }
                continue;
            }
            frames.pop();
            if let Some(&(parent, _)) = frames.last() {
                low[parent] = low[parent].min(low[node]);
            }
            if low[node] == order[node] {
                let mut component = Vec::new();
                while let Some(member) = stack.pop() {
                    on_stack[member] = false;
                    component.push(member);
                    if member == node {
                        break;
                    }
                }
                components.push(component);
            }
        }
    }
    components.sort_by_key(|component| component.iter().min().copied());
    components
}

/// A shortest way from `start` back to itself through `members` (breadth first), as the nodes
/// on it with `start` at both ends.
fn shortest_round(start: usize, edges: &[Vec<usize>], members: &BTreeSet<usize>) -> Vec<usize> {
    let mut came_from: HashMap<usize, usize> = HashMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        for &to in &edges[node] {
            if !members.contains(&to) || to == node {
                continue;
            }
            if to == start {
                let mut path = vec![start];
                let mut at = node;
                while at != start {
                    path.push(at);
                    at = came_from.get(&at).copied().unwrap_or(start);
                }
                path[1..].reverse();
                path.push(start);
                return path;
            }
            if let std::collections::hash_map::Entry::Vacant(entry) = came_from.entry(to) {
                entry.insert(node);
                queue.push_back(to);
            }
        }
    }
    // Members of one component always reach each other; this is never reached.
    vec![start, start]
}

/// Answers "does this step need that one, directly or through others?" for many pairs: for each
/// step asked about as the one needed, every step that needs it is worked out once (a walk
/// along the needs backwards), and kept as a bit set. Validation asks this for every output a
/// template uses, and most outputs come from a few steps, so a blueprint of thousands of steps
/// is checked in linear time where working out every step's ancestors took quadratic time.
pub struct Dependents<'a> {
    index: HashMap<&'a str, usize>,
    needed_by: Vec<Vec<usize>>,
    known: HashMap<usize, Vec<u64>>,
}

impl<'a> Dependents<'a> {
    /// Ready to answer for `steps`.
    pub fn new(steps: &'a [StepSpec]) -> Self {
        let index: HashMap<&str, usize> = steps
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.as_str(), i))
            .collect();
        let mut needed_by = vec![Vec::new(); steps.len()];
        for (i, step) in steps.iter().enumerate() {
            for need in &step.needs {
                if let Some(&n) = index.get(need.as_str()) {
                    needed_by[n].push(i);
                }
            }
        }
        Self {
            index,
            needed_by,
            known: HashMap::new(),
        }
    }

    /// Whether `step` needs `source`, directly or not (false when either is unknown).
    pub fn needs(&mut self, step: &str, source: &str) -> bool {
        let (Some(&step), Some(&source)) = (self.index.get(step), self.index.get(source)) else {
            return false;
        };
        let needed_by = &self.needed_by;
        let bits = self.known.entry(source).or_insert_with(|| {
            let mut bits = vec![0u64; needed_by.len().div_ceil(64)];
            let mut stack = needed_by[source].clone();
            while let Some(node) = stack.pop() {
                let (word, bit) = (node / 64, 1u64 << (node % 64));
                if bits[word] & bit == 0 {
                    bits[word] |= bit;
                    stack.extend(&needed_by[node]);
                }
            }
            bits
        });
        bits[step / 64] & (1u64 << (step % 64)) != 0
    }
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
            limits: Default::default(),
            provides: None,
            requires: vec![],
            watch: vec![],
        }
    }

    fn round(path: &[&str], others: &[&str]) -> Cycle {
        Cycle::Round {
            path: path.iter().map(|n| (*n).to_owned()).collect(),
            others: others.iter().map(|n| (*n).to_owned()).collect(),
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
        assert_eq!(find_cycles(&steps), vec![round(&["a", "c", "b", "a"], &[])]);
        assert_eq!(
            find_cycles(&[step("x", &["x"])]),
            vec![Cycle::SelfNeed("x".into())]
        );
    }

    #[test]
    fn a_step_needing_itself_is_found_beside_another_cycle() {
        let steps = vec![
            step("a", &["a"]),
            step("b", &["c"]),
            step("c", &["b"]),
            step("d", &["d", "b"]),
        ];
        assert_eq!(
            find_cycles(&steps),
            vec![
                Cycle::SelfNeed("a".into()),
                Cycle::SelfNeed("d".into()),
                round(&["b", "c", "b"], &[]),
            ]
        );
    }

    #[test]
    fn every_knot_is_reported_once_with_its_other_steps() {
        // One knot {a, b, c} holding two cycles, and a separate one {e, f}.
        let steps = vec![
            step("a", &["b"]),
            step("b", &["a", "c"]),
            step("c", &["b"]),
            step("d", &["a"]),
            step("e", &["f"]),
            step("f", &["e"]),
        ];
        assert_eq!(
            find_cycles(&steps),
            vec![
                round(&["a", "b", "a"], &["c"]),
                round(&["e", "f", "e"], &[])
            ]
        );
    }

    #[test]
    fn a_long_chain_has_no_cycle_and_does_not_overflow_the_stack() {
        let names: Vec<String> = (0..50_000).map(|i| format!("s{i}")).collect();
        let steps: Vec<StepSpec> = names
            .iter()
            .enumerate()
            .map(|(i, name)| match i {
                0 => step(name, &[]),
                _ => step(name, &[names[i - 1].as_str()]),
            })
            .collect();
        assert_eq!(find_cycles(&steps), vec![]);
    }

    #[test]
    fn a_diamond_has_no_cycle_and_known_ancestors() {
        let steps = vec![
            step("a", &[]),
            step("b", &["a"]),
            step("c", &["a"]),
            step("d", &["b", "c"]),
        ];
        assert_eq!(find_cycles(&steps), vec![]);
        assert_eq!(
            ancestors(&steps, "d"),
            ["a", "b", "c"].into_iter().map(String::from).collect()
        );
        assert!(ancestors(&steps, "a").is_empty());
    }

    #[test]
    fn dependents_answer_as_ancestors_do() {
        let steps = vec![
            step("a", &[]),
            step("b", &["a"]),
            step("c", &["a"]),
            step("d", &["b", "c"]),
            step("e", &[]),
            step("f", &["f", "g"]),
        ];
        let mut dependents = Dependents::new(&steps);
        for step in &steps {
            let upstream = ancestors(&steps, &step.name);
            for source in ["a", "b", "c", "d", "e", "f", "nope"] {
                assert_eq!(
                    dependents.needs(&step.name, source),
                    upstream.contains(source),
                    "{} needs {source}",
                    step.name
                );
            }
        }
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
