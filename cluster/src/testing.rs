//! Throwaway `nats-server` processes for tests (feature `testing`).
//!
//! Each server runs JetStream on 127.0.0.1 with a port the OS picks and a store
//! directory of its own, so tests can run in parallel, kill a server, and restart it
//! on the same port and data.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Why a test server could not start.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// `nats-server` is not installed or could not be run.
    #[error("cannot run nats-server (install it with scripts/setup.sh): {0}")]
    Spawn(std::io::Error),
    /// The server did not report its client port in time.
    #[error("nats-server did not start: {0}")]
    NotReady(String),
}

/// A running `nats-server -js`, killed when dropped.
#[derive(Debug)]
pub struct NatsServer {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
}

impl NatsServer {
    /// Starts a server on a free port with a fresh store directory.
    pub async fn start() -> Result<Self, HarnessError> {
        let dir = tempfile::tempdir().map_err(HarnessError::Spawn)?;
        let (child, port) = spawn(&dir, None).await?;
        Ok(Self {
            child: Some(child),
            port,
            dir,
        })
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
        let (child, _) = spawn(&self.dir, Some(self.port)).await?;
        self.child = Some(child);
        Ok(())
    }
}

/// Runs nats-server and waits for the log line naming its client port.
async fn spawn(dir: &tempfile::TempDir, port: Option<u16>) -> Result<(Child, u16), HarnessError> {
    let port_arg = port.map_or_else(|| "-1".to_owned(), |p| p.to_string());
    let mut child = Command::new("nats-server")
        .args(["-js", "-a", "127.0.0.1", "-p", &port_arg, "-sd"])
        .arg(dir.path())
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
    let found = tokio::time::timeout(Duration::from_secs(15), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(port) = client_port(&line) {
                return Ok(port);
            }
        }
        Err(HarnessError::NotReady("exited before listening".into()))
    })
    .await
    .map_err(|_| HarnessError::NotReady("no client port within 15 s".into()))??;
    // Keep draining the log so the server never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok((child, found))
}

/// The port of "Listening for client connections on 127.0.0.1:PORT".
fn client_port(line: &str) -> Option<u16> {
    let (_, rest) = line.split_once("Listening for client connections on ")?;
    rest.trim().rsplit(':').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::client_port;

    #[test]
    fn reads_the_client_port() {
        let line = "[123] 2026/11/22 12:00:00.000000 [INF] Listening for client connections on 127.0.0.1:41234";
        assert_eq!(client_port(line), Some(41234));
        assert_eq!(client_port("[INF] Starting nats-server"), None);
    }
}
