//! The slow clients: connections from chosen loopback addresses that send a
//! request head promising a body, then one body byte at a time, never finishing,
//! until the server answers or closes.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::task::JoinSet;

use crate::error::{GatewayError, Result};

/// The body length each slow request promises: far more than it ever sends.
const PROMISED_BYTES: usize = 100_000;

/// Connections opened at once while the slow clients connect (below any listen
/// backlog).
const CONNECTING_AT_ONCE: usize = 64;

/// How much longer than the body deadline a slow client waits for its answer
/// before it counts as never cut off.
const CUT_OFF_GRACE: Duration = Duration::from_secs(15);

/// What became of one slow connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fate {
    /// The server answered with this status, this long after the connection
    /// sent its head.
    Answered { status: u16, after: Duration },
    /// The server closed the connection without an answer.
    Closed { after: Duration },
    /// The server neither answered nor closed within the deadline and its grace.
    NeverCut,
}

/// The slow connections of a benchmark, trickling until the server cuts them.
#[derive(Debug)]
pub(super) struct Trickling {
    tasks: JoinSet<Fate>,
    /// Connections the server answered or closed so far.
    ended: Arc<AtomicUsize>,
    /// When the first connection sent its head.
    pub(super) first_opened: Instant,
    /// Connections opened.
    pub(super) opened: usize,
}

impl Trickling {
    /// Opens `count` connections from each of `sources` to `server`, each
    /// sending a request head and then a body byte every `every`; the server's
    /// body deadline is `deadline`.
    pub(super) async fn open(
        server: SocketAddr,
        sources: &[(IpAddr, usize)],
        every: Duration,
        deadline: Duration,
    ) -> Result<Self> {
        let head = format!(
            "POST /v1/threads HTTP/1.1\r\nhost: {server}\r\ncontent-type: application/json\r\n\
             content-length: {PROMISED_BYTES}\r\n\r\n{{"
        );
        let head: Arc<[u8]> = Arc::from(head.as_bytes());
        let total: usize = sources.iter().map(|(_, count)| count).sum();
        let mut trickling = Self {
            tasks: JoinSet::new(),
            ended: Arc::new(AtomicUsize::new(0)),
            first_opened: Instant::now(),
            opened: 0,
        };
        let mut connecting = JoinSet::new();
        let every_source = sources
            .iter()
            .flat_map(|&(source, count)| std::iter::repeat_n(source, count));
        for source in every_source {
            if connecting.len() >= CONNECTING_AT_ONCE
                && let Some(connected) = connecting.join_next().await
            {
                trickling.start(connected, every, deadline, total)?;
            }
            let head = Arc::clone(&head);
            connecting.spawn(async move {
                let mut stream = connect_from(source, server).await?;
                stream.write_all(&head).await?;
                Ok::<_, std::io::Error>((stream, Instant::now()))
            });
        }
        while let Some(connected) = connecting.join_next().await {
            trickling.start(connected, every, deadline, total)?;
        }
        Ok(trickling)
    }

    /// Starts trickling on a connection that sent its head.
    fn start(
        &mut self,
        connected: std::result::Result<
            std::io::Result<(TcpStream, Instant)>,
            tokio::task::JoinError,
        >,
        every: Duration,
        deadline: Duration,
        total: usize,
    ) -> Result<()> {
        let (stream, opened) = connected
            .map_err(bench_error)?
            .map_err(|error| bench_error(format!("a slow client did not connect: {error}")))?;
        // Spread the clients' bytes over the interval, not all at once.
        let offset = every.mul_f64(self.opened as f64 / total.max(1) as f64);
        let client = SlowClient {
            every,
            offset,
            give_up: deadline + CUT_OFF_GRACE,
            ended: Arc::clone(&self.ended),
        };
        self.tasks.spawn(client.run(stream, opened));
        self.opened += 1;
        Ok(())
    }

    /// Connections the server answered or closed so far.
    pub(super) fn ended(&self) -> usize {
        self.ended.load(Ordering::Relaxed)
    }

