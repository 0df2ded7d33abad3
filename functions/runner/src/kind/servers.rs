//! The runner's half of the `servers` kind: security groups and servers made in the tenant's
//! cloud with the user's token, by the engine's own program inside the step's sandbox. Its
//! settings ([`ServersSettings`]: `security_groups`, `servers`, `timeout`) and their checks are
//! the kind's other half, `domain/src/kind/servers.rs`.
//!
//! - [`prepare`] resolves the step's settings for this deployment
//!   into a [`Plan`] and writes it to [`SPEC_FILE`]: every resource named
//!   `<deployment prefix>-<name>` ([`resource_prefix`]) so deployments of one tenant never collide
//!   and a retried attempt finds what an earlier one made, and every server given a cloud-config
//!   installing the deployment's public key ([`cloud_config`]). The command runs
//!   `overture provision` at [`ENGINE_PROGRAM`](crate::ENGINE_PROGRAM), with the identity URL in
//!   [`AUTH_URL_ENV`] and the token in [`TOKEN_ENV`], a secret variable: never on a command
//!   line, never in a file.
//! - `overture provision` (in the `overture` program) carries the plan out and writes each
//!   server's address and each group's id to `$OVERTURE_OUTPUTS`, or its error to
//!   [`ERROR_FILE`], exiting [`BACKEND_UNREACHABLE`] when the cloud API could not be reached.
//! - [`conclude`] turns that into outputs (`<server>` → its address, `security-group-<group>` →
//!   its id), a `backend-unreachable` failure (retried by the policy) or a `step-failed` one.

use std::collections::BTreeMap;

use overture_domain::kind::servers::{ServersSettings, Source, BASTION_ROLE, GROUP_OUTPUT_PREFIX};
use overture_domain::secret::TOKEN_SECRET;
use overture_events::{DeploymentId, ErrorClass};
use serde::{Deserialize, Serialize};

use crate::step::{collected, Prepared, StepInput, Verdict};
use crate::SandboxResult;

/// The plan, under `/work`.
pub const SPEC_FILE: &str = "servers.json";
/// Where `overture provision` writes why it failed, under `/work`.
pub const ERROR_FILE: &str = "provision.error";
/// `overture provision`'s exit code when the cloud API could not be reached (`EX_TEMPFAIL`).
pub const BACKEND_UNREACHABLE: i32 = 75;
/// The variable holding the cloud's identity URL.
pub const AUTH_URL_ENV: &str = "OS_AUTH_URL";
/// The secret variable holding the user's token.
pub const TOKEN_ENV: &str = "OS_TOKEN";
/// The hidden subcommand of the `overture` program that carries a plan out.
pub const SUBCOMMAND: &str = "provision";

/// What `overture provision` makes: a `servers` step's settings resolved for one deployment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// The deployment, named in the descriptions of what is made.
    pub deployment: String,
    /// The security groups, made first (rules may admit one another).
    pub security_groups: Vec<GroupPlan>,
    /// The servers.
    pub servers: Vec<ServerPlan>,
    /// How long to wait for every server to be `ACTIVE`, in milliseconds.
    pub boot_wait_ms: u64,
}

/// A security group to make or find.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupPlan {
    /// Its name in the step (and in the output `security-group-<name>`).
    pub name: String,
    /// Its name in the cloud.
    pub cloud_name: String,
    /// Its description in the cloud.
    pub description: String,
    /// Its ingress TCP rules.
    pub rules: Vec<RulePlan>,
}

/// An ingress TCP rule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RulePlan {
    /// The port admitted.
    pub port: u16,
    /// Whom it admits.
    pub from: RuleFrom,
}

/// Whom a rule admits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleFrom {
    /// The servers of this group of the plan (by its name in the step).
    Group(String),
    /// The addresses of this CIDR.
    Cidr(String),
}

/// A server to make or find.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerPlan {
    /// Its name in the step (and the output holding its address).
    pub name: String,
    /// Its name in the cloud.
    pub cloud_name: String,
    /// Its security groups, by their names in the step.
    pub security_groups: Vec<String>,
    /// Its metadata (`role: bastion` for the bastion).
    pub metadata: BTreeMap<String, String>,
    /// Its cloud-config.
    pub user_data: String,
    /// Its image, if the step says.
    pub image: Option<String>,
    /// Its flavor, if the step says.
    pub flavor: Option<String>,
}

