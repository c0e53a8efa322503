//! Throwaway `nats-server` processes for tests (feature `testing`).
//!
//! Each server runs JetStream on 127.0.0.1 with a port the OS picks and a store
//! directory of its own, so tests can run in parallel, kill a server, and restart it
//! on the same port and data. [`NatsServer`] is one server; [`NatsCluster`] is a
//! three-server JetStream cluster, for replicated streams and failover.

use std::ffi::OsString;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// Log line naming the port a server takes clients on.
const CLIENT_LISTENING: &str = "Listening for client connections on ";
/// Log line naming the port a clustered server takes routes on (after the client one).
const ROUTE_LISTENING: &str = "Listening for route connections on ";
/// How long a server may take to write its listening line.
const LISTEN_WITHIN: Duration = Duration::from_secs(15);
/// How long a cluster may take to elect a JetStream meta leader.
const READY_WITHIN: Duration = Duration::from_secs(30);
/// Pause between two readiness probes.
const POLL_EVERY: Duration = Duration::from_millis(50);
/// Bound of one readiness probe (connect or request).
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Why a test server could not start.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// `nats-server` is not installed or could not be run.
    #[error("cannot run nats-server (install it with scripts/setup.sh): {0}")]
    Spawn(std::io::Error),
    /// The server did not report its client port in time.
    #[error("nats-server did not start: {0}")]
    NotReady(String),
    /// The cluster has no server with this index.
    #[error("the cluster has no server {0}")]
    NoSuchServer(usize),
}

/// A running `nats-server -js`, killed when dropped.
#[derive(Debug)]
pub struct NatsServer {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
    /// The configuration file, for a server started with one.
    config: Option<PathBuf>,
}

impl NatsServer {
    /// Starts a server on a free port with a fresh store directory.
    pub async fn start() -> Result<Self, HarnessError> {
        let dir = tempfile::tempdir().map_err(HarnessError::Spawn)?;
        let (child, port) = spawn(&dir, None, None).await?;
        Ok(Self {
            child: Some(child),
            port,
            dir,
            config: None,
        })
    }

    /// Starts a server on a free port with a fresh store directory and
    /// `config` (nats-server's configuration format: `tls { ... }`,
    /// `authorization { ... }`) as its configuration file.
    pub async fn start_configured(config: &str) -> Result<Self, HarnessError> {
        let dir = tempfile::tempdir().map_err(HarnessError::Spawn)?;
        let file = dir.path().join("server.conf");
        std::fs::write(&file, config).map_err(HarnessError::Spawn)?;
        let (child, port) = spawn(&dir, None, Some(&file)).await?;
        Ok(Self {
            child: Some(child),
            port,
            dir,
            config: Some(file),
        })
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The client URL.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// A connected client.
    pub async fn connect(&self) -> Result<async_nats::Client, HarnessError> {
        async_nats::connect(self.url())
            .await
            .map_err(|e| HarnessError::NotReady(e.to_string()))
    }

    /// Kills the server at once (SIGKILL), keeping its data.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// Starts the server again on the same port and data.
    pub async fn restart(&mut self) -> Result<(), HarnessError> {
        self.kill().await;
        let (child, _) = spawn(&self.dir, Some(self.port), self.config.as_deref()).await?;
        self.child = Some(child);
        Ok(())
    }
}

/// Servers in a [`NatsCluster`].
pub const CLUSTER_SIZE: usize = 3;

/// Three `nats-server -js` processes routed into one JetStream cluster on
/// 127.0.0.1, each with its own store directory; all killed when dropped.
///
/// Server `i` is named `n<i>` (the name stream info reports as `cluster.leader`).
/// Client and route ports are picked free before the start, because every server
/// must name the others' route ports; they stay fixed across [`Self::restart`].
#[derive(Debug)]
pub struct NatsCluster {
    binary: PathBuf,
    servers: Vec<ClusterServer>,
}

/// One server of a [`NatsCluster`].
#[derive(Debug)]
struct ClusterServer {
    name: String,
    client_port: u16,
    route_port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl NatsCluster {
    /// Starts three servers and waits until each of them answers JetStream API
    /// requests, which needs an elected meta leader.
    pub async fn start() -> Result<Self, HarnessError> {
        Self::start_with("nats-server").await
    }

    /// Like [`Self::start`], running the `nats-server` binary at `binary` (e.g. a
    /// newer release than the system's).
    pub async fn start_with(binary: impl Into<PathBuf>) -> Result<Self, HarnessError> {
        let binary = binary.into();
        // A port picked ahead may be taken before the server binds it: the server
        // then exits, and another try takes fresh ports.
        let mut failure = HarnessError::NotReady("never tried".into());
        for _ in 0..3 {
            match Self::start_once(&binary).await {
                Ok(cluster) => return Ok(cluster),
                Err(e) => failure = e,
            }
        }
        Err(failure)
    }

    async fn start_once(binary: &Path) -> Result<Self, HarnessError> {
        let ports = free_ports(2 * CLUSTER_SIZE)?;
        let mut servers = Vec::with_capacity(CLUSTER_SIZE);
        for (i, pair) in ports.chunks_exact(2).enumerate() {
            servers.push(ClusterServer {
                name: format!("n{i}"),
                client_port: pair[0],
                route_port: pair[1],
                dir: tempfile::tempdir().map_err(HarnessError::Spawn)?,
                child: None,
            });
        }
        let mut cluster = Self {
            binary: binary.to_owned(),
            servers,
        };
        for i in 0..CLUSTER_SIZE {
            cluster.launch(i).await?;
        }
        for i in 0..CLUSTER_SIZE {
            jetstream_ready(&cluster.url(i)).await?;
        }
        Ok(cluster)
    }

    /// The client URL of server `i`. Panics unless `i < CLUSTER_SIZE`.
    pub fn url(&self, i: usize) -> String {
        format!("nats://127.0.0.1:{}", self.servers[i].client_port)
    }

    /// All client URLs, comma-joined (`nats://127.0.0.1:A,nats://127.0.0.1:B,…`),
    /// the form a node's configuration holds; [`Self::url_list`] is the same as a
    /// list `async_nats::connect` takes.
    pub fn urls(&self) -> String {
        self.url_list().join(",")
    }

    /// All client URLs, for `async_nats::connect(cluster.url_list())` or
    /// `ConnectOptions::connect`: such a client fails over to the other servers.
    pub fn url_list(&self) -> Vec<String> {
        (0..self.servers.len()).map(|i| self.url(i)).collect()
    }

    /// The server name of server `i` (`n<i>`).
    pub fn name(&self, i: usize) -> Option<&str> {
        self.servers.get(i).map(|s| s.name.as_str())
    }

    /// The index of the server named `name` (as stream info reports leaders).
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.servers.iter().position(|s| s.name == name)
    }

