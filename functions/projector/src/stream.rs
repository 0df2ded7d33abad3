//! The projector's trigger on AWS: a batch of the event table's stream records.
//!
//! Records are read into events as the orchestrator's trigger reads them
//! (`overture_kit::stream_record`) and grouped by deployment, each group in the batch's order
//! (a stream delivers one item's changes in order, and one deployment is one partition).
//! [`project_stream`] folds each group, once: idempotent on (stream, revision), so records
//! delivered again change nothing. A deployment whose records could not be folded is reported
//! as a batch item failure at its first record (`ReportBatchItemFailures`), so the stream
//! delivers it again from there, and the other deployments of the batch are not held up.
//! A record of a deployment that cannot be read here is read from the log instead, from the
//! group's first revision on: the view must not skip it, and the log reads it its own way.
//! Items that are not events of a deployment stream are left alone.
//!
//! Once a deployment's records that register or deregister a service instance are folded, the
//! tenant's deployments that require or watch the service are woken ([`Wakes`]): the registry's
//! writer tells its readers, so a deployment woken this way reads a registry that holds the
//! change. (The orchestrator also wakes them when it sees the records, but on AWS it may run
//! before this function has folded them.)

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use overture_events::{DeploymentId, Envelope};
use overture_kit::batch::{BatchFailed, BatchTally};
use overture_kit::queue::{Job, SendJobs};
use overture_kit::registry::ReadServiceRegistry;
use overture_kit::stream_record::{envelope_of, event_of, revision_of};
use overture_kit::ReadStream;

use crate::{project_stream, DeploymentViews, StreamProjectionError};

/// One deployment's records in a batch.
struct Group<'a> {
    deployment: DeploymentId,
    /// Its first record in the batch, where the stream resumes if it fails.
    first: &'a EventRecord,
    /// Its lowest revision in the batch, as far as the records say.
    from: Option<u64>,
    /// Its events in the batch, while every one of them could be read.
    records: Option<Vec<Envelope>>,
}

/// Where the tenant's deployments that need a service are woken when its members change.
pub struct Wakes<'a> {
    /// The registry, for who requires or watches a service.
    pub registry: &'a dyn ReadServiceRegistry,
    /// The orchestrator's timers queue.
    pub timers: &'a dyn SendJobs,
}

/// Why the deployments that need a changed service could not be woken.
#[derive(Debug, thiserror::Error)]
pub enum WakeError {
    /// The registry could not be read.
    #[error(transparent)]
    Registry(#[from] overture_kit::registry::RegistryError),
    /// The timers queue refused or could not be reached.
    #[error(transparent)]
    Queue(#[from] overture_kit::queue::QueueError),
}

impl WakeError {
    /// Whether trying again later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            WakeError::Registry(error) => error.is_retryable(),
            WakeError::Queue(error) => error.is_retryable(),
        }
    }
}

/// Folds every deployment of the batch into the read models and wakes the deployments that
/// need a service its records changed; returns the records to deliver again, or fails the
/// invocation when no deployment of the batch could be folded.
pub async fn on_stream_records(
    batch: &Event,
    log: &dyn ReadStream,
    views: &dyn DeploymentViews,
    wakes: &Wakes<'_>,
) -> Result<DynamoDbEventResponse, BatchFailed> {
    let mut groups: Vec<Group<'_>> = Vec::new();
    for record in &batch.records {
        let Some((deployment, _)) = event_of(record) else {
            tracing::warn!(
                event_id = record.event_id,
                "a stream record that is not a deployment's event; left alone"
            );
            continue;
        };
        let envelope = envelope_of(record);
        let revision = revision_of(record);
        match groups.iter_mut().find(|g| g.deployment == deployment) {
            Some(group) => {
                group.from = match (group.from, revision) {
                    (Some(seen), Some(this)) => Some(seen.min(this)),
                    (seen, this) => seen.or(this),
                };
                group.records = group.records.take().zip(envelope).map(|(mut all, one)| {
                    all.push(one);
                    all
                });
            }
            None => groups.push(Group {
                deployment,
                first: record,
                from: revision,
                records: envelope.map(|one| vec![one]),
            }),
        }
    }
    let mut response = DynamoDbEventResponse::default();
    let mut tally = BatchTally::new(groups.len());
    for group in groups {
        if let Err(error) = project_group(&group, log, views, wakes).await {
            tracing::warn!(
                deployment = %group.deployment,
                error_type = error.error_type(),
                %error,
                "could not fold the deployment's records; the stream delivers them again"
            );
            tally.failed(error.is_retryable(), &error);
            let mut failure = DynamoDbBatchItemFailure::default();
            failure.item_identifier = group.first.change.sequence_number.clone();
            response.batch_item_failures.push(failure);
        }
    }
    tally.answer(response)
}

/// Folds one group, its unreadable records read from the log instead, then wakes the
/// deployments that need a service it changed.
async fn project_group(
    group: &Group<'_>,
    log: &dyn ReadStream,
    views: &dyn DeploymentViews,
    wakes: &Wakes<'_>,
) -> Result<usize, StreamProjectionError> {
    let read;
    let records = match &group.records {
        Some(records) => records,
        None => {
            read = log
                .read_stream(group.deployment, group.from.unwrap_or(0))
                .await?;
            &read
        }
    };
    let applied = project_stream(group.deployment, records, log, views).await?;
    wake_the_interested(group.deployment, records, wakes)
        .await
        .map_err(StreamProjectionError::Wake)?;
    Ok(applied)
}

