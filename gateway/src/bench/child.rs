//! `awaken` child processes for benchmarks: started until they print their first
//! line on stdout, stopped with SIGTERM (SIGKILL after a grace period).

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::error::{GatewayError, Result};

/// A child process; killed when dropped.
#[derive(Debug)]
pub(crate) struct AwakenChild {
    child: Child,
}

impl AwakenChild {
    /// Starts `exe args` and waits up to `deadline` for its first stdout line,
    /// returned beside it (empty when the process ended without one).
    pub(crate) async fn start(
        exe: &Path,
        args: &[&str],
        deadline: Duration,
    ) -> Result<(Self, String)> {
        let mut child = Command::new(exe)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| GatewayError::Bench("the child's stdout is not piped".into()))?;
        let mut lines = BufReader::new(stdout).lines();
        let first = tokio::time::timeout(deadline, lines.next_line())
            .await
            .map_err(|_| {
                GatewayError::Bench(format!(
                    "`awaken {}` printed nothing in time",
                    args.join(" ")
                ))
            })??
            .unwrap_or_default();
        Ok((Self { child }, first))
    }

    /// The process id, while it runs.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// SIGKILL, at once.
    pub(crate) async fn kill(&mut self) -> std::io::Result<()> {
        self.child.kill().await
    }

    /// SIGTERM (a graceful stop or drain), then SIGKILL if it takes over `grace`.
    pub(crate) async fn stop(mut self, grace: Duration) {
        if let Some(pid) = self.child.id() {
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .await;
        }
        if tokio::time::timeout(grace, self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}
