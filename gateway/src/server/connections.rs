//! The accept loop: every connection is served by hyper (HTTP/1.1) with a
//! deadline for its request head (which also closes connections idle between
//! requests, or silent from the start), no client address may hold more than
//! `max_connections_per_address` at once, and the server no more than
//! `max_connections`.
//!
//! `axum::serve` sets no timer, so a client that never finishes its headers, or
//! keeps a connection open without sending anything, holds it (and its memory)
//! forever; a few hundred such connections from one host starve every other
//! client. Bodies have their own deadline (`edge`, while the body is read). A
//! connection in its head or body holds nothing but itself: the in-flight limit
//! is taken once a request's body has arrived (decision 0083).

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use prometheus_client::metrics::gauge::Gauge;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tower::ServiceExt;

/// What the accept loop enforces.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnectionLimits {
    /// How long a client may take to send a request head once it started one,
    /// and to send its first byte after connecting.
    pub header_read_timeout: Duration,
    /// How long a connection may carry no byte either way (a kept-alive one
    /// between requests; an event stream sends keep-alives well within it).
    pub idle_timeout: Duration,
    /// Connections one client address may hold at once; more are closed at once.
    pub per_address: usize,
    /// Connections the server holds at once; more are closed at once.
    pub total: usize,
}

impl ConnectionLimits {
    /// How long a new connection may stay silent: a connection carrying no byte
    /// for the idle timeout is idle, whether or not it ever sent one.
    fn first_byte(&self) -> Duration {
        self.header_read_timeout.min(self.idle_timeout)
    }
}

/// Why a connection was closed as it came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refused {
    /// Its address holds `per_address` connections.
    Address,
    /// The server holds `total` connections.
    Server,
}

/// Open connections, per client address and in all.
#[derive(Debug, Default)]
struct Tally {
    open: Mutex<Open>,
    gauge: Gauge,
}

#[derive(Debug, Default)]
struct Open {
    total: usize,
    by_address: HashMap<IpAddr, usize>,
}

impl Tally {
    fn new(gauge: Gauge) -> Self {
        Self {
            open: Mutex::default(),
            gauge,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        // Critical sections never panic midway; a poisoned map is consistent.
        self.open
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts a connection from `address` unless it or the server already holds
    /// its limit.
    fn admit(
        self: &Arc<Self>,
        address: IpAddr,
        limits: &ConnectionLimits,
    ) -> Result<Admitted, Refused> {
        let mut open = self.lock();
        if open.total >= limits.total {
            return Err(Refused::Server);
        }
        let count = open.by_address.entry(address).or_default();
        if *count >= limits.per_address {
            return Err(Refused::Address);
        }
        *count += 1;
        open.total += 1;
        self.gauge.inc();
        Ok(Admitted {
            tally: Arc::clone(self),
            address,
        })
    }
}

/// One counted connection; dropping it frees its place.
struct Admitted {
    tally: Arc<Tally>,
    address: IpAddr,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut open = self.tally.lock();
        open.total = open.total.saturating_sub(1);
        if let Some(count) = open.by_address.get_mut(&self.address) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.by_address.remove(&self.address);
            }
        }
        self.tally.gauge.dec();
    }
}

/// Serves `app` on `listener` until `shutdown` resolves, then lets every open
/// connection finish its requests (the caller bounds how long that may take).
/// `open` counts the connections open.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    open: Gauge,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let tally = Arc::new(Tally::new(open));
    // Closed when the server stops accepting: connections then finish gracefully.
    let (stopping, stop) = watch::channel(());
    // Every connection holds a receiver; once all are dropped, all are done.
    let (open, all_closed) = watch::channel(());
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of descriptors and the like: wait a moment, keep serving.
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let admitted = match tally.admit(peer.ip(), &limits) {
            Ok(admitted) => admitted,
            Err(Refused::Address) => {
                tracing::debug!(%peer, "connection refused: too many from this address");
                continue;
            }
            Err(Refused::Server) => {
                tracing::debug!(%peer, "connection refused: too many connections");
                continue;
            }
        };
        // SSE writes many small frames: without TCP_NODELAY, Nagle's algorithm
        // holds each behind the client's delayed ACK (~40 ms per stream).
        if let Err(error) = stream.set_nodelay(true) {
            tracing::warn!(%error, "TCP_NODELAY not set");
        }
        let app = app.clone();
        let stop = stop.clone();
        let closed = all_closed.clone();
        tokio::spawn(async move {
            serve_connection(stream, app, &limits, peer, stop).await;
            // Only now, with the connection and its service (which holds the
            // app's state) dropped: whoever waits for every connection to close
            // may then take the state back as its sole owner.
            drop((admitted, closed));
        });
    }
    drop(stopping);
    drop(listener);
    drop(all_closed);
    open.closed().await;
}

