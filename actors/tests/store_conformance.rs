//! The store conformance suite against every store this crate ships.

mod memory {
    awaken_actors::thread_run_store_conformance!(
        awaken_actors::store::conformance::memory_fixture()
    );
    awaken_actors::profile_store_conformance!(awaken_actors::store::conformance::memory_fixture());
}

mod file {
    awaken_actors::thread_run_store_conformance!(awaken_actors::store::conformance::file_fixture());
    awaken_actors::profile_store_conformance!(awaken_actors::store::conformance::file_fixture());
}