/// The text every cloud resource of a deployment's name starts with: the last 8 hex digits of
/// its id. Not the first: ids are UUIDv7, whose first 8 digits are the time and change only
/// every 65 seconds, so two deployments started in the same minute would share them; the last
/// ones are random.
pub fn resource_prefix(deployment: DeploymentId) -> String {
    let hex = deployment.uuid().simple().to_string();
    hex[hex.len() - 8..].to_owned()
}

/// A server's cloud-config: its host name and the deployment's public key for root.
pub fn cloud_config(hostname: &str, public_key: &str) -> String {
    // A JSON string is a YAML double-quoted scalar: the key stays one value whatever it holds.
    let key = serde_json::Value::String(public_key.trim().to_owned());
    format!("#cloud-config\nhostname: {hostname}\nssh_authorized_keys:\n  - {key}\n")
}

/// Resolves the step's settings for this attempt.
pub fn plan(input: &StepInput, read: &ServersSettings) -> Result<Plan, String> {
    let public_key = input.state.ssh_public_key.as_deref().ok_or(
        "the deployment has no SSH key to install on its servers; deploy it again with this engine",
    )?;
    let deployment = input.deployment;
    let prefix = resource_prefix(deployment);
    let cloud_name = |name: &str| format!("{prefix}-{name}");
    let security_groups = read
        .security_groups
        .iter()
        .map(|(name, rules)| GroupPlan {
            name: name.clone(),
            cloud_name: cloud_name(name),
            description: format!(
                "overture deployment {deployment}, step `{}`: group `{name}`",
                input.spec.name
            ),
            rules: rules
                .iter()
                .map(|rule| RulePlan {
                    port: rule.port,
                    from: match &rule.from {
                        Source::Group(group) => RuleFrom::Group(group.clone()),
                        Source::Cidr(cidr) => RuleFrom::Cidr(cidr.clone()),
                    },
                })
                .collect(),
        })
        .collect();
    let render = |value: &Option<String>| value.as_deref().map(|v| input.render(v)).transpose();
    let servers = read
        .servers
        .iter()
        .map(|(name, server)| {
            Ok(ServerPlan {
                name: name.clone(),
                cloud_name: cloud_name(name),
                security_groups: server.security_groups.clone(),
                metadata: if server.bastion {
                    [("role".to_owned(), BASTION_ROLE.to_owned())].into()
                } else {
                    BTreeMap::new()
                },
                user_data: cloud_config(name, public_key),
                image: render(&server.image)?,
                flavor: render(&server.flavor)?,
            })
        })
        .collect::<Result<_, String>>()?;
    Ok(Plan {
        deployment: deployment.to_string(),
        security_groups,
        servers,
        boot_wait_ms: u64::try_from(read.boot_wait.as_millis()).unwrap_or(u64::MAX),
    })
}

/// Builds the sandbox command of an attempt: the plan in [`SPEC_FILE`], the engine's own
/// program to carry it out, the identity URL and the token in its environment.
pub fn prepare(input: &StepInput, settings: &ServersSettings) -> Result<Prepared, String> {
    let cloud = input.state.cloud.as_ref().ok_or(
        "this step makes servers in the tenant's cloud, but the deployment was given no cloud \
         token; deploy it with --token-file FILE or OS_TOKEN, and --auth-url or OS_AUTH_URL",
    )?;
    let token = input.secrets.get(TOKEN_SECRET).ok_or(
        "the user's cloud token is not available to this engine; run `overture resume` with \
         --token-file FILE or OS_TOKEN set to a token of the deployment's project",
    )?;
    let plan = plan(input, settings)?;
    let spec =
        serde_json::to_vec_pretty(&plan).map_err(|e| format!("cannot write the plan: {e}"))?;
    Ok(Prepared {
        command: format!(
            "exec {} {SUBCOMMAND} --spec {SPEC_FILE}",
            crate::ENGINE_PROGRAM
        ),
        env: vec![(AUTH_URL_ENV.to_owned(), cloud.auth_url.clone())],
        secret_env: vec![(TOKEN_ENV.to_owned(), token.clone())],
        files: vec![(SPEC_FILE.into(), spec)],
        network: true,
        collect: vec![ERROR_FILE.into(), crate::host_keys::HOST_KEYS_FILE.into()],
        engine_program: true,
    })
}

