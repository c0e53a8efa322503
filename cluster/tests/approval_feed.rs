//! The approval feed on a real nats-server: records as the wire contract says
//! (subject, headers, either encoding), kept once when published twice,
//! followed from a position, a gap for one the stream does not hold, and
//! garbage on the subjects skipped.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use async_nats::jetstream;
use awaken_actors::approval_feed::{FeedItem, FeedSink, FeedStream};
use awaken_actors::contract::{ApprovalChange, ApprovalResolution};
use awaken_actors::ids::{AgentId, ThreadId};
use awaken_actors::store::conformance::approval;
use awaken_cluster::approvals::{
    APPROVALS_STREAM, ApprovalFeedConfig, FeedEncoding, JetStreamFeed, TENANT_HEADER, parse_record,
};
use awaken_cluster::testing::NatsServer;
use futures::StreamExt;

const LIMIT: Duration = Duration::from_secs(20);

fn requested(id: &str) -> ApprovalChange {
    let mut approval = approval(id, &ThreadId::new("t-1").unwrap(), "r-1", "delete_file", 1);
    approval.tenant = Some("acme".into());
    approval.agent_id = AgentId::new("support.bot").unwrap();
    ApprovalChange::requested(approval)
}

async fn next(stream: &mut FeedStream) -> FeedItem {
    tokio::time::timeout(LIMIT, stream.next())
        .await
        .expect("a record in time")
        .expect("the stream goes on")
}

fn entry(item: FeedItem) -> (String, ApprovalChange) {
    match item {
        FeedItem::Entry(entry) => (entry.position, entry.change),
        FeedItem::Gap => panic!("a gap where a record was expected"),
    }
}

#[tokio::test]
async fn records_keep_the_wire_contract_are_kept_once_and_followed_from_a_position() {
    let nats = NatsServer::start().await.unwrap();
    let client = nats.connect().await.unwrap();
    let js = jetstream::new(client.clone());
    let feed = JetStreamFeed::open(
        js.clone(),
        &ApprovalFeedConfig {
            encoding: FeedEncoding::Msgpack,
            ..ApprovalFeedConfig::default()
        },
    )
    .await
    .unwrap();
    let mut live = client.subscribe("awaken.approvals.>").await.unwrap();
    let mut followed = feed.follow(None).await.unwrap();

    let first = requested("a-1");
    let outcomes = feed.publish(&[first.clone(), first.clone()]).await;
    assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
    let message = tokio::time::timeout(LIMIT, live.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        message.subject.as_str(),
        "awaken.approvals.requested.support_bot"
    );
    let headers = message.headers.as_ref().unwrap();
    assert_eq!(
        headers.get("Content-Type").unwrap().as_str(),
        "application/msgpack"
    );
    assert_eq!(
        headers.get("Nats-Msg-Id").unwrap().as_str(),
        "a-1.requested"
    );
    assert_eq!(headers.get(TENANT_HEADER).unwrap().as_str(), "acme");
    assert_eq!(
        parse_record(Some("application/msgpack"), &message.payload).unwrap(),
        first
    );

    let mut resolved = first.approval.clone();
    resolved.resolve(&ApprovalResolution::cancelled("run_cancelled", 2));
    let resolved = ApprovalChange::resolved(resolved);
    feed.publish(std::slice::from_ref(&resolved)).await;
    let mut stream = js.get_stream(APPROVALS_STREAM).await.unwrap();
    assert_eq!(
        stream.info().await.unwrap().state.messages,
        2,
        "the record published twice is kept once"
    );

    let (position, change) = entry(next(&mut followed).await);
    assert_eq!(change, first);
    assert_eq!(entry(next(&mut followed).await).1, resolved);
    let mut resumed = feed.follow(Some(&position)).await.unwrap();
    assert_eq!(entry(next(&mut resumed).await).1, resolved);

    // Garbage on the subjects changes nothing for followers: it is skipped.
    client
        .publish("awaken.approvals.requested.x", "not a record".into())
        .await
        .unwrap();
    let third = requested("a-3");
    feed.publish(std::slice::from_ref(&third)).await;
    assert_eq!(entry(next(&mut resumed).await).1, third);

    for lost in ["999999", "not-a-sequence"] {
        let mut gap = feed.follow(Some(lost)).await.unwrap();
        assert_eq!(next(&mut gap).await, FeedItem::Gap, "{lost}");
        let fourth = requested(&format!("a-4-{lost}"));
        feed.publish(std::slice::from_ref(&fourth)).await;
        assert_eq!(entry(next(&mut gap).await).1, fourth, "then new records");
    }
}
