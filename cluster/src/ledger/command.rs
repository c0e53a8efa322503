//! The ledger's commands: one per changing [`MailboxStore`] operation, carrying
//! everything applying it needs — the time, the rules from the configuration, the
//! claim token — so that every node applying the same command to the same state
//! reaches the same state and the same answer.
//!
//! [`MailboxStore`]: awaken_actors::mailbox::MailboxStore

use awaken_actors::contract::{
    MailboxInterrupt, RunDispatch, RunDispatchResult, RunDispatchStatus,
};
use awaken_actors::ids::{DispatchId, ThreadId};
use awaken_actors::mailbox::{GcRules, MailboxConfig, MailboxError, MailboxState};
use awaken_actors::thread::RunRequest;
use serde::{Deserialize, Serialize};

/// The configuration a command's outcome depends on, taken from the issuing node:
/// nodes with different settings still agree on every outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Rules {
    /// Attempts given to a dispatch enqueued with `max_attempts` 0.
    pub(crate) default_max_attempts: u32,
    /// Back-off before the first retry, ms.
    pub(crate) retry_delay_ms: u64,
    /// Longest back-off, ms.
    pub(crate) max_retry_delay_ms: u64,
}

impl Rules {
    /// The rules of `config`.
    pub(crate) fn of(config: &MailboxConfig) -> Self {
        Self {
            default_max_attempts: config.default_max_attempts,
            retry_delay_ms: config.default_retry_delay_ms,
            max_retry_delay_ms: config.max_retry_delay_ms,
        }
    }

    fn config(self) -> MailboxConfig {
        MailboxConfig {
            default_max_attempts: self.default_max_attempts,
            default_retry_delay_ms: self.retry_delay_ms,
            max_retry_delay_ms: self.max_retry_delay_ms,
            ..MailboxConfig::default()
        }
    }
}

/// A change to the mailbox, as the ledger stream carries it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Command {
    Enqueue {
        dispatch: Box<RunDispatch>,
        rules: Rules,
        now_ms: u64,
        /// The run's input, when it travels with its dispatch rather than in the
        /// KV inbox (decision 0078); absent in what earlier versions wrote.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        input: Option<Box<RunRequest>>,
    },
    /// Claims up to `limit`; the first claim takes `token`, the n-th `token.n`.
    Claim {
        thread_id: ThreadId,
        consumer: String,
        limit: u32,
        lease_ms: u64,
        now_ms: u64,
        token: String,
    },
    ClaimDispatch {
        dispatch_id: DispatchId,
        consumer: String,
        lease_ms: u64,
        now_ms: u64,
        token: String,
    },
    Ack {
        dispatch_id: DispatchId,
        claim_token: String,
        now_ms: u64,
    },
    Nack {
        dispatch_id: DispatchId,
        claim_token: String,
        error: String,
        rules: Rules,
        now_ms: u64,
    },
    DeadLetter {
        dispatch_id: DispatchId,
        claim_token: String,
        error: String,
        now_ms: u64,
    },
    Cancel {
        dispatch_id: DispatchId,
        now_ms: u64,
    },
    ExtendLease {
        dispatch_id: DispatchId,
        claim_token: String,
        lease_ms: u64,
        now_ms: u64,
    },
    Interrupt {
        thread_id: ThreadId,
        now_ms: u64,
    },
    SupersedeClaimed {
        dispatch_id: DispatchId,
        now_ms: u64,
    },
    RecordStart {
        dispatch_id: DispatchId,
        dispatch_instance_id: String,
        now_ms: u64,
    },
    RecordResult {
        dispatch_id: DispatchId,
        result: RunDispatchResult,
        now_ms: u64,
    },
    ReclaimExpired {
        rules: Rules,
        now_ms: u64,
    },
    Gc {
        ttl_ms: u64,
        now_ms: u64,
        /// Marks of settled dispatches older than this go (decision 0089);
        /// absent in commands of earlier nodes, which kept no marks: `ttl_ms`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dedupe_window_ms: Option<u64>,
        /// Beyond this many marks the oldest go; absent: no count limit.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_settled: Option<u64>,
    },
}

/// What applying a command answered its caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    Dispatch(RunDispatch),
    Dispatches(Vec<RunDispatch>),
    Interrupt(MailboxInterrupt),
    Collected(usize),
}

