//! KV buckets on a real nats-server 2.9: created by hand, compare-and-set, expiry.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::time::Duration;

use async_nats::jetstream;
use awaken_cluster::kv::{BucketSpec, ensure_bucket};
use awaken_cluster::testing::NatsServer;
use futures::StreamExt;

#[tokio::test]
async fn buckets_open_twice_and_compare_and_set() {
    let server = NatsServer::start().await.unwrap();
    let js = jetstream::new(server.connect().await.unwrap());
    let bucket = ensure_bucket(&js, &BucketSpec::new("leases"))
        .await
        .unwrap();
    let again = ensure_bucket(&js, &BucketSpec::new("leases"))
        .await
        .unwrap();

    let first = bucket.create("shard.1", "node-a".into()).await.unwrap();
    assert!(
        again.create("shard.1", "node-b".into()).await.is_err(),
        "create refuses an existing key"
    );
    let second = again
        .update("shard.1", "node-b".into(), first)
        .await
        .unwrap();
    assert!(second > first);
    assert!(
        bucket
            .update("shard.1", "node-a".into(), first)
            .await
            .is_err(),
        "a stale revision loses"
    );
    let entry = bucket.entry("shard.1").await.unwrap().unwrap();
    assert_eq!(&entry.value[..], b"node-b");
    assert_eq!(entry.revision, second);
}

#[tokio::test]
async fn entries_expire_after_max_age() {
    let server = NatsServer::start().await.unwrap();
    let js = jetstream::new(server.connect().await.unwrap());
    let spec = BucketSpec::new("members").with_max_age(Duration::from_secs(1));
    let bucket = ensure_bucket(&js, &spec).await.unwrap();
    bucket.put("node-a", "alive".into()).await.unwrap();
    assert!(bucket.entry("node-a").await.unwrap().is_some());
    // Wait for the server to expire the entry: poll the key listing, bounded.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let keys: Vec<String> = bucket
            .keys()
            .await
            .unwrap()
            .filter_map(|k| async { k.ok() })
            .collect()
            .await;
        if keys.is_empty() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never expired");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(bucket.entry("node-a").await.unwrap().is_none());
}

#[tokio::test]
async fn a_killed_server_restarts_with_its_data() {
    let mut server = NatsServer::start().await.unwrap();
    {
        let js = jetstream::new(server.connect().await.unwrap());
        let bucket = ensure_bucket(&js, &BucketSpec::new("durable"))
            .await
            .unwrap();
        bucket.put("k", "v".into()).await.unwrap();
    }
    server.restart().await.unwrap();
    let js = jetstream::new(server.connect().await.unwrap());
    let bucket = ensure_bucket(&js, &BucketSpec::new("durable"))
        .await
        .unwrap();
    let entry = bucket.entry("k").await.unwrap().unwrap();
    assert_eq!(&entry.value[..], b"v");
}
