//! A deployment's steps as its aggregate keeps them: in blueprint order, looked up by name,
//! cheap to clone, and indexed so that no command has to look at every step.
//!
//! A handler clones the state on every load and folds a few events into it, so neither may cost
//! in proportion to the deployment's size. The step states live in a persistent B-tree keyed by
//! their place in the blueprint: a clone shares it, a change copies one path of small nodes
//! (measured about twice as fast as `imbl::Vector`, whose nodes are wider). The graph of needs
//! is built once per deployment and shared. Every change of a step's status goes through
//! [`Steps::update`], which keeps the indices that the aggregate reads instead of scanning: the
//! steps ready to be scheduled (pending, every need succeeded), the waiting and the running
//! ones, and how many succeeded. Each step counts its needs that have not succeeded, so a step's
//! success touches only the steps that need it.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::ops::Index;
use std::sync::Arc;

use imbl::{OrdMap, OrdSet, Vector};
use overture_events::BlueprintSnapshot;

use crate::deployment::{StepState, StepStatus};

/// The blueprint's steps and their needs, by position: fixed for the deployment's life.
#[derive(Debug, Default)]
struct Graph {
    /// The steps' names, in blueprint order.
    names: Vec<String>,
    /// Each name's position.
    positions: HashMap<String, usize>,
    /// How many needs each step names; a name that is no step is a need never met.
    needs: Vec<u32>,
    /// The steps that need each step, once for each time they name it.
    dependents: Vec<Vec<usize>>,
    /// Whether each step sees services (requires, watches, or names them in templates): such a
    /// step is scheduled only with the registry in view.
    sees_services: Vec<bool>,
    /// Whether any step sees services, and whether any watches one: asked on every pass.
    any_sees_services: bool,
    any_watches: bool,
}

impl Graph {
    fn of(blueprint: &BlueprintSnapshot) -> Self {
        let mut graph = Graph::default();
        for spec in &blueprint.steps {
            if !graph.positions.contains_key(&spec.name) {
                graph.positions.insert(spec.name.clone(), graph.names.len());
                graph.names.push(spec.name.clone());
            }
        }
        graph.needs = vec![0; graph.names.len()];
        graph.dependents = vec![Vec::new(); graph.names.len()];
        graph.sees_services = vec![false; graph.names.len()];
        // Validation refuses a name given twice; were one, its first spec would count.
        let mut counted = vec![false; graph.names.len()];
        for spec in &blueprint.steps {
            let Some(&at) = graph.positions.get(&spec.name) else {
                continue;
            };
            if std::mem::replace(&mut counted[at], true) {
                continue;
            }
            graph.needs[at] = u32::try_from(spec.needs.len()).unwrap_or(u32::MAX);
            graph.sees_services[at] = !crate::services::seen_services(spec).is_empty();
            graph.any_sees_services |= graph.sees_services[at];
            graph.any_watches |= !spec.watch.is_empty();
            for need in &spec.needs {
                if let Some(&of) = graph.positions.get(need) {
                    graph.dependents[of].push(at);
                }
            }
        }
        graph
    }
}

/// A deployment's steps, in blueprint order. Cloning shares them; looking one up by name costs
/// a hash and a path of the persistent tree, changing one a copy of that path.
#[derive(Clone, Default)]
pub struct Steps {
    graph: Arc<Graph>,
    states: OrdMap<usize, StepState>,
    /// Per step, how many of its needs have not succeeded.
    unmet: Vector<u32>,
    /// Pending steps whose needs have all succeeded.
    ready: OrdSet<usize>,
    /// Steps whose needs succeeded, waiting for the services they require.
    awaiting: OrdSet<usize>,
    /// Steps whose attempt waits to start (scheduled or retrying).
    waiting: OrdSet<usize>,
    /// Steps whose attempt runs.
    running: OrdSet<usize>,
    succeeded: usize,
}

impl Steps {
    /// Every step of the blueprint in the state `fresh` gives, each counting its needs.
    pub(crate) fn new(blueprint: &BlueprintSnapshot, fresh: &StepState) -> Self {
        let graph = Graph::of(blueprint);
        let states: OrdMap<usize, StepState> = (0..graph.names.len())
            .map(|at| (at, fresh.clone()))
            .collect();
        let mut steps = Steps {
            unmet: graph.needs.iter().copied().collect(),
            graph: Arc::new(graph),
            states,
            ready: OrdSet::new(),
            awaiting: OrdSet::new(),
            waiting: OrdSet::new(),
            running: OrdSet::new(),
            succeeded: 0,
        };
        for at in 0..steps.states.len() {
            steps.entered(at, fresh.status);
        }
        steps
    }

    /// The step with this name.
    pub fn get(&self, name: &str) -> Option<&StepState> {
        self.position(name).and_then(|at| self.states.get(&at))
    }

    /// Whether the blueprint has a step with this name.
    pub fn contains_key(&self, name: &str) -> bool {
        self.graph.positions.contains_key(name)
    }

    /// How many steps there are.
    pub fn len(&self) -> usize {
        self.states.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }

    /// The step with this name, and the name as kept.
    pub(crate) fn entry_named(&self, name: &str) -> Option<(&String, &StepState)> {
        self.position(name).and_then(|at| self.entry(at))
    }