/// Judges `overture provision`'s exit: the outputs it wrote, or why it failed.
pub fn conclude(settings: &ServersSettings, code: i32, result: &SandboxResult) -> Verdict {
    let reason = collected(&result.collected, ERROR_FILE)
        .map(|text| String::from_utf8_lossy(text).trim().to_owned())
        .filter(|text| !text.is_empty());
    match code {
        0 => {}
        BACKEND_UNREACHABLE => {
            return Verdict::Failure {
                class: ErrorClass::BackendUnreachable,
                headline: reason.unwrap_or_else(|| "the cloud API is unreachable".to_owned()),
            }
        }
        other => {
            return Verdict::failed(
                reason
                    .unwrap_or_else(|| format!("`overture {SUBCOMMAND}` exited with code {other}")),
            )
        }
    }
    let outputs = match result
        .outputs_file
        .content()
        .and_then(|content| parse_outputs(&String::from_utf8_lossy(content)))
    {
        Ok(outputs) => outputs,
        Err(problem) => return Verdict::failed(problem),
    };
    let expected: Vec<String> = settings
        .servers
        .keys()
        .cloned()
        .chain(
            settings
                .security_groups
                .keys()
                .map(|group| format!("{GROUP_OUTPUT_PREFIX}{group}")),
        )
        .collect();
    let missing: Vec<&str> = expected
        .iter()
        .filter(|key| !outputs.contains_key(*key))
        .map(String::as_str)
        .collect();
    if missing.is_empty() {
        Verdict::Success(outputs)
    } else {
        Verdict::failed(format!(
            "`overture {SUBCOMMAND}` succeeded but left no output for: {}",
            missing.join(", ")
        ))
    }
}

/// Reads the `key=value` lines `overture provision` wrote; keys are server names and
/// `security-group-<group>`, so unlike a script's they may hold `-`.
pub fn parse_outputs(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut outputs = BTreeMap::new();
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let valid = |key: &str| {
            !key.is_empty()
                && key
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        };
        match line.split_once('=') {
            Some((key, value)) if valid(key) => {
                outputs.insert(key.to_owned(), value.to_owned());
            }
            _ => {
                return Err(format!(
                "line {} of the outputs of `overture {SUBCOMMAND}` is not `name=value`: {line:?}",
                number + 1
            ))
            }
        }
    }
    Ok(outputs)
}

#[cfg(test)]
mod tests {
    use overture_domain::blueprint::parse;
    use overture_domain::secret::{SecretString, SecretValues};
    use overture_domain::{Deployment, DeploymentState};
    use overture_events::{CloudAccount, DeploymentEvent};
    use secrecy::ExposeSecret;

    use super::*;
    use crate::kind::{conclude, prepare};
    use crate::testing::{input, requested, sandbox_result};

    const TOKEN: &str = "5ec12e7t0k3n5ec12e7t0k3n5ec12e7t";
    const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOv overture";

    const BLUEPRINT: &str = r#"
name: cluster
params: { flavor: { default: m1.small } }
bastion:
  host: "{{ steps.servers.outputs.bastion }}"
  security_group: "{{ steps.servers.outputs.security-group-bastion }}"
steps:
  servers:
    run: servers
    with:
      security_groups:
        bastion: []
        web:
          - { port: 22, from: bastion }
          - { port: 8000, from: 10.0.0.0/8 }
      servers:
        bastion: { security_groups: [bastion], role: bastion }
        web-1: { security_groups: [web], flavor: "{{ params.flavor }}" }
      timeout: 2m
"#;

    fn cloud() -> CloudAccount {
        CloudAccount {
            auth_url: "http://127.0.0.1:5000/identity/v3".into(),
            project_id: "p1".into(),
            project: "tenant-a".into(),
            domain: "Default".into(),
            user: "tenant-a".into(),
            endpoints: vec![],
        }
    }

    /// The deployment of [`BLUEPRINT`], with its key sealed and, if `cloud`, its cloud account.
    fn state(cloud: Option<CloudAccount>) -> DeploymentState {
        let blueprint = parse(BLUEPRINT).expect("valid").snapshot;
        let mut state = requested(&blueprint, &[("flavor", "m1.small")]);
        state.cloud = cloud;
        Deployment::apply(
            state,
            DeploymentEvent::CredentialsSealed {
                seal: "s".into(),
                secrets: vec![],
                ssh_public_key: Some(KEY.into()),
                token: true,
            },
        )
    }

