//! `awaken` child processes for benchmarks: started until they print their first
//! line on stdout, stopped with SIGTERM (SIGKILL after a grace period).

use std::collections::VecDeque;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};

use crate::error::{GatewayError, Result};

/// The last lines of a child's stderr kept to explain why it did not start.
const STDERR_TAIL_LINES: usize = 20;

/// How long a child that closed its stdout gets to finish writing its stderr.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// A child process; killed when dropped.
#[derive(Debug)]
pub(crate) struct AwakenChild {
    child: Child,
}

impl AwakenChild {
    /// Starts `exe args` and waits up to `deadline` for its first stdout line,
    /// returned beside it. A child that ends without one is an error that quotes
    /// the end of its stderr (the node's own account of what went wrong).
    pub(crate) async fn start(
        exe: &Path,
        args: &[&str],
        env: &[(&str, &str)],
        deadline: Duration,
    ) -> Result<(Self, String)> {
        let mut child = Command::new(exe)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let not_piped = || GatewayError::Bench("the child's output is not piped".into());
        let stdout = child.stdout.take().ok_or_else(not_piped)?;
        let stderr = tokio::spawn(keep_tail(child.stderr.take().ok_or_else(not_piped)?));
        let mut lines = BufReader::new(stdout).lines();
        let first = tokio::time::timeout(deadline, lines.next_line())
            .await
            .map_err(|_| {
                GatewayError::Bench(format!(
                    "`awaken {}` printed nothing in time",
                    args.join(" ")
                ))
            })??;
        let Some(first) = first else {
            let _ = tokio::time::timeout(EXIT_GRACE, child.wait()).await;
            let tail = tokio::time::timeout(EXIT_GRACE, stderr)
                .await
                .ok()
                .and_then(std::result::Result::ok)
                .unwrap_or_default();
            return Err(GatewayError::Bench(format!(
                "`awaken {}` ended before it was ready; its stderr ends with:\n{}",
                args.join(" "),
                Vec::from(tail).join("\n")
            )));
        };
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

/// `awaken serve` on a free loopback port, embedded defaults and `env`, as a
/// child process.
#[derive(Debug)]
pub(crate) struct ServeChild {
    child: AwakenChild,
    /// `http://<address>`.
    pub(crate) base: String,
}

impl ServeChild {
    /// How long the server may take to listen.
    const START_DEADLINE: Duration = Duration::from_secs(30);

    /// Starts `exe serve` with `env` and waits for its `listening` line.
    pub(crate) async fn start(exe: &Path, env: &[(&str, &str)]) -> Result<Self> {
        let args = ["serve", "--address", "127.0.0.1:0"];
        let (child, line) = AwakenChild::start(exe, &args, env, Self::START_DEADLINE).await?;
        let not_started = || GatewayError::Bench(format!("awaken serve did not start: {line:?}"));
        let listening: serde_json::Value =
            serde_json::from_str(&line).map_err(|_| not_started())?;
        let address = listening["address"].as_str().ok_or_else(not_started)?;
        Ok(Self {
            base: format!("http://{address}"),
            child,
        })
    }

    /// The process id, while it runs.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.pid()
    }

    /// SIGTERM, then SIGKILL if it does not stop within its shutdown deadline.
    pub(crate) async fn stop(self) {
        self.child.stop(Duration::from_secs(35)).await;
    }
}

/// Reads `stderr` to its end (so the child never blocks on a full pipe), keeping
/// the last lines.
async fn keep_tail(stderr: impl AsyncRead + Unpin) -> VecDeque<String> {
    let mut tail = VecDeque::with_capacity(STDERR_TAIL_LINES);
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if tail.len() == STDERR_TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(line);
    }
    tail
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const DEADLINE: Duration = Duration::from_secs(10);

    #[tokio::test]
    async fn a_child_that_ends_unready_is_explained_by_its_stderr() {
        let script =
            "for i in $(seq 1 30); do echo noise $i >&2; done; echo 'error: no schema' >&2; exit 3";
        let error = AwakenChild::start(Path::new("sh"), &["-c", script], &[], DEADLINE)
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains("ended before it was ready"), "{error}");
        assert!(error.ends_with("error: no schema"), "{error}");
        assert!(
            error.contains("noise 30") && !error.contains("noise 11\n"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn the_first_stdout_line_is_handed_back() {
        let script = "echo starting >&2; echo '{\"event\":\"ready\"}'; exec sleep 30";
        let (child, first) = AwakenChild::start(Path::new("sh"), &["-c", script], &[], DEADLINE)
            .await
            .unwrap();
        assert_eq!(first, r#"{"event":"ready"}"#);
        assert!(child.pid().is_some());
        child.stop(DEADLINE).await;
    }
}
