//! What a drive runs (one deployment, every one, or those that join) and who watches it.

use std::sync::Arc;

use overture_domain::DeploymentState;
use overture_events::{DeploymentId, LogEntry};

use crate::Engine;

/// Sees a driven deployment's progress.
pub trait Watch {
    /// A new log entry of the driven deployments, in log order.
    fn entry(&mut self, entry: &LogEntry);
    /// Called at least every half second with the target deployment's state.
    fn tick(&mut self, state: &DeploymentState);
    /// A deployment the drive woke (a watching step of it runs again) that this process holds
    /// no token to run: its attempt is queued, in `state`, for `overture resume --token-file`.
    /// Said in a warning unless the watcher tells the user itself.
    fn waits_for_a_token(&mut self, deployment: DeploymentId, _state: &DeploymentState) {
        tracing::warn!(%deployment, "a watching step of this deployment runs again, but this process holds no token of its user that opens its seal; its attempt is queued for `overture resume --token-file`");
    }
}

/// Watches nothing.
pub struct Unwatched;

impl Watch for Unwatched {
    fn entry(&mut self, _: &LogEntry) {}
    fn tick(&mut self, _: &DeploymentState) {}
}

/// The deployments a drive runs until they have ended.
#[derive(Clone, Copy)]
pub enum Scope<'a> {
    /// One deployment.
    One(DeploymentId),
    /// Every deployment unfinished when the drive starts.
    Every,
    /// The deployments that join while it runs, until no more can.
    Joined(&'a Joining),
}

/// Deployments joining a running drive ([`Scope::Joined`]): each is driven from when it joins
/// until it ends, and is then handed back through the channel [`Joining::new`] returns.
pub struct Joining {
    joined: std::sync::Mutex<(Vec<DeploymentId>, bool)>,
    /// Whether the drive is to stop before its deployments end ([`Joining::stop`]).
    stopping: std::sync::atomic::AtomicBool,
    ended: tokio::sync::mpsc::UnboundedSender<DeploymentId>,
    appended: Arc<tokio::sync::Notify>,
}

impl Joining {
    /// A set for a drive on `engine`, open to new deployments, and where its ended ones come out.
    pub fn new(engine: &Engine) -> (Self, tokio::sync::mpsc::UnboundedReceiver<DeploymentId>) {
        let (ended, receiver) = tokio::sync::mpsc::unbounded_channel();
        let joining = Self {
            joined: std::sync::Mutex::new((Vec::new(), true)),
            stopping: std::sync::atomic::AtomicBool::new(false),
            ended,
            appended: engine.log.appended(),
        };
        (joining, receiver)
    }

    /// Adds a recorded deployment to the drive.
    pub fn join(&self, id: DeploymentId) {
        self.lock().0.push(id);
        // The drive may be waiting for news: this is some.
        self.appended.notify_waiters();
    }

    /// No deployment will join any more: the drive ends once those it has end.
    pub fn close(&self) {
        self.lock().1 = false;
        self.appended.notify_waiters();
    }

    /// The drive stops without waiting for its deployments to end: the attempts it runs finish
    /// and are recorded, it starts no other, and its deployments are left unfinished, as a
    /// stopped engine leaves them, for `overture resume` (or the next server) to carry on.
    pub fn stop(&self) {
        self.close();
        self.stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.appended.notify_waiters();
    }

    /// Whether the drive is to stop ([`Joining::stop`]).
    pub(crate) fn stopping(&self) -> bool {
        self.stopping.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The deployments that joined since the last call, and whether more may.
    pub(crate) fn take(&self) -> (Vec<DeploymentId>, bool) {
        let mut joined = self.lock();
        (std::mem::take(&mut joined.0), joined.1)
    }

    pub(crate) fn ended(&self, id: DeploymentId) {
        // The receiver may have stopped listening; the deployment has ended all the same.
        let _ = self.ended.send(id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (Vec<DeploymentId>, bool)> {
        self.joined
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
