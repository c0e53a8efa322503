//! The ledger mailbox passes every `MailboxStore` rule of seed 000 against a real
//! nats-server 2.9, like the in-process twin does.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use async_nats::jetstream;
use awaken_actors::mailbox::conformance::rules_config;
use awaken_cluster::LedgerMailbox;
use awaken_cluster::ledger::DEFAULT_LEDGER_NAME;
use awaken_cluster::testing::NatsServer;

/// A mailbox on its own fresh server; the server is the guard.
async fn ledger_fixture() -> (LedgerMailbox, NatsServer) {
    let server = NatsServer::start().await.unwrap();
    let js = jetstream::new(server.connect().await.unwrap());
    let mailbox = LedgerMailbox::open(&js, DEFAULT_LEDGER_NAME, 1, rules_config())
        .await
        .unwrap();
    (mailbox, server)
}

mod rules {
    use super::*;

    awaken_actors::mailbox_store_conformance!(ledger_fixture());
}
