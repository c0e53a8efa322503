//! `awaken run`.

use std::sync::Arc;

use awaken_actors::contract::TerminationReason;
use awaken_actors::thread::ThreadConfig;
use awaken_cluster::RunControl;
use awaken_cluster::local::{LocalNode, LocalNodeConfig};
use clap::Args;

use crate::demo;
use crate::error::{GatewayError, Result};
use crate::run_cmd::{self, Approver, RunOptions, Terminal};

/// Flags of `awaken run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// The agent to run (the embedded runtime has `demo`, `bench`, `bench-hitl`,
    /// `bench-text`).
    #[arg(long, value_name = "ID")]
    pub agent: String,
    /// The thread to run on; a new one by default. Threads live in memory, as long
    /// as the process.
    #[arg(long, value_name = "ID")]
    pub thread: Option<String>,
    /// Approve every call that asks for approval, without prompting.
    #[arg(long, conflicts_with = "deny")]
    pub approve: bool,
    /// Refuse every call that asks for approval, without prompting.
    #[arg(long)]
    pub deny: bool,
    /// The user message.
    #[arg(value_name = "MESSAGE")]
    pub message: String,
}

/// Runs the command on a fresh embedded single node; 1 when the run ended in an error.
pub(super) async fn execute(args: RunArgs) -> Result<u8> {
    let approver = if args.approve {
        Approver::Approve
    } else if args.deny {
        Approver::Deny
    } else {
        Approver::stdin()
    };
    let options = RunOptions {
        agent: args.agent,
        thread: args.thread,
        message: args.message,
    };
    // A node around the runtime, so delegate agents can start their child runs.
    let builder = demo::builder(
        ThreadConfig::default(),
        Arc::new(demo::FakeFiles::with_demo_files()),
        demo::Journal::default(),
    )?;
    let node = LocalNode::start(builder, LocalNodeConfig::default())
        .await
        .map_err(|e| GatewayError::Cluster(e.to_string()))?;
    let outcome = run_cmd::run(
        node.runtime(),
        options,
        Arc::new(Terminal::stdout()),
        approver,
    )
    .await;
    node.shutdown().await;
    Ok(match outcome?.termination {
        TerminationReason::Error(_) => 1,
        _ => 0,
    })
}
