//! A thread owner paused in the middle of a checkpoint (SIGSTOP, a long GC, a
//! frozen VM) must not keep the thread locked, nor write once it resumes after
//! another node took the thread over (invariant 1, single writer).
//!
//! The pause is real from PostgreSQL's side: the old owner's connection goes
//! through a proxy that holds back the bytes of its checkpoint — the server hears
//! nothing more from a client that was about to write, exactly as with a stopped
//! process. (A checkpoint is one statement: there is no open transaction to hold.
//! When checkpoints were transactions, the proxy held back their `COMMIT`, and
//! the server rolled the silent transaction back after the write hold limit.)
//! Needs PostgreSQL (`AWAKEN_TEST_POSTGRES_URL`, as the store conformance tests).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use awaken_actors::store::conformance::{checkpoint, run, tid, user_messages};
use awaken_actors::store::{
    FencingToken, MessageQuery, PoolSettings, PostgresStore, ThreadRunStore,
};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgSslMode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// Forwards TCP to PostgreSQL; while `hold` is set, a client chunk carrying
/// [`HELD`] waits until `release` (the client looks paused mid-write).
struct StallingProxy {
    port: u16,
    hold: Arc<AtomicBool>,
    held: Arc<Notify>,
    release: Arc<Notify>,
}

impl StallingProxy {
    async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let hold = Arc::new(AtomicBool::new(false));
        let held = Arc::new(Notify::new());
        let release = Arc::new(Notify::new());
        let (h, d, r) = (hold.clone(), held.clone(), release.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = TcpStream::connect(&upstream).await.unwrap();
                let (mut client_rx, mut client_tx) = client.into_split();
                let (mut server_rx, mut server_tx) = server.into_split();
                let (h, d, r) = (h.clone(), d.clone(), r.clone());
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n) = client_rx.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        let chunk = &buf[..n];
                        if h.load(Ordering::SeqCst) && contains(chunk, HELD) {
                            let released = r.notified();
                            d.notify_one();
                            released.await;
                        }
                        if server_tx.write_all(chunk).await.is_err() {
                            break;
                        }
                    }
                });
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut server_rx, &mut client_tx).await;
                });
            }
        });
        Self {
            port,
            hold,
            held,
            release,
        }
    }
}

/// What the held write carries: the text of its message.
const HELD: &[u8] = b"stale ";

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_owner_neither_blocks_the_next_owner_nor_commits_after_it() {
    let (new_owner, schema) = PostgresStore::for_tests().await;
    let url = std::env::var("AWAKEN_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    // The proxy reads the client's bytes: no TLS on this connection (a local
    // server may offer it, and sqlx takes it when offered).
    let options = PgConnectOptions::from_str(&url)
        .unwrap()
        .ssl_mode(PgSslMode::Disable);
    let upstream = format!("{}:{}", options.get_host(), options.get_port());
    let proxy = StallingProxy::start(upstream).await;
    let settings = PoolSettings {
        max_connections: 1,
        write_hold_limit: Duration::from_millis(500),
        ..PoolSettings::default()
    };
    let stale_pool = PgPoolOptions::new()
        .max_connections(settings.max_connections)
        .connect_with(
            options
                .port(proxy.port)
                .application_name(schema.name())
                .options([("search_path", schema.name())])
                .options(settings.session_options()),
        )
        .await
        .unwrap();
    let old_owner = PostgresStore::new(stale_pool);

    let thread = tid("t-paused");
    old_owner
        .checkpoint(checkpoint(
            &thread,
            1,
            0,
            user_messages("first ", 1),
            run(&thread, "r-1", 1),
        ))
        .await
        .unwrap();

    // The old owner pauses in the middle of its next checkpoint.
    proxy.hold.store(true, Ordering::SeqCst);
    let held = proxy.held.notified();
    let stale_write = tokio::spawn(async move {
        old_owner
            .checkpoint(checkpoint(
                &thread,
                1,
                1,
                user_messages("stale ", 1),
                run(&thread, "r-1", 1),
            ))
            .await
    });
    held.await;

    // Its lease expires; the next owner raises the fence, at once rather than
    // after the pause.
    let thread = tid("t-paused");
    let started = Instant::now();
    let fenced = loop {
        match new_owner.fence(&thread, FencingToken(2)).await {
            Ok(()) => break started.elapsed(),
            Err(error) => assert!(
                started.elapsed() < Duration::from_secs(10),
                "the next owner could not fence: {error}"
            ),
        }
    };
    assert!(fenced < Duration::from_secs(5), "fencing waited {fenced:?}");

    // The old owner resumes: its checkpoint must not land.
    proxy.release.notify_waiters();
    let stale = stale_write.await.unwrap();
    assert!(stale.is_err(), "the paused owner's checkpoint committed");
    let log = new_owner
        .load_messages(
            &thread,
            &MessageQuery {
                cursor: None,
                limit: 200,
                include_internal: true,
            },
        )
        .await
        .unwrap();
    let texts: Vec<String> = log.messages.iter().map(|m| m.message.text()).collect();
    assert_eq!(texts, ["first 1"]);
    let snapshot = new_owner
        .load_thread_snapshot(&thread)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(snapshot.fence, FencingToken(2));
}
