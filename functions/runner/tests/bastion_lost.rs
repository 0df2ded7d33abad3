//! A step through the bastion that cannot connect, on in-memory fakes of the runner's ports:
//! when the engine's rule is gone although the deployment holds its lease on it, the attempt
//! fails as `bastion-access-lost`, never retried, naming the rule and the bastion; while the rule
//! is there, the servers' own failure (`bootstrap-timeout`) stands.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use chrono::TimeDelta;
use overture_domain::blueprint::parse;
use overture_domain::deployment::BastionAccess;
use overture_domain::secret::{SecretString, SecretValues, SSH_KEY_SECRET};
use overture_events::{CloudAccount, DeploymentEvent as E, DeploymentId, ErrorClass, Timestamp};
use overture_kit::memory::MemoryLog;
use overture_kit::payload::MemoryPayloads;
use overture_kit::{Cause, Clock, DeploymentLog};
use overture_runner::fakes::Quiet;
use overture_runner::step::SshAddress;
use overture_runner::wait_ssh::DEADLINE_PASSED;
use overture_runner::{
    run_attempt, AttemptReport, Cancel, GrantAccess, GrantError, KeepAlive, OpenSeal, OutputsFile,
    PortError, RunAttempt, RunError, RunSandboxed, RunnerPorts, SandboxExit, SandboxJob,
    SandboxResult,
};

fn t(seconds: i64) -> Timestamp {
    Timestamp::UNIX_EPOCH + TimeDelta::seconds(1_800_000_000 + seconds)
}

const BLUEPRINT: &str = "name: x
bastion: { host: '10.1.0.10:22', security_group: sg-bastion, user: jumper }
steps:
  wait: { run: wait-ssh, timeout: 5m, with: { hosts: ['10.2.0.5:22'], timeout: 2m } }
";

struct Fixed;

impl Clock for Fixed {
    fn now(&self) -> Timestamp {
        t(1)
    }
}

/// wait-ssh's answer when no host answered before its deadline.
struct NoHostAnswers;

#[async_trait]
impl RunSandboxed for NoHostAnswers {
    async fn run<'a>(&self, _: SandboxJob, _: Cancel<'a>) -> Result<SandboxResult, RunError> {
        Ok(SandboxResult {
            exit: SandboxExit::Code(DEADLINE_PASSED),
            output: b"ssh: connect to host 10.1.0.10 port 22: Connection timed out\n".to_vec(),
            outputs_file: OutputsFile::Read(Vec::new()),
            duration: Duration::from_secs(120),
            collected: Vec::new(),
        })
    }
}

/// The deployment's SSH key, sealed.
struct Key;

#[async_trait]
impl OpenSeal for Key {
    async fn open(&self, _: DeploymentId, _: &str, _: &str) -> Result<SecretValues, PortError> {
        Ok([(
            SSH_KEY_SECRET.to_owned(),
            SecretString::from(
                "-----BEGIN OPENSSH PRIVATE KEY-----\nx\n-----END OPENSSH PRIVATE KEY-----",
            ),
        )]
        .into())
    }
}

/// The bastion's security group: the engine's rule is there, or someone deleted it.
struct Bastion {
    rule_exists: AtomicBool,
}

#[async_trait]
impl GrantAccess for Bastion {
    async fn grant(
        &self,
        _: DeploymentId,
        _: &CloudAccount,
        bastion: &SshAddress,
        security_group: &str,
    ) -> Result<BastionAccess, GrantError> {
        Ok(BastionAccess {
            rule: "rule-7".into(),
            security_group: security_group.into(),
            bastion: bastion.address.clone(),
            source: "10.0.0.1/32".into(),
            port: bastion.port,
        })
    }

    async fn still_granted(
        &self,
        _: DeploymentId,
        _: &CloudAccount,
        access: &BastionAccess,
    ) -> Result<bool, GrantError> {
        assert_eq!(
            access.rule, "rule-7",
            "the deployment's own rule is checked"
        );
        Ok(self.rule_exists.load(Ordering::SeqCst))
    }
}

struct Kept;

#[async_trait]
impl KeepAlive for Kept {
    async fn keep_alive(&self, _: Option<Timestamp>) -> Result<(), PortError> {
        Ok(())
    }
}

/// Runs `wait`'s first attempt; returns the report and the attempt's failure event.
async fn wait_fails_with_the_rule(rule_exists: bool) -> (AttemptReport, E) {
    let log = MemoryLog::new(t(0));
    let deployment = DeploymentId::from_uuid(uuid::Uuid::now_v7());
    let cause = Cause::new("test", deployment, uuid::Uuid::now_v7());
    let history = vec![
        E::DeploymentRequested {
            triggered_by: None,
            tenant: "acme".into(),
            requested_by: "ada".into(),
            trigger: "cli".into(),
            source: "x.yaml".into(),
            blueprint: parse(BLUEPRINT).expect("valid").snapshot,
            blueprint_hash: "h".into(),
            params: Default::default(),
            cloud: Some(CloudAccount {
                auth_url: "http://127.0.0.1:5000/identity/v3".into(),
                project_id: "p".into(),
                project: "acme".into(),
                domain: "Default".into(),
                user: "ada".into(),
                endpoints: vec![],
            }),
            name: None,
        },
        E::CredentialsSealed {
            seal: "seal-1".into(),
            secrets: vec![SSH_KEY_SECRET.into()],
            ssh_public_key: Some("ssh-ed25519 AAAA overture".into()),
            token: true,
        },
        E::StepScheduled {
            step: "wait".into(),
            attempt: 1,
            not_before: t(0),
        },
    ];
    log.append(deployment, "acme", None, history, &cause)
        .await
        .expect("recorded");
    let bastion = Bastion {
        rule_exists: AtomicBool::new(rule_exists),
    };
    let ports = RunnerPorts {
        log: &log,
        sandbox: &NoHostAnswers,
        seals: &Key,
        kept: &Quiet,
        access: &bastion,
        logs: &Quiet,
        clock: &Fixed,
        payloads: &MemoryPayloads::default(),
        loopback: overture_domain::egress::LoopbackEgress::Operator,
    };
    let job = RunAttempt {
        deployment,
        step: "wait".into(),
        attempt: 1,
        cause: None,
    };
    let report = run_attempt(&job, &ports, &Kept).await.expect("handled");
    let failed = log
        .events(deployment)
        .into_iter()
        .find(|e| matches!(e, E::StepAttemptFailed { .. }))
        .expect("the attempt failed");
    (report, failed)
}

#[tokio::test(start_paused = true)]
async fn a_rule_deleted_under_an_open_lease_fails_the_step_as_bastion_access_lost() {
    let (report, failed) = wait_fails_with_the_rule(false).await;
    assert_eq!(report, AttemptReport::Failed(ErrorClass::BastionAccessLost));
    let E::StepAttemptFailed { message, .. } = failed else {
        unreachable!()
    };
    assert!(
        message.contains("rule-7")
            && message.contains("10.1.0.10:22")
            && message.contains("sg-bastion")
            && message.contains("deleted"),
        "{message}"
    );
    assert!(
        !message.contains("PRIVATE KEY"),
        "no secret in the message: {message}"
    );
}

#[tokio::test(start_paused = true)]
async fn while_the_rule_is_there_silent_servers_are_a_bootstrap_timeout() {
    let (report, _) = wait_fails_with_the_rule(true).await;
    assert_eq!(report, AttemptReport::Failed(ErrorClass::BootstrapTimeout));
}