    /// Whether server `i` is running (not killed).
    pub fn is_running(&self, i: usize) -> bool {
        self.servers.get(i).is_some_and(|s| s.child.is_some())
    }

    /// A client that knows all three servers and fails over between them.
    pub async fn connect(&self) -> Result<async_nats::Client, HarnessError> {
        async_nats::connect(self.url_list())
            .await
            .map_err(|e| HarnessError::NotReady(e.to_string()))
    }

    /// A client of server `i` alone (it still learns the others from the server).
    pub async fn connect_to(&self, i: usize) -> Result<async_nats::Client, HarnessError> {
        if i >= self.servers.len() {
            return Err(HarnessError::NoSuchServer(i));
        }
        async_nats::ConnectOptions::new()
            .ignore_discovered_servers()
            .connect(self.url(i))
            .await
            .map_err(|e| HarnessError::NotReady(e.to_string()))
    }

    /// Kills server `i` at once (SIGKILL), keeping its data; the others go on.
    pub async fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.servers.get_mut(i).and_then(|s| s.child.take()) {
            let _ = child.kill().await;
        }
    }

    /// Starts server `i` again on its ports and data, and waits until it answers
    /// JetStream API requests. Its streams catch up in the background: check their
    /// replicas (`cluster.replicas[].current` in stream info) where that matters.
    pub async fn restart(&mut self, i: usize) -> Result<(), HarnessError> {
        self.kill(i).await;
        self.launch(i).await?;
        jetstream_ready(&self.url(i)).await
    }

    /// Spawns server `i` and waits until it listens for clients and routes.
    async fn launch(&mut self, i: usize) -> Result<(), HarnessError> {
        let routes = self
            .servers
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, s)| format!("nats://127.0.0.1:{}", s.route_port))
            .collect::<Vec<_>>()
            .join(",");
        let server = self
            .servers
            .get_mut(i)
            .ok_or(HarnessError::NoSuchServer(i))?;
        let client_port = server.client_port.to_string();
        let listen = format!("nats://127.0.0.1:{}", server.route_port);
        let named: [&str; 14] = [
            "-js",
            "-a",
            "127.0.0.1",
            "-p",
            &client_port,
            "-n",
            &server.name,
            "--cluster_name",
            "awaken",
            "--cluster",
            &listen,
            "--routes",
            &routes,
            "-sd",
        ];
        let mut args: Vec<OsString> = named.iter().map(OsString::from).collect();
        args.push(server.dir.path().as_os_str().to_owned());
        let (child, _) = launch(&self.binary, &args, ROUTE_LISTENING).await?;
        server.child = Some(child);
        Ok(())
    }
}

