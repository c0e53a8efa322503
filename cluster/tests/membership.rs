//! Membership on a real nats-server: joins, graceful leaves and crashes are
//! seen, and members' features are learned across a server restart.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::collections::BTreeSet;
use std::time::Duration;

use async_nats::jetstream;
use awaken_cluster::membership::{MemberRecord, Membership, MembershipConfig, NodeId};
use awaken_cluster::testing::NatsServer;

const TTL: Duration = Duration::from_secs(1);

fn config() -> MembershipConfig {
    MembershipConfig {
        ttl: TTL,
        ..MembershipConfig::default()
    }
}

fn node(id: &str) -> NodeId {
    NodeId::new(id).unwrap()
}

async fn join(server: &NatsServer, id: &str) -> Membership {
    join_listing(server, id, &[]).await
}

/// Joins `id`, its record listing `features`.
async fn join_listing(server: &NatsServer, id: &str, features: &[&str]) -> Membership {
    let js = jetstream::new(server.connect().await.unwrap());
    let record = MemberRecord {
        node_id: node(id),
        joined_at_ms: 0,
        http_url: None,
        features: features.iter().map(|f| (*f).to_owned()).collect(),
    };
    Membership::join(&js, &config(), record).await.unwrap()
}

/// Waits (bounded by `within`) until `membership` sees exactly `expected`.
async fn sees(membership: &Membership, expected: &[&str], within: Duration) {
    let expected: BTreeSet<NodeId> = expected.iter().map(|id| node(id)).collect();
    let mut view = membership.subscribe();
    tokio::time::timeout(within, view.wait_for(|members| *members == expected))
        .await
        .unwrap_or_else(|_| panic!("never saw {expected:?}; saw {:?}", membership.members()))
        .unwrap();
}

#[tokio::test]
async fn joins_and_graceful_leaves_are_seen() {
    let server = NatsServer::start().await.unwrap();
    let a = join(&server, "node-a").await;
    assert!(
        a.members().contains(&node("node-a")),
        "a node sees itself at once"
    );
    let b = join(&server, "node-b").await;
    sees(&a, &["node-a", "node-b"], TTL).await;
    sees(&b, &["node-a", "node-b"], TTL).await;
    b.leave().await.unwrap();
    sees(&a, &["node-a"], TTL).await;
}

#[tokio::test]
async fn a_crashed_node_drops_out_after_its_ttl() {
    let server = NatsServer::start().await.unwrap();
    let a = join(&server, "node-a").await;
    let c = join(&server, "node-c").await;
    sees(&a, &["node-a", "node-c"], TTL).await;
    // No leave: the heartbeats just stop, as when the process dies.
    drop(c);
    sees(&a, &["node-a"], TTL + TTL / 2).await;
    // The survivor keeps heartbeating past several TTLs.
    let mut view = a.subscribe();
    let changed = tokio::time::timeout(3 * TTL, view.changed()).await;
    assert!(
        changed.is_err(),
        "the live node never dropped out: {:?}",
        a.members()
    );
}

/// After a NATS restart a node still learns what members list: one that joins
/// afterwards counts as having its features (a watch the restart ended would
/// leave it lacking them forever, and the node on the older forms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn features_of_members_are_learned_after_a_nats_restart() {
    let mut server = NatsServer::start().await.unwrap();
    let a = join_listing(&server, "node-a", &["x"]).await;
    let mut features = a.features();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !features.everyone_has("x") {
        tokio::time::timeout_at(deadline, features.changed())
            .await
            .expect("node-a never learned its own record")
            .unwrap();
    }
    server.restart().await.unwrap();
    let _b = join_listing(&server, "node-b", &["x"]).await;
    sees(&a, &["node-a", "node-b"], 5 * TTL).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !features.everyone_has("x") {
        tokio::time::timeout_at(deadline, features.changed())
            .await
            .expect("node-b's features were never learned after the restart")
            .unwrap();
    }
}

#[test]
fn node_ids_are_kv_keys() {
    assert!(NodeId::new("node-1_a=").is_ok());
    for bad in ["", "has space", "dot.ted", "star*", &"x".repeat(129)] {
        assert!(NodeId::new(bad).is_err(), "{bad:?}");
    }
}
