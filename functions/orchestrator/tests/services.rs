//! The orchestrator and the tenant's registry of services, on in-memory fakes of its ports: a
//! waiting step starts once other deployments' instances meet its count, a wait is a durable
//! timer, and a deployment's registrations wake the deployments that need the service.

mod support;

use std::sync::Mutex;

use async_trait::async_trait;
use overture_domain::deployment::DeploymentState;
use overture_domain::services::{RegisteredInstance, ServiceInstance};
use overture_domain::testing::events::{blueprint, instance, registered, requested};
use overture_events::{DeploymentEvent, DeploymentId, Envelope, Metadata};
use overture_kit::memory::MemoryLog;
use overture_orchestrator::{orchestrate, OrchestratorPorts, ServiceDirectory, Since, WorkError};
use support::{at, record, FixedClock, Queued};

const BALANCER: &str = "name: balancer
steps:
  lb:
    run: script
    requires: [{ service: app, count: 2, timeout: 5m }]
    with: { command: 'echo {{ services.app.addresses }}' }
";

fn ours() -> DeploymentId {
    "01a20800-0000-7000-8000-000000000001"
        .parse()
        .expect("an id")
}

fn theirs() -> DeploymentId {
    "01a20800-0000-7000-8000-000000000002"
        .parse()
        .expect("an id")
}

/// A registry holding these instances, and these deployments waiting for any service.
#[derive(Default)]
struct Registry {
    instances: Mutex<Vec<RegisteredInstance>>,
    interested: Vec<DeploymentId>,
}

impl Registry {
    fn register(&self, deployment: DeploymentId, address: &str) {
        self.instances
            .lock()
            .expect("registry")
            .push(RegisteredInstance {
                deployment,
                instance: instance("app", "app", address, 8000),
                registered_at: at("10:00"),
            });
    }
}

#[async_trait]
impl ServiceDirectory for Registry {
    async fn instances(&self, tenant: &str) -> Result<Vec<RegisteredInstance>, WorkError> {
        assert_eq!(tenant, "acme", "only the deployment's own tenant is asked");
        Ok(self.instances.lock().expect("registry").clone())
    }

    async fn interested(&self, tenant: &str, _: &str) -> Result<Vec<DeploymentId>, WorkError> {
        assert_eq!(tenant, "acme");
        Ok(self.interested.clone())
    }
}

/// The deployment of the blueprint is requested, as the test kit requests one (its source
/// `b.yaml`).
async fn request(log: &MemoryLog, id: DeploymentId, yaml: &str) {
    record(log, id, "test", vec![requested("b.yaml", blueprint(yaml))]).await;
}

/// Moves our deployment on at `time` of the fixtures' day, the registry holding what it holds.
async fn move_ours_on(
    log: &MemoryLog,
    queued: &Queued,
    registry: &Registry,
    time: &str,
    since: Since<'_>,
) -> DeploymentState {
    let clock = FixedClock(at(time));
    let ports = OrchestratorPorts {
        services: registry,
        ..support::ports(log, queued, &clock)
    };
    orchestrate(ours(), uuid::Uuid::now_v7(), since, &ports)
        .await
        .expect("moved on")
}

fn types(log: &MemoryLog, id: DeploymentId) -> Vec<&'static str> {
    log.events(id)
        .iter()
        .map(DeploymentEvent::event_type)
        .collect()
}

#[tokio::test]
async fn a_step_waits_on_a_timer_until_other_deployments_register_enough_instances() {
    let log = MemoryLog::new(at("10:00"));
    request(&log, ours(), BALANCER).await;
    let registry = Registry::default();
    registry.register(theirs(), "10.0.0.7");
    let queued = Queued::default();

    move_ours_on(&log, &queued, &registry, "10:01", Since::Unknown).await;
    assert_eq!(
        types(&log, ours()),
        ["DeploymentRequested", "StepAwaitingServices"]
    );
    assert!(queued.attempts().is_empty(), "one of two is not enough");
    assert_eq!(
        queued.wakes(),
        [(ours(), at("10:06"))],
        "the wait's deadline is a durable timer"
    );

    registry.register(theirs(), "10.0.0.8");
    move_ours_on(&log, &queued, &registry, "10:02", Since::Records(&[])).await;
    let events = log.events(ours());
    let resolved = events.iter().find_map(|event| match event {
        DeploymentEvent::ServicesResolved { step, services } => Some((step, services)),
        _ => None,
    });
    let (step, services) = resolved.expect("the members the step sees are recorded");
    assert_eq!(step, "lb");
    assert_eq!(services["app"], ["10.0.0.7:8000", "10.0.0.8:8000"]);
    assert_eq!(types(&log, ours()).last(), Some(&"StepScheduled"));
    let attempts = queued.attempts();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].step, "lb");
}

#[tokio::test]
async fn a_wait_past_its_deadline_fails_the_deployment_as_service_timeout() {
    let log = MemoryLog::new(at("10:00"));
    request(&log, ours(), BALANCER).await;
    let registry = Registry::default();
    let queued = Queued::default();
    move_ours_on(&log, &queued, &registry, "10:01", Since::Unknown).await;
    // The timer, at the deadline.
    let state = move_ours_on(&log, &queued, &registry, "10:06", Since::Records(&[])).await;

    assert!(state.is_finished());
    let events = log.events(ours());
    assert!(events.iter().any(|event| matches!(
        event,
        DeploymentEvent::StepFailed { step, error_class: overture_events::ErrorClass::ServiceTimeout, .. } if step == "lb"
    )), "{events:?}");
    let reason = events.iter().find_map(|event| match event {
        DeploymentEvent::DeploymentFailed { reason } => Some(reason.clone()),
        _ => None,
    });
    assert_eq!(
        reason.as_deref(),
        Some("step `lb` timed out waiting for service `app` (0 of 2 registered) (service-timeout)")
    );
    assert!(queued.attempts().is_empty(), "the step never ran");
}

#[tokio::test]
async fn a_registration_wakes_the_tenants_other_deployments_that_need_the_service() {
    let log = MemoryLog::new(at("10:00"));
    request(&log, theirs(), "name: apps\nsteps:\n  app: { run: noop }\n").await;
    let registry = Registry {
        interested: vec![ours(), theirs()],
        ..Registry::default()
    };
    let queued = Queued::default();
    let clock = FixedClock(at("10:03"));
    let ports = OrchestratorPorts {
        services: &registry,
        ..support::ports(&log, &queued, &clock)
    };
    let registered = registered(&ServiceInstance {
        host: "app-1".into(),
        ..instance("app", "app", "10.0.0.7", 8000)
    });
    let record = Envelope {
        stream: theirs().stream(),
        revision: 1,
        id: uuid::Uuid::now_v7(),
        event_type: registered.event_type().into(),
        data: registered.data(),
        metadata: Metadata {
            tenant: "acme".into(),
            actor: "runner".into(),
            correlation_id: uuid::Uuid::now_v7(),
            causation_id: uuid::Uuid::now_v7(),
            recorded_at: at("10:03"),
            previous: None,
            hash: None,
        },
    };

    orchestrate(theirs(), record.id, Since::Records(&[record]), &ports)
        .await
        .expect("moved on");

    assert_eq!(
        queued.wakes(),
        [(ours(), at("10:03"))],
        "the other deployment is woken now; the registering one is not woken by its own news"
    );
}