    /// Waits for every connection's fate.
    pub(super) async fn fates(mut self) -> Result<Vec<Fate>> {
        let mut fates = Vec::with_capacity(self.opened);
        while let Some(fate) = self.tasks.join_next().await {
            fates.push(fate.map_err(bench_error)?);
        }
        Ok(fates)
    }
}

/// One slow client's pace.
struct SlowClient {
    every: Duration,
    offset: Duration,
    give_up: Duration,
    ended: Arc<AtomicUsize>,
}

impl SlowClient {
    /// Sends a body byte every `every` (after `offset`) until the server answers
    /// or closes; `opened` is when the head went out.
    async fn run(self, stream: TcpStream, opened: Instant) -> Fate {
        let (mut reader, mut writer) = stream.into_split();
        let first = tokio::time::Instant::now() + self.offset + self.every;
        let mut ticks = tokio::time::interval_at(first, self.every);
        let give_up = tokio::time::sleep(self.give_up);
        tokio::pin!(give_up);
        let mut seen = Vec::new();
        let mut buffer = [0u8; 512];
        let fate = loop {
            tokio::select! {
                read = reader.read(&mut buffer) => match read {
                    Ok(0) | Err(_) => break ended(&seen, opened),
                    Ok(read) => {
                        seen.extend_from_slice(&buffer[..read]);
                        if seen.windows(2).any(|pair| pair == b"\r\n") {
                            break ended(&seen, opened);
                        }
                    }
                },
                _ = ticks.tick() => {
                    // A write the server no longer reads fails: its answer or
                    // close is read next.
                    let _ = writer.write_all(b" ").await;
                }
                () = &mut give_up => break Fate::NeverCut,
            }
        };
        if fate != Fate::NeverCut {
            self.ended.fetch_add(1, Ordering::Relaxed);
        }
        fate
    }
}

/// The fate of a connection whose server sent `seen` and then answered or
/// closed.
fn ended(seen: &[u8], opened: Instant) -> Fate {
    let after = opened.elapsed();
    match seen
        .get(9..12)
        .and_then(|status| std::str::from_utf8(status).ok())
        .and_then(|status| status.parse().ok())
    {
        Some(status) if seen.starts_with(b"HTTP/1.") => Fate::Answered { status, after },
        _ => Fate::Closed { after },
    }
}

/// A connection to `server` from `source` (any port).
async fn connect_from(source: IpAddr, server: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = match source {
        IpAddr::V4(_) => TcpSocket::new_v4()?,
        IpAddr::V6(_) => TcpSocket::new_v6()?,
    };
    socket.bind(SocketAddr::new(source, 0))?;
    socket.connect(server).await
}

/// The `index`-th loopback address after 127.0.0.1 (`127.0.0.2`, …): on Linux
/// the whole of 127.0.0.0/8 reaches the loopback interface.
pub(super) fn loopback(index: usize) -> Result<IpAddr> {
    let host = u32::try_from(index + 2)
        .ok()
        .filter(|&host| host < 1 << 24)
        .ok_or_else(|| bench_error("too many client addresses"))?;
    Ok(IpAddr::V4(Ipv4Addr::from(
        u32::from(Ipv4Addr::new(127, 0, 0, 0)) | host,
    )))
}

fn bench_error(error: impl std::fmt::Display) -> GatewayError {
    GatewayError::Bench(error.to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn loopback_addresses_count_from_127_0_0_2() {
        assert_eq!(loopback(0).unwrap(), IpAddr::from([127, 0, 0, 2]));
        assert_eq!(loopback(254).unwrap(), IpAddr::from([127, 0, 1, 0]));
        assert!(loopback(1 << 24).is_err());
    }

    #[test]
    fn a_fate_is_the_status_line_or_a_close() {
        let opened = Instant::now();
        assert!(matches!(
            ended(b"HTTP/1.1 408 Request Timeout\r\n", opened),
            Fate::Answered { status: 408, .. }
        ));
        assert!(matches!(ended(b"", opened), Fate::Closed { .. }));
        assert!(matches!(ended(b"garbage\r\n", opened), Fate::Closed { .. }));
    }
}
