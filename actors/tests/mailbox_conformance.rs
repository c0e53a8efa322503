//! The mailbox conformance suite against every mailbox this crate ships.

mod memory {
    awaken_actors::mailbox_store_conformance!(awaken_actors::mailbox::conformance::memory_fixture());
}
