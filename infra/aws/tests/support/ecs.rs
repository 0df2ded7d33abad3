//! The local AWS emulator's ECS and EC2, as step tasks need them: a client that reads ECS's
//! answers as the SDK expects them, the step task definition, and the default VPC's subnet and
//! security group. Included by the test binaries that start step tasks.

#![allow(dead_code)] // Not every test binary uses every helper.

use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient,
    SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;

/// An ECS client on `config`, reading the emulator's answers through [`MendedCpu`].
pub fn client(config: &aws_config::SdkConfig) -> aws_sdk_ecs::Client {
    let mended = MendedCpu(config.http_client().expect("the SDK's HTTP client"));
    aws_sdk_ecs::Client::from_conf(
        aws_sdk_ecs::config::Builder::from(config)
            .http_client(mended)
            .build(),
    )
}

/// The emulator's HTTP client with one mend: the emulator answers a task's container `cpu` as a
/// number (`"cpu": 0`), where ECS, and so the SDK reading it, has a string; every other byte of
/// ECS's answers is passed as it came.
#[derive(Debug)]
pub struct MendedCpu(SharedHttpClient);

impl HttpClient for MendedCpu {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(MendedCpuConnector(
            self.0.http_connector(settings, components),
        ))
    }
}

#[derive(Debug)]
struct MendedCpuConnector(SharedHttpConnector);

impl HttpConnector for MendedCpuConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let inner = self.0.clone();
        HttpConnectorFuture::new(async move {
            let response = inner.call(request).await?;
            let status = response.status();
            let mut headers = response.headers().clone();
            let body = aws_sdk_s3::primitives::ByteStream::new(response.into_body())
                .collect()
                .await
                .map_err(|e| ConnectorError::other(e.into(), None))?
                .into_bytes();
            let mended = String::from_utf8_lossy(&body).replace("\"cpu\": 0", "\"cpu\": \"0\"");
            headers.remove("content-length");
            let mut answer = HttpResponse::new(
                status,
                aws_sdk_s3::primitives::ByteStream::from(mended.into_bytes()).into_inner(),
            );
            *answer.headers_mut() = headers;
            Ok(answer)
        })
    }
}

/// The step task definition, as the stack makes it, registered through ECS's JSON API: the SDK
/// sends a container's `cpu` as 0 when unset, which the emulator then shows back as a number
/// where ECS, and the SDK reading it, have a string. Its container has a memory reservation
/// because the emulator sums its containers' memory, which Fargate does not need.
pub async fn register_task_definition(endpoint: &str, region: &str, family: &str) {
    let definition = serde_json::json!({
        "family": family,
        "requiresCompatibilities": ["FARGATE"],
        "networkMode": "awsvpc",
        "cpu": "512",
        "memory": "1024",
        "containerDefinitions": [{
            "name": "step",
            "image": "overture-step:test",
            "essential": true,
            "memoryReservation": 1024,
        }],
    });
    let answer = reqwest::Client::new()
        .post(endpoint)
        .header("Authorization", authorization(region, "ecs"))
        .header(
            "X-Amz-Target",
            "AmazonEC2ContainerServiceV20141113.RegisterTaskDefinition",
        )
        .header("Content-Type", "application/x-amz-json-1.1")
        .body(definition.to_string())
        .send()
        .await
        .expect("ECS answers");
    assert!(answer.status().is_success(), "{:?}", answer.text().await);
}

/// Who the raw calls come from: the same account the SDK's clients act in.
pub fn authorization(region: &str, service: &str) -> String {
    format!(
        "AWS4-HMAC-SHA256 Credential=overture-local/20260101/{region}/{service}/aws4_request, \
         SignedHeaders=host, Signature=0"
    )
}

/// The first `field` of what `action` lists in the emulator's default VPC, through EC2's query
/// API (the SDK's EC2 crate is not worth a dependency for two calls in a test).
pub async fn default_vpc(endpoint: &str, region: &str, action: &str, field: &str) -> String {
    let answer = reqwest::Client::new()
        .post(endpoint)
        .header("Authorization", authorization(region, "ec2"))
        .form(&[("Action", action), ("Version", "2016-11-15")])
        .send()
        .await
        .expect("EC2 answers")
        .text()
        .await
        .expect("its body");
    let open = format!("<{field}>");
    let start = answer.find(&open).expect("one listed") + open.len();
    let end = start + answer[start..].find('<').expect("its end");
    answer[start..end].to_owned()
}

/// An attempt's log, as the runner writes it and the test reads it afterwards.
#[derive(Clone, Default)]
pub struct Log(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Log {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log").extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Log {
    /// What was written, as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("log")).into_owned()
    }
}

/// A cancellation that never comes.
pub fn never() -> overture_runner::Cancel<'static> {
    Box::pin(std::future::pending())
}

/// The cluster a test starts step tasks on: what the stack makes, made in the emulator.
pub struct StepCluster {
    /// Starts and watches the step tasks, polling every 10 ms.
    pub steps: overture_aws::fargate::FargateSteps,
    /// ECS, through [`client`].
    pub ecs: aws_sdk_ecs::Client,
    /// S3, where the inputs and results are.
    pub s3: aws_sdk_s3::Client,
    /// KMS, which holds the key the inputs are sealed under.
    pub kms: aws_sdk_kms::Client,
    /// The default VPC's subnet the tasks run in.
    pub subnet: String,
    /// The default VPC's security group the tasks have.
    pub group: String,
}

/// Makes `bucket`, a KMS key, the cluster `cluster` and the task definition `family` in the
/// emulator, and the [`FargateSteps`](overture_aws::fargate::FargateSteps) that start tasks
/// of it in the default VPC.
pub async fn step_cluster(region: &str, cluster: &str, family: &str, bucket: &str) -> StepCluster {
    let endpoint = crate::support::emulator();
    let config = overture_aws::config::for_endpoint(endpoint, region).await;
    let ecs = client(&config);
    let kms = aws_sdk_kms::Client::new(&config);
    let s3 = overture_aws::s3::client(&config);
    overture_aws::s3::create_payloads_bucket(&s3, bucket)
        .await
        .expect("bucket");
    let key = crate::support::kms_key(&kms).await;
    ecs.create_cluster()
        .cluster_name(cluster)
        .send()
        .await
        .expect("cluster");
    register_task_definition(endpoint, region, family).await;
    let subnet = default_vpc(endpoint, region, "DescribeSubnets", "subnetId").await;
    // The emulator refuses a task without security groups, which AWS would give the VPC's
    // default one: the test names that one.
    let group = default_vpc(endpoint, region, "DescribeSecurityGroups", "groupId").await;
    let steps = overture_aws::fargate::FargateSteps::new(
        ecs.clone(),
        s3.clone(),
        kms.clone(),
        bucket,
        key,
        overture_aws::fargate::StepTasks {
            cluster: cluster.to_owned(),
            task_definition: family.to_owned(),
            subnets: vec![subnet.clone()],
            security_groups: vec![group.clone()],
        },
    )
    .with_poll_interval(std::time::Duration::from_millis(10));
    StepCluster {
        steps,
        ecs,
        s3,
        kms,
        subnet,
        group,
    }
}