    fn secrets() -> SecretValues {
        [(TOKEN_SECRET.to_owned(), SecretString::from(TOKEN))].into()
    }

    #[test]
    fn the_plan_goes_in_a_file_and_the_token_only_in_a_secret_variable() {
        let state = state(Some(cloud()));
        let secrets = secrets();
        let prepared = prepare(&input(&state, "servers", &secrets)).expect("prepares");

        assert_eq!(
            prepared.command,
            "exec /run/overture/bin/overture provision --spec servers.json"
        );
        assert!(prepared.network && prepared.engine_program);
        assert_eq!(
            prepared.env,
            vec![(AUTH_URL_ENV.to_owned(), cloud().auth_url)]
        );
        assert_eq!(prepared.secret_env.len(), 1);
        assert_eq!(prepared.secret_env[0].0, TOKEN_ENV);
        assert_eq!(prepared.secret_env[0].1.expose_secret(), TOKEN);
        let (path, spec) = &prepared.files[0];
        assert_eq!(path.as_os_str(), SPEC_FILE);
        let spec = String::from_utf8_lossy(spec);
        for shown in [&prepared.command, &spec.to_string()] {
            assert!(!shown.contains(TOKEN), "{shown}");
        }
        assert_eq!(
            prepared.collect,
            vec![
                std::path::PathBuf::from(ERROR_FILE),
                std::path::PathBuf::from(crate::host_keys::HOST_KEYS_FILE)
            ]
        );

        let plan: Plan = serde_json::from_str(&spec).expect("a plan");
        // The test deployment's id is nil: its prefix is 8 zeros.
        let prefix = "00000000";
        assert_eq!(plan.boot_wait_ms, 120_000);
        assert_eq!(
            plan.security_groups
                .iter()
                .map(|g| (g.name.as_str(), g.cloud_name.as_str(), g.rules.clone()))
                .collect::<Vec<_>>(),
            vec![
                ("bastion", "00000000-bastion", vec![]),
                (
                    "web",
                    "00000000-web",
                    vec![
                        RulePlan {
                            port: 22,
                            from: RuleFrom::Group("bastion".into())
                        },
                        RulePlan {
                            port: 8000,
                            from: RuleFrom::Cidr("10.0.0.0/8".into())
                        },
                    ]
                ),
            ]
        );
        let bastion = &plan.servers[0];
        assert_eq!(bastion.cloud_name, format!("{prefix}-bastion"));
        assert_eq!(bastion.security_groups, vec!["bastion".to_owned()]);
        assert_eq!(
            bastion.metadata,
            [("role".to_owned(), "bastion".to_owned())].into()
        );
        assert_eq!(
            bastion.user_data,
            format!("#cloud-config\nhostname: bastion\nssh_authorized_keys:\n  - \"{KEY}\"\n")
        );
        let web = &plan.servers[1];
        assert_eq!(web.name, "web-1");
        assert!(web.metadata.is_empty());
        assert_eq!(
            web.flavor.as_deref(),
            Some("m1.small"),
            "templates are rendered"
        );
        assert_eq!(web.image, None);
    }

    #[test]
    fn without_a_cloud_account_or_a_token_the_step_says_how_to_give_one() {
        let secrets = secrets();
        let no_cloud = state(None);
        let problem = prepare(&input(&no_cloud, "servers", &secrets))
            .err()
            .expect("refused");
        assert!(problem.contains("--token-file"), "{problem}");

        let no_token = SecretValues::new();
        let with_cloud = state(Some(cloud()));
        let problem = prepare(&input(&with_cloud, "servers", &no_token))
            .err()
            .expect("refused");
        assert!(problem.contains("overture resume"), "{problem}");
    }

    #[test]
    fn resources_are_named_by_the_random_end_of_the_deployment_id() {
        // Two deployments started in the same minute: UUIDv7 ids sharing their first 8 digits.
        let id = |text: &str| DeploymentId::from_uuid(uuid::Uuid::parse_str(text).expect("a uuid"));
        let a = id("0198c2a4-7b7e-7cc3-9d1c-3f0d6b0e6a51");
        let b = id("0198c2a4-9f00-7000-8a00-00000000beef");
        assert_eq!(resource_prefix(a), "6b0e6a51");
        assert_eq!(resource_prefix(b), "0000beef");
    }

