//! The config store contract, run against the in-process store (memory and file)
//! and the KV store on a real nats-server.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::time::Duration;

use async_nats::jetstream;
use awaken_cluster::ClusterError;
use awaken_cluster::config_store::{
    ConfigStore, ConfigVersion, DEFAULT_CONFIG_BUCKET, MemoryConfigStore, NatsConfigStore,
};
use awaken_cluster::testing::NatsServer;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;

type Versions = BoxStream<'static, Result<ConfigVersion, ClusterError>>;

async fn next(watch: &mut Versions) -> ConfigVersion {
    tokio::time::timeout(Duration::from_secs(5), watch.next())
        .await
        .expect("a version within 5 s")
        .expect("the watch goes on")
        .unwrap()
}

/// Compare-and-set writes, loads and watches, against any store.
async fn contract(store: &dyn ConfigStore, other: &dyn ConfigStore) {
    assert_eq!(store.load().await.unwrap(), None);
    let mut watch = store.watch().await.unwrap();

    // Only the first writer of an empty store wins.
    let first = store.save(Bytes::from_static(b"one"), None).await.unwrap();
    let lost = other.save(Bytes::from_static(b"rival"), None).await;
    assert!(
        matches!(lost, Err(ClusterError::Conflict { .. })),
        "{lost:?}"
    );
    assert_eq!(
        other.load().await.unwrap(),
        Some(ConfigVersion {
            revision: first,
            document: Bytes::from_static(b"one")
        })
    );
    assert_eq!(next(&mut watch).await.document, Bytes::from_static(b"one"));

    // A write against a stale revision loses and changes nothing.
    let second = other
        .save(Bytes::from_static(b"two"), Some(first))
        .await
        .unwrap();
    assert!(second > first);
    let stale = store.save(Bytes::from_static(b"late"), Some(first)).await;
    assert!(
        matches!(stale, Err(ClusterError::Conflict { .. })),
        "{stale:?}"
    );
    let latest = store.load().await.unwrap().unwrap();
    assert_eq!(
        (latest.revision, &latest.document[..]),
        (second, &b"two"[..])
    );
    assert_eq!(next(&mut watch).await.revision, second);

    // A watch opened later starts from the latest document.
    let mut late = other.watch().await.unwrap();
    assert_eq!(next(&mut late).await.document, Bytes::from_static(b"two"));
}

#[tokio::test]
async fn the_memory_store_keeps_the_contract() {
    // One store seen twice: `other` is the same process's second caller.
    let store = std::sync::Arc::new(MemoryConfigStore::new());
    contract(store.as_ref(), store.as_ref()).await;
}

#[tokio::test]
async fn the_file_store_keeps_the_contract_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.msgpack");
    {
        let store = MemoryConfigStore::open(path.clone()).await.unwrap();
        contract(&store, &store).await;
    }
    let reopened = MemoryConfigStore::open(path.clone()).await.unwrap();
    let latest = reopened.load().await.unwrap().unwrap();
    assert_eq!(&latest.document[..], b"two");
    let next_revision = reopened
        .save(Bytes::from_static(b"three"), Some(latest.revision))
        .await
        .unwrap();
    assert!(next_revision > latest.revision);
    assert_eq!(std::fs::read(&path).unwrap(), b"three");
}

#[tokio::test]
async fn the_nats_store_keeps_the_contract_across_connections() {
    let server = NatsServer::start().await.unwrap();
    let a = jetstream::new(server.connect().await.unwrap());
    let b = jetstream::new(server.connect().await.unwrap());
    let store = NatsConfigStore::open(&a, DEFAULT_CONFIG_BUCKET, 1)
        .await
        .unwrap();
    let other = NatsConfigStore::open(&b, DEFAULT_CONFIG_BUCKET, 1)
        .await
        .unwrap();
    contract(&store, &other).await;
}
