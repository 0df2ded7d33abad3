//! Security groups are enforced: TCP reaches a server only as its groups' rules admit, from a
//! prefix or from the servers of a group, and every change holds by the time the call answers.

use reqwest::Method;
use serde_json::json;

use crate::support::{
    reach_from_host, reach_from_namespace, ssh, ssh_through, text, From, Key, Reach, TestCloud,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn port_22_answers_the_host_only_while_a_rule_admits_its_address() {
    let cloud = TestCloud::start().await;
    let tenant = cloud.tenant("tenant-a").await;
    let key = Key::new();
    let bastion = cloud
        .boot(
            &tenant,
            json!({"name": "bastion", "metadata": {"role": "bastion"}}),
            &key,
        )
        .await;
    assert_eq!(reach_from_host(bastion.address, 22).await, Reach::Silent);

    let group = cloud.default_group(&tenant).await;
    let host = format!("{}/32", cloud.gateway(&tenant).await);
    let rule = cloud.ssh_rule(&tenant, &group, From::Prefix(&host)).await;
    assert_eq!(rule.status, 201, "{rule:?}");
    let rule_id = text(&rule.body["security_group_rule"]["id"]);
    assert_eq!(
        rule.body["security_group_rule"]["remote_ip_prefix"],
        host.as_str()
    );
    assert_eq!(reach_from_host(bastion.address, 22).await, Reach::Open);
    assert!(ssh(&key, bastion.address, "true").await.status.success());

    let again = cloud.ssh_rule(&tenant, &group, From::Prefix(&host)).await;
    assert_eq!(again.status, 409, "{again:?}");
    assert_eq!(
        again.body,
        json!({"NeutronError": {"type": "SecurityGroupRuleExists",
            "message": format!("Security group rule already exists. Rule id is {rule_id}."), "detail": ""}})
    );
    let listed = cloud
        .as_tenant(
            &tenant,
            Method::GET,
            &format!("/network/v2.0/security-group-rules?security_group_id={group}"),
            None,
        )
        .await;
    assert_eq!(
        listed.body["security_group_rules"][0]["id"],
        rule_id.as_str()
    );

    let deleted = cloud
        .as_tenant(
            &tenant,
            Method::DELETE,
            &format!("/network/v2.0/security-group-rules/{rule_id}"),
            None,
        )
        .await;
    assert_eq!(deleted.status, 204, "{deleted:?}");
    assert_eq!(reach_from_host(bastion.address, 22).await, Reach::Silent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_rule_admits_the_groups_servers_and_no_one_else() {
    let cloud = TestCloud::start().await;
    let tenant = cloud.tenant("tenant-a").await;
    let key = Key::new();
    let bastion_group = cloud.group(&tenant, "bastion").await;
    let web_group = cloud.group(&tenant, "web").await;
    let host = format!("{}/32", cloud.gateway(&tenant).await);
    let to_bastion = cloud
        .ssh_rule(&tenant, &bastion_group, From::Prefix(&host))
        .await;
    assert_eq!(to_bastion.status, 201, "{to_bastion:?}");
    let to_web = cloud
        .ssh_rule(&tenant, &web_group, From::Group(&bastion_group))
        .await;
    assert_eq!(to_web.status, 201, "{to_web:?}");
    assert_eq!(
        to_web.body["security_group_rule"]["remote_group_id"],
        bastion_group.as_str()
    );

    let web = cloud
        .boot(
            &tenant,
            json!({"name": "web-1", "security_groups": [{"name": "web"}]}),
            &key,
        )
        .await;
    let bastion = cloud
        .boot(
            &tenant,
            json!({"name": "bastion", "metadata": {"role": "bastion"},
                   "security_groups": [{"name": bastion_group}]}),
            &key,
        )
        .await;

    // The web server was booted first: the bastion's arrival updated its firewall.
    assert_eq!(
        reach_from_namespace(&bastion.namespace, web.address, 22).await,
        Reach::Open
    );
    assert_eq!(reach_from_host(web.address, 22).await, Reach::Silent);
    let through = ssh_through(&key, bastion.address, web.address, "hostname").await;
    assert!(through.status.success(), "{through:?}");
    assert_eq!(String::from_utf8_lossy(&through.stdout).trim(), "web-1");
    // Only a bastion forwards: once the host may reach the web server, it still cannot jump.
    let direct = cloud
        .ssh_rule(&tenant, &web_group, From::Prefix(&host))
        .await;
    assert_eq!(direct.status, 201, "{direct:?}");
    let no_jump = ssh_through(&key, web.address, bastion.address, "true").await;
    assert!(!no_jump.status.success(), "{no_jump:?}");

    let in_use = cloud
        .as_tenant(
            &tenant,
            Method::DELETE,
            &format!("/network/v2.0/security-groups/{web_group}"),
            None,
        )
        .await;
    assert_eq!(in_use.status, 409, "{in_use:?}");
    assert_eq!(in_use.body["NeutronError"]["type"], "SecurityGroupInUse");

    // Once the bastion is gone, the web server's firewall no longer admits its address.
    let deleted = cloud
        .as_tenant(
            &tenant,
            Method::DELETE,
            &format!("/compute/v2.1/servers/{}", bastion.id),
            None,
        )
        .await;
    assert_eq!(deleted.status, 204);
    let table = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &web.namespace,
            "nft",
            "list",
            "table",
            "inet",
            "overture",
        ])
        .output()
        .expect("nft runs");
    let table = String::from_utf8_lossy(&table.stdout).into_owned();
    assert!(table.contains(&host[..host.len() - 3]), "{table}");
    assert!(!table.contains(&bastion.address.to_string()), "{table}");
}