    /// Every step with its name, in blueprint order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &StepState)> {
        self.graph.names.iter().zip(self.states.values())
    }

    /// Every step's name, in blueprint order.
    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.graph.names.iter()
    }

    /// Every step, in blueprint order.
    pub fn values(&self) -> impl Iterator<Item = &StepState> {
        self.states.values()
    }

    /// The step's place in the blueprint.
    pub(crate) fn position(&self, name: &str) -> Option<usize> {
        self.graph.positions.get(name).copied()
    }

    /// Pending steps whose needs have all succeeded, in blueprint order: those that see no
    /// services when `services` is false, those that do when it is true.
    pub(crate) fn ready(&self, services: bool) -> impl Iterator<Item = (&String, &StepState)> {
        let sees = &self.graph.sees_services;
        self.ready
            .iter()
            .filter(move |&&at| sees.get(at).copied().unwrap_or(false) == services)
            .filter_map(|&at| self.entry(at))
    }

    /// Steps waiting for the services they require, in blueprint order.
    pub(crate) fn awaiting(&self) -> impl Iterator<Item = (&String, &StepState)> {
        self.at(&self.awaiting)
    }

    /// Whether a step watches a service.
    pub fn watch_services(&self) -> bool {
        self.graph.any_watches
    }

    /// Whether any step sees services: the deployment then looks at the tenant's registry.
    pub fn see_services(&self) -> bool {
        self.graph.any_sees_services
    }

    /// Steps whose attempt waits to start, in blueprint order.
    pub(crate) fn waiting(&self) -> impl Iterator<Item = (&String, &StepState)> {
        self.at(&self.waiting)
    }

    /// Steps whose attempt runs, in blueprint order.
    pub(crate) fn running(&self) -> impl Iterator<Item = (&String, &StepState)> {
        self.at(&self.running)
    }

    /// Steps that wait (to start, or for services) or run, in blueprint order.
    pub(crate) fn waiting_or_running(&self) -> Vec<(&String, &StepState)> {
        let mut positions: Vec<usize> = self
            .waiting
            .iter()
            .chain(&self.awaiting)
            .chain(&self.running)
            .copied()
            .collect();
        positions.sort_unstable();
        positions
            .into_iter()
            .filter_map(|at| self.entry(at))
            .collect()
    }

    /// Whether every step succeeded.
    pub(crate) fn all_succeeded(&self) -> bool {
        self.succeeded == self.states.len()
    }

    /// Changes the named step (if there is one) and the indices its new status moves it in.
    pub(crate) fn update(&mut self, name: &str, change: impl FnOnce(&mut StepState)) {
        let Some(at) = self.position(name) else {
            return;
        };
        let Some(state) = self.states.get_mut(&at) else {
            return;
        };
        let before = state.status;
        change(state);
        let after = state.status;
        if before != after {
            self.left(at, before);
            self.entered(at, after);
        }
    }

    fn at<'a>(
        &'a self,
        positions: &'a OrdSet<usize>,
    ) -> impl Iterator<Item = (&'a String, &'a StepState)> {
        positions.iter().filter_map(|&at| self.entry(at))
    }

    fn entry(&self, at: usize) -> Option<(&String, &StepState)> {
        Some((self.graph.names.get(at)?, self.states.get(&at)?))
    }

    fn left(&mut self, at: usize, status: StepStatus) {
        match status {
            StepStatus::Pending => {
                self.ready.remove(&at);
            }
            StepStatus::Scheduled | StepStatus::Retrying => {
                self.waiting.remove(&at);
            }
            StepStatus::Awaiting => {
                self.awaiting.remove(&at);
            }
            StepStatus::Running => {
                self.running.remove(&at);
            }
            StepStatus::Succeeded => {
                self.succeeded = self.succeeded.saturating_sub(1);
                let graph = Arc::clone(&self.graph);
                for &dependent in graph.dependents.get(at).into_iter().flatten() {
                    if let Some(unmet) = self.unmet.get_mut(dependent) {
                        *unmet = unmet.saturating_add(1);
                    }
                    self.ready.remove(&dependent);
                }
            }
            StepStatus::Failed | StepStatus::Abandoned => {}
        }
    }

    fn entered(&mut self, at: usize, status: StepStatus) {
        match status {
            StepStatus::Pending => {
                if self.unmet.get(at) == Some(&0) {
                    self.ready.insert(at);
                }
            }
            StepStatus::Scheduled | StepStatus::Retrying => {
                self.waiting.insert(at);
            }
            StepStatus::Awaiting => {
                self.awaiting.insert(at);
            }
            StepStatus::Running => {
                self.running.insert(at);
            }
            StepStatus::Succeeded => {
                self.succeeded += 1;
                let graph = Arc::clone(&self.graph);
                for &dependent in graph.dependents.get(at).into_iter().flatten() {
                    let Some(unmet) = self.unmet.get_mut(dependent) else {
                        continue;
                    };
                    *unmet = unmet.saturating_sub(1);
                    let pending = self
                        .states
                        .get(&dependent)
                        .is_some_and(|s| s.status == StepStatus::Pending);
                    if *unmet == 0 && pending {
                        self.ready.insert(dependent);
                    }
                }
            }
            StepStatus::Failed | StepStatus::Abandoned => {}
        }
    }
}

/// Equal when the same steps stand the same: the indices follow from that.
impl PartialEq for Steps {
    fn eq(&self, other: &Self) -> bool {
        (Arc::ptr_eq(&self.graph, &other.graph) || self.graph.names == other.graph.names)
            && self.states == other.states
    }
}

impl fmt::Debug for Steps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<Q> Index<&Q> for Steps
where
    Q: ?Sized + Hash + Eq,
    String: Borrow<Q>,
{
    type Output = StepState;

    /// The step with this name; panics when there is none, as a map's index does.
    fn index(&self, name: &Q) -> &StepState {
        match self
            .graph
            .positions
            .get(name)
            .and_then(|&at| self.states.get(&at))
        {
            Some(state) => state,
            None => panic!("no such step"),
        }
    }
}
