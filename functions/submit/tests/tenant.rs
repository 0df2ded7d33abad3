//! The tenant is checked where every way in passes: a bad one is refused, naming the flag and
//! the rule, and nothing is sealed or recorded.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use overture_domain::secret::{SecretString, SecretValues};
use overture_events::{CloudAccount, DeploymentId, Timestamp};
use overture_kit::memory::{FixedClock, MemoryLog};
use overture_kit::payload::MemoryPayloads;
use overture_submit::{
    submit, CloudSession, SealError, SealSecrets, Submission, SubmitError, SubmitPorts,
};

/// A log in memory, and a seal that counts what is asked of it.
#[derive(Default)]
struct Counting {
    log: MemoryLog,
    seals: AtomicUsize,
}

#[async_trait]
impl SealSecrets for Counting {
    async fn seal(
        &self,
        _: DeploymentId,
        _: &str,
        _: &SecretValues,
        _: Option<&SecretString>,
    ) -> Result<String, SealError> {
        self.seals.fetch_add(1, Ordering::SeqCst);
        Ok("seal".into())
    }
}

impl Counting {
    /// Submits `submission` on this log and seal, with no files, at the epoch.
    async fn submit(&self, submission: Submission) -> Result<DeploymentId, SubmitError> {
        submit(
            submission,
            &SubmitPorts {
                log: &self.log,
                seals: self,
                payloads: &MemoryPayloads::default(),
                clock: &FixedClock(Timestamp::UNIX_EPOCH),
            },
        )
        .await
    }

    /// How many times the log was written.
    fn appends(&self) -> usize {
        self.log.appends()
    }
}

/// [`support::submission`] of the text, for this tenant.
fn submission(tenant: &str, text: &str) -> Submission {
    Submission {
        tenant: tenant.into(),
        ..support::submission(text)
    }
}

const VALID: &str = "name: t\nsteps:\n  a: { run: noop }\n";

async fn refused(submission: Submission) -> Vec<(String, String)> {
    let ports = Counting::default();
    let result = ports.submit(submission).await;
    assert_eq!(ports.appends(), 0, "nothing recorded");
    assert_eq!(ports.seals.load(Ordering::SeqCst), 0, "nothing sealed");
    match result {
        Err(SubmitError::Invalid(error)) => {
            error.0.into_iter().map(|p| (p.field, p.problem)).collect()
        }
        other => panic!("expected the submission to be refused as invalid: {other:?}"),
    }
}

#[tokio::test]
async fn a_tenant_outside_the_name_rule_is_refused_naming_the_flag() {
    for tenant in ["", "../../x", "acme\u{1b}[2J", "Acme"] {
        let problems = refused(submission(tenant, VALID)).await;
        assert_eq!(problems.len(), 1, "{tenant:?}: {problems:?}");
        assert_eq!(problems[0].0, "--tenant");
        assert!(
            problems[0].1.contains("lowercase letters, digits and '-'"),
            "{tenant:?}: {}",
            problems[0].1
        );
    }
}

#[tokio::test]
async fn a_bad_tenant_is_reported_with_the_blueprint_problems() {
    let problems = refused(submission("a/b", "name: t\nsteps:\n  a: { run: sript }\n")).await;
    let fields: Vec<&str> = problems.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(fields, ["--tenant", "steps.a.run"]);
}

#[tokio::test]
async fn the_default_tenant_and_names_in_the_rule_are_recorded() {
    for tenant in ["default", "acme", "team-7"] {
        let ports = Counting::default();
        ports
            .submit(submission(tenant, VALID))
            .await
            .unwrap_or_else(|error| panic!("{tenant}: {error}"));
        assert_eq!(ports.appends(), 1);
    }
}

#[tokio::test]
async fn a_cloud_project_is_a_tenant_when_it_is_safe_to_show() {
    let with_project = |project: &str| {
        let mut submission = submission(project, VALID);
        submission.cloud = Some(CloudSession {
            account: CloudAccount {
                auth_url: "http://127.0.0.1:1/identity/v3".into(),
                project_id: "p1".into(),
                project: project.into(),
                domain: "Default".into(),
                user: "ada".into(),
                endpoints: vec![],
            },
            token: SecretString::from("token".to_owned()),
        });
        submission
    };
    let problems = refused(with_project("ops/../x")).await;
    assert_eq!(problems[0].0, "--token-file");
    assert!(
        problems[0].1.contains("the token's project"),
        "{problems:?}"
    );
    let problems = refused(with_project("x\u{7}")).await;
    assert!(problems[0].1.contains("control"), "{problems:?}");

    // A project named as clouds allow (capitals, spaces) is not locked out.
    let ports = Counting::default();
    ports
        .submit(with_project("Team Alpha"))
        .await
        .expect("a project name with capitals and a space is a tenant");
    assert_eq!(ports.appends(), 1);
}