    #[test]
    fn the_exit_code_decides_the_class() {
        let state = state(Some(cloud()));
        let secrets = secrets();
        let input = input(&state, "servers", &secrets);

        let mut done = sandbox_result(0, "", &[]);
        done.outputs_file = crate::OutputsFile::Read(
            b"bastion=10.0.0.2\nweb-1=10.0.0.3\nsecurity-group-bastion=g1\nsecurity-group-web=g2\n"
                .to_vec(),
        );
        let Verdict::Success(outputs) = conclude(&input, 0, &done) else {
            panic!("succeeds");
        };
        assert_eq!(outputs["web-1"], "10.0.0.3");
        assert_eq!(outputs["security-group-bastion"], "g1");

        let mut partial = sandbox_result(0, "", &[]);
        partial.outputs_file = crate::OutputsFile::Read(b"bastion=10.0.0.2\n".to_vec());
        let Verdict::Failure { class, headline } = conclude(&input, 0, &partial) else {
            panic!("fails");
        };
        assert_eq!(class, ErrorClass::StepFailed);
        assert!(headline.contains("web-1"), "{headline}");

        let down = sandbox_result(
            BACKEND_UNREACHABLE,
            "",
            &[(ERROR_FILE, "the cloud API is unreachable: creating server `web-1`: The backend server is unreachable\n")],
        );
        assert_eq!(
            conclude(&input, BACKEND_UNREACHABLE, &down),
            Verdict::Failure {
                class: ErrorClass::BackendUnreachable,
                headline: "the cloud API is unreachable: creating server `web-1`: The backend server is unreachable".into(),
            }
        );
        let broken = sandbox_result(1, "", &[(ERROR_FILE, "server `web-1` is in ERROR")]);
        assert_eq!(
            conclude(&input, 1, &broken),
            Verdict::failed("server `web-1` is in ERROR")
        );
        assert_eq!(
            conclude(&input, 2, &sandbox_result(2, "", &[])),
            Verdict::failed("`overture provision` exited with code 2")
        );
    }

    #[test]
    fn the_settings_are_checked_before_anything_runs() {
        let check = |with: &str| {
            let text = format!("name: x\nsteps:\n  servers:\n    run: servers\n    with: {with}\n");
            match parse(&text) {
                Ok(_) => String::new(),
                Err(error) => error.to_string(),
            }
        };
        let missing = check("{ timeout: 2m }");
        assert!(
            missing.contains("steps.servers.with") && missing.contains("`with.servers`"),
            "{missing}"
        );
        let bad_name = check("{ servers: { Web_1: {} } }");
        assert!(
            bad_name.contains("steps.servers.with.servers.Web_1")
                && bad_name.contains("lowercase letters, digits and '-'"),
            "{bad_name}"
        );
        let bad_group = check(
            "{ security_groups: { web: [] }, servers: { web-1: { security_groups: [db] } } }",
        );
        assert!(
            bad_group.contains("steps.servers.with.servers.web-1.security_groups[0]")
                && bad_group.contains("`db` is not a security group of this step")
                && bad_group
                    .contains("declare it under `with.security_groups`, or use one of: web"),
            "{bad_group}"
        );
        let bad_from = check(
            "{ security_groups: { web: [{ port: 22, from: proxy }] }, servers: { web-1: {} } }",
        );
        assert!(
            bad_from.contains("steps.servers.with.security_groups.web[0].from"),
            "{bad_from}"
        );
        let long_wait = check("{ servers: { a: {} }, timeout: 1h }");
        assert!(
            long_wait.contains("must be shorter than the step's `timeout`"),
            "{long_wait}"
        );
        assert_eq!(check("{ servers: { a: {} } }"), "");
    }

    #[test]
    fn outputs_may_be_named_like_servers() {
        assert_eq!(
            parse_outputs("web-1=10.0.0.3\n\nsecurity-group-web=abc\n"),
            Ok([
                ("security-group-web".to_owned(), "abc".to_owned()),
                ("web-1".to_owned(), "10.0.0.3".to_owned())
            ]
            .into())
        );
        assert!(parse_outputs("Web=1").is_err());
        assert!(parse_outputs("novalue").is_err());
    }
}