/// Wakes, with a timer due now, each other deployment of the tenant that requires or watches a
/// service whose instances these records registered or deregistered. Delivered again, the
/// records wake them again, which is harmless: a woken deployment only looks.
async fn wake_the_interested(
    deployment: DeploymentId,
    records: &[Envelope],
    wakes: &Wakes<'_>,
) -> Result<(), WakeError> {
    let mut jobs = Vec::new();
    let changes = records.iter().filter(|record| {
        matches!(
            record.event_type.as_str(),
            "ServiceRegistered" | "ServiceDeregistered"
        )
    });
    let mut asked = std::collections::BTreeSet::new();
    for record in changes {
        let Some(service) = record.data.get("service").and_then(|s| s.as_str()) else {
            continue;
        };
        let tenant = record.metadata.tenant.as_str();
        if !asked.insert((tenant, service)) {
            continue;
        }
        for other in wakes
            .registry
            .interested_deployments(tenant, service)
            .await?
        {
            if other == deployment || jobs.iter().any(|job: &Job| job.deployment == other) {
                continue;
            }
            let wake = overture_events::job::Job::Wake {
                deployment: other,
                cause: Some(record.id),
            };
            jobs.push(Job {
                key: format!("wake/{other}/services/{}", record.id),
                deployment: other,
                body: serde_json::to_value(&wake).unwrap_or_default(),
                due_at: record.metadata.recorded_at,
            });
        }
    }
    if !jobs.is_empty() {
        wakes.timers.send(jobs).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use async_trait::async_trait;
    use overture_domain::services::RegisteredInstance;
    use overture_events::{DeploymentEvent, Metadata};
    use overture_kit::queue::QueueError;
    use overture_kit::registry::RegistryError;

    use super::*;

    fn id(n: u8) -> DeploymentId {
        format!("01a20800-0000-7000-8000-00000000000{n}")
            .parse()
            .expect("an id")
    }

    /// Deployments 1 and 2 of acme need `app`; the queue keeps what it is sent.
    #[derive(Default)]
    struct Fakes(Mutex<Vec<Job>>);

    #[async_trait]
    impl ReadServiceRegistry for Fakes {
        async fn service_instances(
            &self,
            _: &str,
        ) -> Result<Vec<RegisteredInstance>, RegistryError> {
            Ok(vec![])
        }

        async fn interested_deployments(
            &self,
            tenant: &str,
            service: &str,
        ) -> Result<Vec<DeploymentId>, RegistryError> {
            Ok(match (tenant, service) {
                ("acme", "app") => vec![id(1), id(2)],
                _ => vec![],
            })
        }
    }

    #[async_trait]
    impl SendJobs for Fakes {
        fn max_delay(&self) -> Option<std::time::Duration> {
            None
        }

        async fn send(&self, jobs: Vec<Job>) -> Result<(), QueueError> {
            self.0.lock().expect("queue").extend(jobs);
            Ok(())
        }
    }

    fn record(deployment: DeploymentId, event: DeploymentEvent) -> Envelope {
        Envelope {
            stream: deployment.stream(),
            revision: 7,
            id: uuid::Uuid::now_v7(),
            event_type: event.event_type().into(),
            data: event.data(),
            metadata: Metadata {
                tenant: "acme".into(),
                actor: "runner".into(),
                correlation_id: uuid::Uuid::now_v7(),
                causation_id: uuid::Uuid::now_v7(),
                recorded_at: chrono::Utc::now(),
                previous: None,
                hash: None,
            },
        }
    }

    #[tokio::test]
    async fn a_registration_wakes_the_tenants_other_deployments_that_need_the_service_once() {
        let fakes = Fakes::default();
        let registered = |address: &str| DeploymentEvent::ServiceRegistered {
            service: "app".into(),
            step: "app".into(),
            host: address.into(),
            address: address.into(),
            port: 8000,
        };
        let records = [
            record(id(2), registered("10.0.0.7")),
            record(id(2), registered("10.0.0.8")),
            record(id(2), DeploymentEvent::DeploymentSucceeded {}),
        ];
        let wakes = Wakes {
            registry: &fakes,
            timers: &fakes,
        };
        wake_the_interested(id(2), &records, &wakes)
            .await
            .expect("woken");

        let jobs = fakes.0.lock().expect("queue");
        assert_eq!(jobs.len(), 1, "once, and not the registering one: {jobs:?}");
        assert_eq!(jobs[0].deployment, id(1));
        let wake: overture_events::job::Job =
            serde_json::from_value(jobs[0].body.clone()).expect("a job the timer reads");
        assert_eq!(
            wake,
            overture_events::job::Job::Wake {
                deployment: id(1),
                cause: Some(records[0].id)
            }
        );
        assert!(jobs[0].due_at <= chrono::Utc::now(), "due now");
    }

    #[tokio::test]
    async fn records_that_change_no_service_wake_nobody() {
        let fakes = Fakes::default();
        let wakes = Wakes {
            registry: &fakes,
            timers: &fakes,
        };
        let records = [record(id(2), DeploymentEvent::DeploymentSucceeded {})];
        wake_the_interested(id(2), &records, &wakes)
            .await
            .expect("nothing to do");
        assert!(fakes.0.lock().expect("queue").is_empty());
    }
}