/// `count` distinct ports free on 127.0.0.1 right now (all bound at once, then
/// released for the servers to take).
fn free_ports(count: usize) -> Result<Vec<u16>, HarnessError> {
    let listeners = (0..count)
        .map(|_| TcpListener::bind(("127.0.0.1", 0)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(HarnessError::Spawn)?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(HarnessError::Spawn)
}

/// Polls `$JS.API.INFO` through the server at `url` until it answers without an
/// error (a clustered server answers once a meta leader is elected), or fails
/// after [`READY_WITHIN`].
async fn jetstream_ready(url: &str) -> Result<(), HarnessError> {
    let deadline = Instant::now() + READY_WITHIN;
    let mut client = None;
    let mut last = String::from("no answer yet");
    loop {
        if client.is_none() {
            match async_nats::ConnectOptions::new()
                .connection_timeout(PROBE_TIMEOUT)
                .request_timeout(Some(PROBE_TIMEOUT))
                .ignore_discovered_servers()
                .connect(url)
                .await
            {
                Ok(connected) => client = Some(connected),
                Err(e) => last = e.to_string(),
            }
        }
        if let Some(client) = &client {
            match client.request("$JS.API.INFO", Bytes::new()).await {
                Ok(reply) => match serde_json::from_slice::<serde_json::Value>(&reply.payload) {
                    Ok(info) => match info.get("error") {
                        None => return Ok(()),
                        Some(error) => last = error.to_string(),
                    },
                    Err(e) => last = e.to_string(),
                },
                Err(e) => last = e.to_string(),
            }
        }
        if Instant::now() >= deadline {
            return Err(HarnessError::NotReady(format!(
                "{url}: no JetStream within {READY_WITHIN:?}: {last}"
            )));
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// Runs a single nats-server on `port` (or one it picks) and returns its client port.
async fn spawn(
    dir: &tempfile::TempDir,
    port: Option<u16>,
    config: Option<&Path>,
) -> Result<(Child, u16), HarnessError> {
    let port_arg = port.map_or_else(|| "-1".to_owned(), |p| p.to_string());
    let mut args: Vec<OsString> = ["-js", "-a", "127.0.0.1", "-p", &port_arg, "-sd"]
        .iter()
        .map(OsString::from)
        .collect();
    args.push(dir.path().as_os_str().to_owned());
    if let Some(config) = config {
        args.extend([OsString::from("-c"), config.as_os_str().to_owned()]);
    }
    let (child, line) = launch(Path::new("nats-server"), &args, CLIENT_LISTENING).await?;
    let port =
        client_port(&line).ok_or_else(|| HarnessError::NotReady(format!("no port in {line:?}")))?;
    Ok((child, port))
}

/// Runs nats-server with `args` and waits for the log line containing `ready`,
/// which it returns.
async fn launch(
    binary: &Path,
    args: &[OsString],
    ready: &str,
) -> Result<(Child, String), HarnessError> {
    let mut child = Command::new(binary)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(HarnessError::Spawn)?;
    let stderr = child
        .stderr
        .take()
        .ok_or_else(|| HarnessError::NotReady("no stderr".into()))?;
    let mut lines = BufReader::new(stderr).lines();
    let found = tokio::time::timeout(LISTEN_WITHIN, async {
        let mut last = String::new();
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains(ready) {
                return Ok(line);
            }
            last = line;
        }
        Err(HarnessError::NotReady(format!(
            "exited before listening: {last}"
        )))
    })
    .await
    .map_err(|_| HarnessError::NotReady(format!("not listening within {LISTEN_WITHIN:?}")))??;
    // Keep draining the log so the server never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok((child, found))
}

/// The port of "Listening for client connections on 127.0.0.1:PORT".
fn client_port(line: &str) -> Option<u16> {
    let (_, rest) = line.split_once(CLIENT_LISTENING)?;
    rest.trim().rsplit(':').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::{client_port, free_ports};

    #[test]
    fn reads_the_client_port() {
        let line = "[123] 2026/11/22 12:00:00.000000 [INF] Listening for client connections on 127.0.0.1:41234";
        assert_eq!(client_port(line), Some(41234));
        assert_eq!(client_port("[INF] Starting nats-server"), None);
    }

    #[test]
    fn free_ports_are_distinct() {
        let mut ports = free_ports(6).unwrap_or_default();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 6);
    }
}
