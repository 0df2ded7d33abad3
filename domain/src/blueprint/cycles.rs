//! The steps as a graph: a cycle of needs, or of needs and service waits, is a blueprint that
//! could never finish.

use overture_events::StepSpec;

use super::services::with_providers;
use crate::graph::{self, Cycle};

/// Records every cycle: those of the needs alone, and, when there are none, those a step's wait
/// for a service its providers could only give after it makes.
pub(super) fn check(steps: &[StepSpec], problem: &mut impl FnMut(String, String)) {
    let needs_cycles = graph::find_cycles(steps);
    if needs_cycles.is_empty() {
        for cycle in graph::find_cycles(&with_providers(steps)) {
            let path = match cycle {
                Cycle::SelfNeed(step) => vec![step.clone(), step],
                Cycle::Round { path, .. } => path,
            };
            problem(
                "steps".into(),
                format!(
                    "the needs and the services required form a cycle: {}; a step cannot wait for a service that only a step after it provides",
                    path.join(" → ")
                ),
            );
        }
    }
    for cycle in needs_cycles {
        match cycle {
            Cycle::SelfNeed(step) => problem(
                format!("steps.{step}.needs"),
                format!("step `{step}` needs itself; remove `{step}` from its needs"),
            ),
            Cycle::Round { path, others } => problem(
                "steps".into(),
                format!(
                    "the needs form a cycle: {}; remove one of these needs{}",
                    path.join(" → "),
                    if others.is_empty() {
                        String::new()
                    } else {
                        format!(
                            " (steps {} are on other cycles with them)",
                            others.join(", ")
                        )
                    }
                ),
            ),
        }
    }
}
