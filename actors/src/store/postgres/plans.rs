//! The store's keyed statements read by index whatever the tables' statistics.
//!
//! sqlx prepares every statement once per pooled connection, and PostgreSQL
//! switches a prepared statement to a generic plan after five executions. A
//! generic plan is kept until the tables are analyzed again — where autovacuum
//! is off, for good — and one chosen while a table is small (a new database:
//! no statistics, a few pages) may scan it whole, which costs more with every
//! row written (decision 0090). These tests plan each keyed statement
//! generically on never-analyzed tables of several sizes, as a connection
//! opened early in a database's life would, and refuse any sequential scan.

use sqlx::pool::PoolConnection;
use sqlx::{Postgres, Row};

use super::monitor::MONITOR_SESSION;
use super::{PostgresStore, sql};

/// The generic plan of `statement`, every parameter null.
async fn generic_plan(connection: &mut PoolConnection<Postgres>, statement: &str) -> String {
    sqlx::query(sql(&format!("PREPARE plan_check AS {statement}")))
        .execute(&mut **connection)
        .await
        .unwrap_or_else(|error| panic!("{error}: {statement}"));
    let parameters: i32 = sqlx::query_scalar(
        "SELECT cardinality(parameter_types) FROM pg_prepared_statements WHERE name = 'plan_check'",
    )
    .fetch_one(&mut **connection)
    .await
    .unwrap();
    let arguments = vec!["NULL"; usize::try_from(parameters).unwrap()].join(", ");
    let execute = if arguments.is_empty() {
        "EXPLAIN EXECUTE plan_check".to_owned()
    } else {
        format!("EXPLAIN EXECUTE plan_check({arguments})")
    };
    let lines = sqlx::query(sql(&execute))
        .fetch_all(&mut **connection)
        .await
        .unwrap();
    sqlx::query("DEALLOCATE plan_check")
        .execute(&mut **connection)
        .await
        .unwrap();
    lines
        .iter()
        .map(|row| row.get::<String, _>(0))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn keyed_statements_read_by_index_on_tables_never_analyzed() {
    let (store, _schema) = PostgresStore::for_tests().await;
    store.ensure_schema().await.unwrap();
    let statements = &store.sql;
    // Listing statements (threads, summaries, runs by filter) page over whole
    // tables by design; every other statement finds its rows by key. The
    // waiting runs' count and the webhook claim are checked on their own.
    let keyed = [
        ("insert_thread", &statements.insert_thread),
        ("load_thread", &statements.load_thread),
        ("lock_thread_data", &statements.lock_thread_data),
        ("lock_thread", &statements.lock_thread),
        ("update_thread_data", &statements.update_thread_data),
        ("delete_thread", &statements.delete_thread),
        ("checkpoint", &statements.checkpoint),
        ("one_checkpoint", &statements.one_checkpoint),
        ("fence", &statements.fence),
        ("current_fence", &statements.current_fence),
        ("touch_thread", &statements.touch_thread),
        ("thread_exists", &statements.thread_exists),
        ("snapshot", &statements.snapshot),
        ("fenced_snapshot", &statements.fenced_snapshot),
        ("page_messages", &statements.page_messages),
        ("insert_run", &statements.insert_run),
        ("load_run", &statements.load_run),
        ("latest_run", &statements.latest_run),
        ("get_profile", &statements.get_profile),
        ("put_profile", &statements.put_profile),
        ("delete_profile", &statements.delete_profile),
    ];
    let mut connection = store.pool().acquire().await.unwrap();
    sqlx::query("SET plan_cache_mode = force_generic_plan")
        .execute(&mut *connection)
        .await
        .unwrap();
    let mut scanning = Vec::new();
    let mut rows = 0;
    for size in [0, 10, 100, 1_000, 10_000] {
        fill(&mut connection, rows, size).await;
        rows = size;
        let others = statements
            .webhooks
            .keyed()
            .into_iter()
            .chain(statements.approvals.keyed());
        for (name, statement) in keyed.iter().copied().chain(others) {
            let plan = generic_plan(&mut connection, statement).await;
            if plan.contains("Seq Scan") {
                scanning.push(format!("{name}, {size} rows:\n{plan}"));
            }
        }
    }
    assert!(
        scanning.is_empty(),
        "generic plans that scan a whole table:\n\n{}",
        scanning.join("\n\n")
    );
}

/// The waiting runs every node counts on each scrape are read, on the metrics'
/// connection, from the partial index of unfinished runs at every table size.
#[tokio::test]
async fn the_waiting_runs_count_reads_the_index_of_unfinished_runs() {
    let (store, _schema) = PostgresStore::for_tests().await;
    store.ensure_schema().await.unwrap();
    let mut connection = store.pool().acquire().await.unwrap();
    for setting in ["SET plan_cache_mode = force_generic_plan", MONITOR_SESSION] {
        sqlx::query(setting)
            .execute(&mut *connection)
            .await
            .unwrap();
    }
    let mut rows = 0;
    for size in [0, 1_000, 10_000] {
        fill(&mut connection, rows, size).await;
        rows = size;
        let plan = generic_plan(&mut connection, &store.sql.waiting_runs).await;
        assert!(
            plan.contains("awaken_runs_unfinished") && !plan.contains("Seq Scan"),
            "{size} rows:\n{plan}"
        );
    }
}

/// The webhook claim, which a sweep runs now and then, is sent unprepared and
/// so planned on the table as it is: on a large one it takes the index of
/// claimable webhooks.
#[tokio::test]
async fn the_unprepared_webhook_claim_reads_by_index_on_a_large_table() {
    let (store, _schema) = PostgresStore::for_tests().await;
    store.ensure_schema().await.unwrap();
    let mut connection = store.pool().acquire().await.unwrap();
    fill(&mut connection, 0, 10_000).await;
    let plan: Vec<String> =
        sqlx::query_scalar(sql(&format!("EXPLAIN {}", store.sql.webhooks.claim())))
            .persistent(false)
            .bind("holder")
            .bind(5_i64)
            .bind(10_i64)
            .bind(16_i64)
            .bind(None::<String>)
            .fetch_all(&mut *connection)
            .await
            .unwrap();
    let plan = plan.join("\n");
    assert!(!plan.contains("Seq Scan"), "{plan}");
}

/// The inbox's pages, sent unprepared, read by index on a large table: the
/// first page of every approval and of the pending ones, and a later page of a
/// tenant's, each about as many rows as it returns.
#[tokio::test]
async fn the_unprepared_approval_pages_read_by_index_on_a_large_table() {
    let (store, _schema) = PostgresStore::for_tests().await;
    store.ensure_schema().await.unwrap();
    let mut connection = store.pool().acquire().await.unwrap();
    fill(&mut connection, 0, 10_000).await;
    let [by_status, any] = store.sql.approvals.pages();
    let pages = [
        (by_status, Some("pending"), None, None),
        (any, None, None, None),
        (any, None, Some("acme"), Some((5_000_i64, "a5000"))),
        (
            by_status,
            Some("pending"),
            Some("acme"),
            Some((5_000_i64, "a5000")),
        ),
    ];
    for (statement, status, tenant, after) in pages {
        let plan: Vec<String> = sqlx::query_scalar(sql(&format!("EXPLAIN {statement}")))
            .persistent(false)
            .bind(51_i64)
            .bind(status)
            .bind(tenant)
            .bind(None::<String>)
            .bind(None::<String>)
            .bind(None::<String>)
            .bind(None::<i64>)
            .bind(None::<i64>)
            .bind(after.map(|(at, _)| at))
            .bind(after.map(|(_, id)| id))
            .fetch_all(&mut *connection)
            .await
            .unwrap();
        let plan = plan.join("\n");
        assert!(
            !plan.contains("Seq Scan"),
            "{status:?} {tenant:?} {after:?}:\n{plan}"
        );
    }
}

/// Grows every table from `from` to `to` rows (one thread's worth each), without
/// analyzing them.
async fn fill(connection: &mut PoolConnection<Postgres>, from: i64, to: i64) {
    for statement in [
        "INSERT INTO awaken_threads (id, data) SELECT 't' || g, '{}' FROM generate_series($1, $2) g",
        "INSERT INTO awaken_messages (thread_id, seq, internal, data)
         SELECT 't' || g, 1, false, '{}' FROM generate_series($1, $2) g",
        "INSERT INTO awaken_runs (id, thread_id, status, created_at, data)
         SELECT 'r' || g, 't' || g, 'done', g, '{}' FROM generate_series($1, $2) g",
        "INSERT INTO awaken_state (thread_id, data) SELECT 't' || g, '{}' FROM generate_series($1, $2) g",
        "INSERT INTO awaken_profiles (namespace, key, data)
         SELECT 'n', 'k' || g, '{}' FROM generate_series($1, $2) g",
        "INSERT INTO awaken_webhooks (run_id, thread_id, id, config, progress, done, created_at)
         SELECT 'r' || g, 't' || g, 'w', '{}', '{}', true, g FROM generate_series($1, $2) g",
        "INSERT INTO awaken_approvals
             (id, thread_id, tenant, agent_id, tool_name, status, requested_at, data)
         SELECT 'a' || g, 't' || g, CASE WHEN g % 2 = 0 THEN 'acme' END, 'agent', 'tool',
                CASE WHEN g % 10 = 0 THEN 'pending' ELSE 'approved' END, g, '{}'
         FROM generate_series($1, $2) g",
    ] {
        sqlx::query(statement)
            .bind(from + 1)
            .bind(to)
            .execute(&mut **connection)
            .await
            .unwrap_or_else(|error| panic!("{error}: {statement}"));
    }
}