/// A command's answer; a refusal changed nothing.
pub(crate) type Outcome = Result<Answer, MailboxError>;

/// The claim token of the `index`-th dispatch one claim takes.
fn nth_token(token: &str, index: usize) -> String {
    if index == 0 {
        token.to_owned()
    } else {
        format!("{token}.{index}")
    }
}

impl Command {
    /// Takes the run input an enqueue carries, leaving the command without it.
    pub(crate) fn take_input(&mut self) -> Option<Box<RunRequest>> {
        match self {
            Self::Enqueue { input, .. } => input.take(),
            _ => None,
        }
    }

    /// Applies the command to `state`; the answer, and the threads that got work
    /// a consumer may claim (for queue watches).
    pub(crate) fn apply(self, state: &mut MailboxState) -> (Outcome, Vec<ThreadId>) {
        let queued = |dispatch: &RunDispatch| {
            if dispatch.status == RunDispatchStatus::Queued {
                vec![dispatch.thread_id.clone()]
            } else {
                Vec::new()
            }
        };
        let one =
            |result: Result<RunDispatch, MailboxError>| (result.map(Answer::Dispatch), Vec::new());
        match self {
            Self::Enqueue {
                dispatch,
                rules,
                now_ms,
                input: _,
            } => match state.enqueue(&rules.config(), *dispatch, now_ms) {
                Ok(stored) => {
                    let woken = queued(&stored);
                    (Ok(Answer::Dispatch(stored)), woken)
                }
                Err(refused) => (Err(refused), Vec::new()),
            },
            Self::Claim {
                thread_id,
                consumer,
                limit,
                lease_ms,
                now_ms,
                token,
            } => {
                let mut index = 0;
                let claimed = state.claim(
                    &thread_id,
                    &consumer,
                    usize::try_from(limit).unwrap_or(usize::MAX),
                    lease_ms,
                    now_ms,
                    || {
                        let next = nth_token(&token, index);
                        index += 1;
                        next
                    },
                );
                (Ok(Answer::Dispatches(claimed)), Vec::new())
            }
            Self::ClaimDispatch {
                dispatch_id,
                consumer,
                lease_ms,
                now_ms,
                token,
            } => one(state.claim_dispatch(&dispatch_id, &consumer, lease_ms, now_ms, token)),
            Self::Ack {
                dispatch_id,
                claim_token,
                now_ms,
            } => one(state.ack(&dispatch_id, &claim_token, now_ms)),
            Self::Nack {
                dispatch_id,
                claim_token,
                error,
                rules,
                now_ms,
            } => match state.nack(&rules.config(), &dispatch_id, &claim_token, &error, now_ms) {
                Ok(dispatch) => {
                    let woken = queued(&dispatch);
                    (Ok(Answer::Dispatch(dispatch)), woken)
                }
                Err(refused) => (Err(refused), Vec::new()),
            },
            Self::DeadLetter {
                dispatch_id,
                claim_token,
                error,
                now_ms,
            } => one(state.dead_letter(&dispatch_id, &claim_token, &error, now_ms)),
            Self::Cancel {
                dispatch_id,
                now_ms,
            } => one(state.cancel(&dispatch_id, now_ms)),
            Self::ExtendLease {
                dispatch_id,
                claim_token,
                lease_ms,
                now_ms,
            } => one(state.extend_lease(&dispatch_id, &claim_token, lease_ms, now_ms)),
            Self::Interrupt { thread_id, now_ms } => (
                Ok(Answer::Interrupt(state.interrupt(&thread_id, now_ms))),
                Vec::new(),
            ),
            Self::SupersedeClaimed {
                dispatch_id,
                now_ms,
            } => one(state.supersede_claimed(&dispatch_id, now_ms)),
            Self::RecordStart {
                dispatch_id,
                dispatch_instance_id,
                now_ms,
            } => one(state.record_dispatch_start(&dispatch_id, &dispatch_instance_id, now_ms)),
            Self::RecordResult {
                dispatch_id,
                result,
                now_ms,
            } => one(state.record_run_result(&dispatch_id, result, now_ms)),
            Self::ReclaimExpired { rules, now_ms } => {
                let reclaimed = state.reclaim_expired_leases(&rules.config(), now_ms);
                let woken = reclaimed.iter().flat_map(queued).collect();
                (Ok(Answer::Dispatches(reclaimed)), woken)
            }
            Self::Gc {
                ttl_ms,
                now_ms,
                dedupe_window_ms,
                max_settled,
            } => {
                let rules = GcRules {
                    ttl_ms,
                    dedupe_window_ms: dedupe_window_ms.unwrap_or(ttl_ms),
                    max_settled: max_settled
                        .map_or(usize::MAX, |max| usize::try_from(max).unwrap_or(usize::MAX)),
                };
                (Ok(Answer::Collected(state.gc(&rules, now_ms))), Vec::new())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use awaken_actors::ids::RunId;

    use super::*;

    fn enqueue(thread: &str, now_ms: u64) -> Command {
        Command::Enqueue {
            dispatch: Box::new(RunDispatch::new(
                ThreadId::new(thread).unwrap(),
                RunId::new(format!("run-{thread}")).unwrap(),
                0,
                now_ms,
            )),
            rules: Rules::of(&MailboxConfig::default()),
            now_ms,
            input: None,
        }
    }

    fn claim(thread: &str, limit: u32) -> Command {
        Command::Claim {
            thread_id: ThreadId::new(thread).unwrap(),
            consumer: "node-a".into(),
            limit,
            lease_ms: 1_000,
            now_ms: 10,
            token: "tok".into(),
        }
    }

    /// An enqueue as versions before carried inputs (decision 0078) decode it.
    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum EarlierCommand {
        Enqueue {
            dispatch: Box<RunDispatch>,
            now_ms: u64,
        },
    }

    #[test]
    fn earlier_versions_read_an_enqueue_that_carries_an_input() {
        let Command::Enqueue {
            dispatch, now_ms, ..
        } = enqueue("t", 7)
        else {
            unreachable!("an enqueue");
        };
        let carrying = Command::Enqueue {
            dispatch: dispatch.clone(),
            rules: Rules::of(&MailboxConfig::default()),
            now_ms,
            input: Some(Box::new(RunRequest::new(
                ThreadId::new("t").unwrap(),
                Vec::new(),
            ))),
        };
        let encoded = awaken_actors::codec::encode(&carrying).unwrap();
        let EarlierCommand::Enqueue {
            dispatch: read,
            now_ms: read_at,
        } = awaken_actors::codec::decode(&encoded).unwrap();
        assert_eq!((read, read_at), (dispatch, 7));
    }

    #[test]
    fn replicas_applying_the_same_commands_agree() {
        let commands = [
            enqueue("t1", 1),
            enqueue("t1", 2),
            enqueue("t2", 3),
            claim("t1", 2),
            Command::ReclaimExpired {
                rules: Rules::of(&MailboxConfig::default()),
                now_ms: 5_000,
            },
        ];
        let run = || {
            let mut state = MailboxState::default();
            let answers: Vec<Outcome> = commands
                .iter()
                .cloned()
                .map(|command| command.apply(&mut state).0)
                .collect();
            let stored: Vec<RunDispatch> = state.sequenced().map(|(_, d)| d.clone()).collect();
            (answers, stored)
        };
        assert_eq!(run(), run());
    }

    #[test]
    fn one_claim_of_several_gives_each_its_own_token() {
        let mut state = MailboxState::default();
        assert!(enqueue("t", 1).apply(&mut state).0.is_ok());
        let mut second = enqueue("t", 2);
        if let Command::Enqueue { dispatch, .. } = &mut second {
            dispatch.dispatch_id = DispatchId::new("second").unwrap();
        }
        assert!(second.apply(&mut state).0.is_ok());
        let (Ok(Answer::Dispatches(claimed)), _) = claim("t", 5).apply(&mut state) else {
            panic!("the claim was refused");
        };
        let tokens: Vec<_> = claimed
            .iter()
            .map(|d| d.claim_token.clone().unwrap())
            .collect();
        assert_eq!(tokens, ["tok", "tok.1"]);
    }

    #[test]
    fn enqueue_and_retry_wake_the_thread_and_a_refusal_wakes_nothing() {
        let mut state = MailboxState::default();
        let command = enqueue("t", 1);
        let (answer, woken) = command.clone().apply(&mut state);
        assert!(answer.is_ok());
        assert_eq!(woken, [ThreadId::new("t").unwrap()]);
        let (refused, woken) = command.apply(&mut state);
        assert!(matches!(refused, Err(MailboxError::Duplicate(_))));
        assert!(woken.is_empty());
    }
}