/// Serves one accepted connection until it ends, idles out or finishes
/// gracefully once `stop` changes.
async fn serve_connection(
    stream: TcpStream,
    app: Router,
    limits: &ConnectionLimits,
    peer: SocketAddr,
    mut stop: watch::Receiver<()>,
) {
    // hyper's head deadline starts with the first byte of a request: a
    // client that connects and says nothing is held to it here.
    if tokio::time::timeout(limits.first_byte(), stream.readable())
        .await
        .is_err()
    {
        return;
    }
    // HTTP/1.1 only: detecting HTTP/2 first waits for bytes with no
    // deadline, so a silent connection would never be closed.
    let mut builder = Builder::new(TokioExecutor::new()).http1_only();
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let (stream, activity) = Watched::new(stream);
    let service = connection_service(app, peer);
    let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
    tokio::pin!(connection);
    let idle = activity.idle_for(limits.idle_timeout);
    tokio::pin!(idle);
    let result = tokio::select! {
        result = connection.as_mut() => result,
        () = &mut idle => {
            tracing::debug!(%peer, "closing an idle connection");
            Ok(())
        }
        _ = stop.changed() => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(error) = result {
        tracing::trace!(%error, "connection ended with an error");
    }
}

/// When a connection last carried a byte, in milliseconds since it opened.
#[derive(Debug)]
struct Activity {
    opened: tokio::time::Instant,
    last_ms: AtomicU64,
}

impl Activity {
    fn touch(&self) {
        let ms = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// Resolves once the connection carried nothing for `limit`.
    async fn idle_for(self: Arc<Self>, limit: Duration) {
        loop {
            let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
            let due = self.opened + last + limit;
            if tokio::time::Instant::now() >= due {
                return;
            }
            tokio::time::sleep_until(due).await;
        }
    }
}

/// A stream that notes when it last read or wrote a byte.
struct Watched {
    stream: TcpStream,
    activity: Arc<Activity>,
}

impl Watched {
    fn new(stream: TcpStream) -> (Self, Arc<Activity>) {
        let activity = Arc::new(Activity {
            opened: tokio::time::Instant::now(),
            last_ms: AtomicU64::new(0),
        });
        let watched = Self {
            stream,
            activity: Arc::clone(&activity),
        };
        (watched, activity)
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(written)) if written > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(written)) if written > 0) {
            self.activity.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// The router as hyper's service for one connection, with its peer address
/// available to handlers (`ConnectInfo`).
fn connection_service(
    app: Router,
    peer: SocketAddr,
) -> TowerToHyperService<
    impl tower::Service<
        Request<Incoming>,
        Response = axum::response::Response,
        Error = Infallible,
        Future = impl Send,
    > + Clone,
> {
    let service = app.map_request(move |mut request: Request<Incoming>| {
        request
            .extensions_mut()
            .insert(axum::extract::ConnectInfo(peer));
        request.map(axum::body::Body::new)
    });
    TowerToHyperService::new(service)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(per_address: usize, total: usize) -> ConnectionLimits {
        ConnectionLimits {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            per_address,
            total,
        }
    }

    #[test]
    fn an_address_holds_at_most_its_limit_and_frees_places_on_close() {
        let tally = Arc::new(Tally::default());
        let limits = limits(2, 10);
        let one = IpAddr::from([127, 0, 0, 2]);
        let other = IpAddr::from([127, 0, 0, 3]);
        let first = tally.admit(one, &limits);
        let second = tally.admit(one, &limits);
        assert!(first.is_ok() && second.is_ok());
        assert_eq!(
            tally.admit(one, &limits).err(),
            Some(Refused::Address),
            "a third from the same address"
        );
        assert!(
            tally.admit(other, &limits).is_ok(),
            "another address is not affected"
        );
        drop(first);
        assert!(
            tally.admit(one, &limits).is_ok(),
            "a closed connection frees its place"
        );
    }

    #[test]
    fn the_server_holds_at_most_its_total_from_every_address() {
        let gauge = Gauge::default();
        let tally = Arc::new(Tally::new(gauge.clone()));
        let limits = limits(2, 3);
        let held: Vec<_> = (2..5)
            .map(|last| tally.admit(IpAddr::from([127, 0, 0, last]), &limits))
            .collect();
        assert!(held.iter().all(Result::is_ok));
        assert_eq!(gauge.get(), 3);
        assert_eq!(
            tally.admit(IpAddr::from([127, 0, 0, 9]), &limits).err(),
            Some(Refused::Server),
            "a fourth, from a fresh address"
        );
        drop(held);
        assert_eq!(gauge.get(), 0);
        assert!(tally.admit(IpAddr::from([127, 0, 0, 9]), &limits).is_ok());
    }

    /// The server's caller takes the node back as its sole owner to drain it;
    /// a connection task still holding the app then made it exit undrained.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn once_serving_ends_no_connection_holds_the_app() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let state = Arc::new(());
        let app = Router::new()
            .route("/", axum::routing::get(|| async { "ok" }))
            .with_state(Arc::clone(&state));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(
            listener,
            app,
            limits(64, 64),
            Gauge::default(),
            async move {
                let _ = stopped.await;
            },
        ));
        // Kept-alive connections, each answered once and left open.
        let mut clients = Vec::new();
        for _ in 0..32 {
            let mut client = TcpStream::connect(address).await.unwrap();
            client
                .write_all(b"GET / HTTP/1.1\r\nhost: test\r\n\r\n")
                .await
                .unwrap();
            let mut answer = [0_u8; 12];
            client.read_exact(&mut answer).await.unwrap();
            assert_eq!(&answer, b"HTTP/1.1 200");
            clients.push(client);
        }
        stop.send(()).unwrap();
        server.await.unwrap();
        assert_eq!(
            Arc::strong_count(&state),
            1,
            "a connection still holds the app"
        );
    }

    #[test]
    fn a_silent_connection_waits_no_longer_than_the_idle_timeout() {
        let mut limits = limits(1, 1);
        assert_eq!(limits.first_byte(), Duration::from_secs(10));
        limits.header_read_timeout = Duration::from_secs(90);
        assert_eq!(limits.first_byte(), Duration::from_secs(60));
    }
}
