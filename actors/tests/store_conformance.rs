//! The store conformance suite against every store this crate ships.
//!
//! The postgres tests need PostgreSQL (`AWAKEN_TEST_POSTGRES_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`); each runs in a fresh schema, dropped
//! afterwards. They fail, rather than skip, when PostgreSQL is unreachable.

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

mod postgres {
    awaken_actors::thread_run_store_conformance!(
        awaken_actors::store::conformance::postgres_fixture()
    );
    awaken_actors::profile_store_conformance!(awaken_actors::store::conformance::postgres_fixture());
}

/// Tables created by an earlier version (`jsonb` records, foreign keys): a
/// deployment that upgrades keeps its database as it is.
mod postgres_earlier_tables {
    awaken_actors::thread_run_store_conformance!(
        awaken_actors::store::conformance::postgres_earlier_tables_fixture()
    );
}
