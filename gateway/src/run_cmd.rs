//! `awaken run`: one run on the embedded runtime, streamed to the terminal, with
//! approvals asked for on the terminal (or answered by a flag).
//!
//! The command starts a run, prints its events as they stream (see [`printer`]), and
//! whenever the run suspends for a decision asks `Approve? [y/N/a(lways)]`:
//!
//! | answer | decision sent |
//! |---|---|
//! | `y`, `yes` | resume with `{"approved": true}` |
//! | `a`, `always` | resume with `{"approved": true, "always_allow": true}` |
//! | anything else, an empty line, end of input | cancel |
//!
//! It then streams the resumed run, and repeats until the run ends.

pub mod printer;

use std::io::{BufRead, IsTerminal};
use std::sync::{Arc, Mutex, PoisonError};

use awaken_actors::clock::now_ms;
use awaken_actors::contract::{
    Message, ResumeDecisionAction, RunWaitingTicket, TerminationReason, ToolCallResume,
};
use awaken_actors::runtime::{AgentRunResult, AgentRuntime};
use awaken_actors::thread::RunRequest;
use awaken_actors::{AgentId, DecisionId, ThreadId};
use serde_json::json;

pub use printer::{EventPrinter, Terminal};

use crate::demo;
use crate::error::{GatewayError, Result};

/// The approval prompt.
pub const PROMPT: &str = "Approve? [y/N/a(lways)] ";

/// What `awaken run` was asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOptions {
    /// The agent to run.
    pub agent: String,
    /// The thread to run on; a new one when `None`.
    pub thread: Option<String>,
    /// The user message.
    pub message: String,
}

/// Where approval answers come from.
pub enum Approver {
    /// Ask on the terminal and read one line per question from `input`.
    Ask {
        /// Where answers are read from.
        input: Box<dyn BufRead + Send>,
        /// Whether the input is a terminal that already echoes what is typed.
        echoes: bool,
    },
    /// Approve every call without asking (`--approve`).
    Approve,
    /// Refuse every call without asking (`--deny`).
    Deny,
}

impl std::fmt::Debug for Approver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Ask { .. } => "Ask",
            Self::Approve => "Approve",
            Self::Deny => "Deny",
        })
    }
}

impl Approver {
    /// Asks on the terminal, reading answers from standard input.
    pub fn stdin() -> Self {
        let stdin = std::io::stdin();
        Self::Ask {
            echoes: stdin.is_terminal(),
            input: Box::new(std::io::BufReader::new(stdin)),
        }
    }
}

/// A human's answer to an approval prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Run this call.
    Yes,
    /// Do not run it.
    No,
    /// Run it, and later calls of the same tool on this thread without asking.
    Always,
}

impl Answer {
    /// Reads a typed answer; anything but yes or always is no.
    pub fn parse(text: &str) -> Self {
        match text.trim().to_ascii_lowercase().as_str() {
            "y" | "yes" => Self::Yes,
            "a" | "always" => Self::Always,
            _ => Self::No,
        }
    }

    /// The decision this answer sends.
    pub fn decision(self) -> ToolCallResume {
        let (action, result, reason) = match self {
            Self::Yes => (
                ResumeDecisionAction::Resume,
                json!({"approved": true}),
                None,
            ),
            Self::Always => (
                ResumeDecisionAction::Resume,
                json!({"approved": true, "always_allow": true}),
                None,
            ),
            Self::No => (
                ResumeDecisionAction::Cancel,
                serde_json::Value::Null,
                Some("denied on the terminal".to_owned()),
            ),
        };
        ToolCallResume {
            decision_id: DecisionId::generate(),
            action,
            result,
            reason,
            updated_at: now_ms(),
            trace: None,
        }
    }

    fn echo(self) -> &'static str {
        match self {
            Self::Yes => "y",
            Self::No => "n",
            Self::Always => "a",
        }
    }
}

/// Runs `options` on `runtime`, printing to `terminal`; returns how the run ended.
///
/// Fails with [`GatewayError::UnknownAgent`] before anything runs when the agent does
/// not exist.
pub async fn run(
    runtime: &AgentRuntime,
    options: RunOptions,
    terminal: Arc<Terminal>,
    approver: Approver,
) -> Result<AgentRunResult> {
    let agent = agent_id(runtime, &options.agent)?;
    let thread_id = match &options.thread {
        Some(id) => ThreadId::new(id.clone()).map_err(|source| GatewayError::InvalidId {
            what: "thread",
            value: id.clone(),
            source,
        })?,
        None => ThreadId::generate(),
    };
    let printer = Arc::new(EventPrinter::new(Arc::clone(&terminal)));
    let request = RunRequest::new(thread_id.clone(), vec![Message::user(options.message)])
        .with_agent_id(agent);
    let mut outcome = runtime.run(request, printer.clone()).await?;
    let approver = Arc::new(Mutex::new(approver));
    while outcome.termination == TerminationReason::Suspended {
        let tickets = waiting_tickets(runtime, &thread_id).await?;
        let Some(ticket) = tickets.first() else {
            return Err(GatewayError::Unexpected(
                "the run is suspended but lists no waiting tool call".into(),
            ));
        };
        if tickets.len() > 1 {
            terminal.line(&format!(
                "⏸ {} calls wait; deciding {} ({})",
                tickets.len(),
                ticket.tool_name,
                ticket.tool_call_id
            ))?;
        }
        let answer = ask(&terminal, &approver).await?;
        outcome = runtime
            .decide_and_wait(
                &thread_id,
                ticket.tool_call_id.clone(),
                answer.decision(),
                Some(printer.clone()),
            )
            .await?;
    }
    terminal.finish_line()?;
    Ok(outcome)
}

/// The agent id, if the runtime knows it.
fn agent_id(runtime: &AgentRuntime, agent: &str) -> Result<AgentId> {
    if !runtime.registries().agents.contains(agent) {
        return Err(GatewayError::UnknownAgent {
            agent: agent.to_owned(),
            available: demo::agent_ids(runtime).join(", "),
        });
    }
    AgentId::new(agent).map_err(|source| GatewayError::InvalidId {
        what: "agent",
        value: agent.to_owned(),
        source,
    })
}

async fn waiting_tickets(
    runtime: &AgentRuntime,
    thread_id: &ThreadId,
) -> Result<Vec<RunWaitingTicket>> {
    let run = runtime.active_run(thread_id).await?;
    Ok(run
        .and_then(|record| record.waiting)
        .map(|waiting| waiting.tickets)
        .unwrap_or_default())
}

/// How an answer was obtained, which decides what the transcript shows.
enum Source {
    /// Given by a flag.
    Flag,
    /// Typed on a terminal that echoed it.
    Echoed,
    /// Read from a pipe or file.
    Piped,
    /// The input ended.
    EndOfInput,
}

/// Prints the prompt and gets an answer: from the approver's flag, or one line of
/// its input (read off the async workers, since terminal reads block).
async fn ask(terminal: &Terminal, approver: &Arc<Mutex<Approver>>) -> Result<Answer> {
    terminal.prompt(PROMPT)?;
    let shared = Arc::clone(approver);
    let (answer, source) = tokio::task::spawn_blocking(move || {
        let mut approver = shared.lock().unwrap_or_else(PoisonError::into_inner);
        match &mut *approver {
            Approver::Approve => Ok((Answer::Yes, Source::Flag)),
            Approver::Deny => Ok((Answer::No, Source::Flag)),
            Approver::Ask { input, echoes } => {
                let mut line = String::new();
                let source = match input.read_line(&mut line)? {
                    0 => Source::EndOfInput,
                    _ if *echoes => Source::Echoed,
                    _ => Source::Piped,
                };
                Ok::<_, std::io::Error>((Answer::parse(&line), source))
            }
        }
    })
    .await
    .map_err(|e| GatewayError::Io(std::io::Error::other(e)))??;
    match source {
        // The terminal echoed the typed line and its newline.
        Source::Echoed => terminal.line_ended(),
        Source::Piped => terminal.inline(&format!("{}\n", answer.echo()))?,
        Source::Flag => terminal.inline(&format!("{} (flag)\n", answer.echo()))?,
        Source::EndOfInput => terminal.inline(&format!("{} (end of input)\n", answer.echo()))?,
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_default_to_no() {
        assert_eq!(Answer::parse("y\n"), Answer::Yes);
        assert_eq!(Answer::parse(" YES "), Answer::Yes);
        assert_eq!(Answer::parse("a"), Answer::Always);
        assert_eq!(Answer::parse(""), Answer::No);
        assert_eq!(Answer::parse("n"), Answer::No);
        assert_eq!(Answer::parse("maybe"), Answer::No);
    }

    #[test]
    fn decisions_carry_the_approval_payload() {
        let always = Answer::Always.decision();
        assert_eq!(always.action, ResumeDecisionAction::Resume);
        assert_eq!(
            always.result,
            json!({"approved": true, "always_allow": true})
        );
        let no = Answer::No.decision();
        assert_eq!(no.action, ResumeDecisionAction::Cancel);
        assert_ne!(no.decision_id, Answer::No.decision().decision_id);
    }
}
