//! Golden round-trip tests of the wire contract (`docs/cluster.md`).
//!
//! Every payload the cluster puts on NATS (thread calls and their frames, run events,
//! member records, shard leases, the mailbox ledger's batches and snapshots, decisions, rejections, approval records, the run
//! inbox) is pinned by a sample in `cluster/golden/<name>.json`: the sample's
//! MessagePack encoding, transcoded to JSON, must equal the file, and the file,
//! transcoded back to MessagePack, must decode to the sample. A changed field name,
//! tag or shape therefore fails here before it breaks a node of another version.
//! The file's keys may come in any order, so decoding also proves that field order
//! on the wire does not matter (other publishers, e.g. nats-py, choose their own).
//!
//! After an intended change, rewrite the files with
//! `UPDATE_GOLDEN=1 cargo nextest run -p awaken-cluster --lib golden`, review the
//! diff and update `docs/cluster.md` with it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Debug;
use std::path::PathBuf;

use awaken_actors::contract::{
    AgentEvent, ContentBlock, Message, ResumeDecisionAction, Role, RunDispatch, RunDispatchResult,
    RunDispatchStatus, RunOrigin, RunStatus, StreamEvent, TerminationReason, ToolCallResume,
    Visibility,
};
use awaken_actors::ids::{AgentId, DecisionId, DispatchId, MessageId, RunId, ThreadId, ToolCallId};
use awaken_actors::mailbox::{Mark, MarkDigest};
use awaken_actors::thread::{ControlError, RunRequest, RunSummary, ThreadStatus};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::codec;
use crate::decisions::{Decision, DecisionPayload, Delivery, Rejection};
use crate::ledger::command::{Command, Rules};
use crate::ledger::wire::{Batch, Epoch, Head, Op, Part, Stored, splice_batch, splice_part};
use crate::membership::{MemberRecord, NodeId};
use crate::routing::{CallFrame, CallOutcome, ThreadCall};
use crate::shards::ShardLease;

const UPDATE_HINT: &str = "UPDATE_GOLDEN=1 cargo nextest run -p awaken-cluster --lib golden";

fn golden_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("golden")
        .join(format!("{name}.json"))
}

fn updating() -> bool {
    std::env::var("UPDATE_GOLDEN").is_ok_and(|value| value == "1")
}

/// MessagePack as `codec::decode` reads it, into JSON.
fn msgpack_to_json(bytes: &[u8]) -> Value {
    awaken_actors::codec::decode(bytes).expect("the encoding transcodes to JSON")
}

/// JSON as `codec::encode` writes MessagePack.
fn json_to_msgpack(value: &Value) -> Vec<u8> {
    awaken_actors::codec::encode(value).expect("JSON transcodes to MessagePack")
}

/// The golden file `name`, as JSON.
fn read_golden(name: &str) -> Value {
    let path = golden_path(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; create it with `{UPDATE_HINT}`", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: not JSON: {e}", path.display()))
}

/// Pins `sample`'s wire form to `cluster/golden/<name>.json`, both ways.
fn pin<T: Serialize + DeserializeOwned + PartialEq + Debug>(name: &str, sample: &T) {
    let path = golden_path(name);
    let encoded = codec::encode(sample).unwrap_or_else(|e| panic!("{name}: cannot encode: {e}"));
    let actual = msgpack_to_json(&encoded);
    if updating() {
        let mut text = serde_json::to_string_pretty(&actual).unwrap();
        text.push('\n');
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
    }
    let golden = read_golden(name);
    assert_eq!(
        actual,
        golden,
        "{name}: the wire form differs from {}; if the change is intended, run \
         `{UPDATE_HINT}` and update docs/cluster.md",
        path.display()
    );
    let decoded: T = codec::decode(&json_to_msgpack(&golden))
        .unwrap_or_else(|e| panic!("{}: does not decode: {e}", path.display()));
    assert_eq!(
        &decoded, sample,
        "{name}: the golden file decodes to another value"
    );
}

/// Like [`pin`], for payloads that also travel as JSON (`serde_json`): the JSON
/// encoding must be the golden file too, and the file must read back from JSON.
fn pin_json<T: Serialize + DeserializeOwned + PartialEq + Debug>(name: &str, sample: &T) {
    pin(name, sample);
    let golden = read_golden(name);
    assert_eq!(
        serde_json::to_value(sample).unwrap(),
        golden,
        "{name}: the JSON encoding differs from the MessagePack one"
    );
    let decoded: T = serde_json::from_value(golden).unwrap();
    assert_eq!(
        &decoded, sample,
        "{name}: the golden file reads back as another value"
    );
}

// Fixed ids and times: the samples must not change from run to run.

const AT_MS: u64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

fn thread() -> ThreadId {
    ThreadId::new("thread-1").unwrap()
}

fn run() -> RunId {
    RunId::new("run-1").unwrap()
}

fn call() -> ToolCallId {
    ToolCallId::new("call-1").unwrap()
}

fn node() -> NodeId {
    NodeId::new("node-a").unwrap()
}

fn dispatch_id() -> DispatchId {
    DispatchId::new("dispatch-1").unwrap()
}

fn decision() -> Decision {
    Decision {
        thread_id: thread(),
        call_id: call(),
        run_id: Some(run()),
        resume: ToolCallResume {
            decision_id: DecisionId::new("decision-1").unwrap(),
            action: ResumeDecisionAction::Resume,
            result: json!({"approved": true}),
            reason: Some("looks fine".into()),
            updated_at: AT_MS,
            trace: None,
        },
    }
}

fn text_delta() -> StreamEvent {
    StreamEvent::new(
        3,
        "2026-01-01T00:00:00.250Z",
        AgentEvent::TextDelta {
            delta: "Hello".into(),
        },
    )
}

fn run_finish() -> StreamEvent {
    StreamEvent::new(
        4,
        "2026-01-01T00:00:00.500Z",
        AgentEvent::RunFinish {
            thread_id: thread(),
            run_id: run(),
            result: Some(json!({"response": "Hello"})),
            termination: TerminationReason::NaturalEnd,
        },
    )
}

fn done(outcome: CallOutcome) -> CallFrame {
    CallFrame::Done { outcome }
}

#[test]
fn thread_calls_keep_their_wire_form() {
    pin(
        "thread_call.status",
        &ThreadCall::Status {
            thread_id: thread(),
        },
    );
    pin(
        "thread_call.cancel",
        &ThreadCall::Cancel {
            thread_id: thread(),
            run_id: None,
        },
    );
    pin(
        "thread_call.cancel_run",
        &ThreadCall::Cancel {
            thread_id: thread(),
            run_id: Some(run()),
        },
    );
    pin(
        "thread_call.interrupt",
        &ThreadCall::Interrupt {
            thread_id: thread(),
        },
    );
    pin(
        "thread_call.decide",
        &ThreadCall::Decide {
            decision: decision(),
        },
    );
    pin(
        "thread_call.replay",
        &ThreadCall::Replay {
            thread_id: thread(),
            run_id: run(),
            after_seq: None,
        },
    );
    pin(
        "thread_call.replay_after",
        &ThreadCall::Replay {
            thread_id: thread(),
            run_id: run(),
            after_seq: Some(2),
        },
    );
}

#[test]
fn call_frames_keep_their_wire_form() {
    pin("call_frame.working", &CallFrame::Working);
    pin(
        "call_frame.events",
        &CallFrame::Events {
            events: vec![
                std::sync::Arc::new(text_delta()),
                std::sync::Arc::new(run_finish()),
            ],
        },
    );
    pin(
        "call_frame.done.status",
        &done(CallOutcome::Status(ThreadStatus {
            thread_id: thread(),
            run: Some(RunSummary {
                run_id: run(),
                status: RunStatus::Waiting,
                running_tools: 0,
                inferring: false,
            }),
            busy: false,
            queued: 1,
        })),
    );
    pin(
        "call_frame.done.status_idle",
        &done(CallOutcome::Status(ThreadStatus {
            thread_id: thread(),
            run: None,
            busy: false,
            queued: 0,
        })),
    );
    pin(
        "call_frame.done.cancelled",
        &done(CallOutcome::Cancelled(run())),
    );
    pin(
        "call_frame.done.interrupted",
        &done(CallOutcome::Interrupted(Some(run()))),
    );
    pin(
        "call_frame.done.interrupted_idle",
        &done(CallOutcome::Interrupted(None)),
    );
    pin(
        "call_frame.done.delivered_applied",
        &done(CallOutcome::Delivered(Delivery::Applied {
            duplicate: false,
        })),
    );
    pin(
        "call_frame.done.delivered_refused",
        &done(CallOutcome::Delivered(Delivery::Refused(
            "tool call `call-1` not found in the active run".into(),
        ))),
    );
    pin(
        "call_frame.done.delivered_retry",
        &done(CallOutcome::Delivered(Delivery::Retry(
            "the thread is moving".into(),
        ))),
    );
    pin(
        "call_frame.done.replayed",
        &done(CallOutcome::Replayed { complete: true }),
    );
    pin(
        "call_frame.done.failed",
        &done(CallOutcome::Failed(ControlError::RunNotActive {
            run_id: run(),
        })),
    );
    pin(
        "call_frame.done.failed_unavailable",
        &done(CallOutcome::Failed(ControlError::Unavailable(
            "the thread actor stopped before answering".into(),
        ))),
    );
    pin("call_frame.done.not_owner", &done(CallOutcome::NotOwner));
    pin(
        "call_frame.done.malformed",
        &done(CallOutcome::Malformed("invalid type: nil".into())),
    );
}

#[test]
fn run_events_keep_their_wire_form() {
    pin("stream_event.text_delta", &text_delta());
    pin("stream_event.run_finish", &run_finish());
    // What a message on `awaken.events.<run_id>` carries (decision 0077).
    pin("run_events_message", &vec![text_delta(), run_finish()]);
}

#[test]
fn members_and_shard_leases_keep_their_wire_form() {
    pin(
        "member_record",
        &MemberRecord {
            node_id: node(),
            joined_at_ms: AT_MS,
            http_url: None,
            features: Vec::new(),
        },
    );
    pin(
        "member_record.http_url",
        &MemberRecord {
            node_id: node(),
            joined_at_ms: AT_MS,
            http_url: Some("http://10.0.0.1:8080".into()),
            features: vec![crate::run_input::RUN_INPUT_IN_LEDGER.into()],
        },
    );
    pin(
        "shard_lease",
        &ShardLease {
            node_id: node(),
            token: 42,
            acquired_at_ms: AT_MS,
        },
    );
}

/// A dispatch with every optional field set.
fn full_dispatch() -> RunDispatch {
    let mut dispatch = RunDispatch::new(thread(), run(), 5, AT_MS).with_dedupe_key("msg-1");
    dispatch.dispatch_id = dispatch_id();
    dispatch.dispatch_epoch = 2;
    dispatch.status = RunDispatchStatus::Acked;
    dispatch.attempt_count = 1;
    dispatch.claim_token = Some("claim-1".into());
    dispatch.claimed_by = Some("node-a".into());
    dispatch.lease_until = Some(AT_MS + 10_000);
    dispatch.dispatch_instance_id = Some("instance-1".into());
    dispatch.run_status = Some(RunStatus::Done);
    dispatch.termination = Some(TerminationReason::NaturalEnd);
    dispatch.run_response = Some("Hello".into());
    dispatch.completed_at = Some(AT_MS + 2_000);
    dispatch.updated_at = AT_MS + 2_000;
    dispatch
}

/// One op of every command kind, as a batch carries them.
fn every_command() -> Vec<Op> {
    let rules = Rules {
        default_max_attempts: 3,
        retry_delay_ms: 250,
        max_retry_delay_ms: 30_000,
    };
    let consumer = || "node-a".to_owned();
    let token = || "claim-1".to_owned();
    let mut queued = RunDispatch::new(thread(), run(), 5, AT_MS).with_dedupe_key("msg-1");
    queued.dispatch_id = dispatch_id();
    let commands = vec![
        Command::Enqueue {
            dispatch: Box::new(queued.clone()),
            rules,
            now_ms: AT_MS,
            input: None,
        },
        Command::Claim {
            thread_id: thread(),
            consumer: consumer(),
            limit: 4,
            lease_ms: 30_000,
            now_ms: AT_MS,
            token: token(),
        },
        Command::ClaimDispatch {
            dispatch_id: dispatch_id(),
            consumer: consumer(),
            lease_ms: 30_000,
            now_ms: AT_MS,
            token: token(),
        },
        Command::Ack {
            dispatch_id: dispatch_id(),
            claim_token: token(),
            now_ms: AT_MS,
        },
        Command::Nack {
            dispatch_id: dispatch_id(),
            claim_token: token(),
            error: "model unavailable".into(),
            rules,
            now_ms: AT_MS,
        },
        Command::DeadLetter {
            dispatch_id: dispatch_id(),
            claim_token: token(),
            error: "gave up".into(),
            now_ms: AT_MS,
        },
        Command::Cancel {
            dispatch_id: dispatch_id(),
            now_ms: AT_MS,
        },
        Command::ExtendLease {
            dispatch_id: dispatch_id(),
            claim_token: token(),
            lease_ms: 30_000,
            now_ms: AT_MS,
        },
        Command::Interrupt {
            thread_id: thread(),
            now_ms: AT_MS,
        },
        Command::SupersedeClaimed {
            dispatch_id: dispatch_id(),
            now_ms: AT_MS,
        },
        Command::RecordStart {
            dispatch_id: dispatch_id(),
            dispatch_instance_id: "instance-1".into(),
            now_ms: AT_MS,
        },
        Command::RecordResult {
            dispatch_id: dispatch_id(),
            result: RunDispatchResult {
                run_id: run(),
                dispatch_instance_id: "instance-1".into(),
                status: RunStatus::Done,
                termination: Some(TerminationReason::NaturalEnd),
                response: Some("Hello".into()),
                error: None,
            },
            now_ms: AT_MS,
        },
        Command::ReclaimExpired {
            rules,
            now_ms: AT_MS,
        },
        Command::Gc {
            ttl_ms: 86_400_000,
            now_ms: AT_MS,
            dedupe_window_ms: Some(600_000),
            max_settled: Some(1_000_000),
        },
        // The run's input carried with its dispatch (decision 0078).
        Command::Enqueue {
            dispatch: Box::new(queued),
            rules,
            now_ms: AT_MS,
            input: Some(Box::new(run_request())),
        },
    ];
    commands
        .into_iter()
        .zip(1..)
        .map(|(command, id)| Op { id, command })
        .collect()
}

#[test]
fn the_mailbox_ledger_keeps_its_wire_form() {
    let batch = Batch {
        writer: "awaken_mailbox.0190f0a1b2c37d4e8f90a1b2c3d4e5f6".into(),
        ops: every_command(),
    };
    pin("ledger.batch", &batch);
    // What the writer publishes is spliced from ops encoded one by one: the same.
    let ops: Vec<_> = batch
        .ops
        .iter()
        .map(|op| codec::encode(op).unwrap())
        .collect();
    let spliced = splice_batch(&batch.writer, &ops).unwrap();
    assert_eq!(msgpack_to_json(&spliced), read_golden("ledger.batch"));

    pin(
        "ledger.snapshot_head",
        &Head {
            covers: 40_000,
            parts: 2,
            next_seq: 12_345,
        },
    );
    let mut queued = RunDispatch::new(thread(), run(), 5, AT_MS);
    queued.dispatch_id = dispatch_id();
    let part = Part {
        dispatches: vec![
            Stored {
                seq: 7,
                dispatch: full_dispatch(),
                input: None,
            },
            Stored {
                seq: 8,
                dispatch: queued,
                input: Some(Box::new(run_request())),
            },
        ],
        epochs: vec![Epoch {
            thread_id: thread(),
            epoch: 2,
        }],
        settled: vec![Mark {
            digest: MarkDigest::of_id(&dispatch_id()),
            status: RunDispatchStatus::Acked,
            at_ms: AT_MS,
        }],
    };
    pin("ledger.snapshot_part", &part);
    let dispatches: Vec<_> = part
        .dispatches
        .iter()
        .map(|stored| codec::encode(stored).unwrap())
        .collect();
    let spliced = splice_part(
        &dispatches,
        &[codec::encode(&part.epochs[0]).unwrap()],
        &[codec::encode(&part.settled[0]).unwrap()],
    )
    .unwrap();
    assert_eq!(
        msgpack_to_json(&spliced),
        read_golden("ledger.snapshot_part")
    );
}

#[test]
fn decisions_and_rejections_keep_their_wire_form() {
    pin_json(
        "decision_payload",
        &DecisionPayload {
            call_id: "call-1".into(),
            decision_id: "decision-1".into(),
            action: ResumeDecisionAction::Resume,
            result: json!({"approved": true}),
            reason: Some("looks fine".into()),
            thread_id: Some("thread-1".into()),
            run_id: Some("run-1".into()),
            updated_at: Some(AT_MS),
        },
    );
    pin_json(
        "decision_payload.minimal",
        &DecisionPayload {
            call_id: "call-1".into(),
            decision_id: "decision-2".into(),
            action: ResumeDecisionAction::Cancel,
            result: Value::Null,
            reason: None,
            thread_id: None,
            run_id: None,
            updated_at: None,
        },
    );
    pin_json(
        "rejection",
        &Rejection {
            subject: "awaken.decisions.thread-1".into(),
            decision_id: Some("decision-1".into()),
            error: "tool call `call-1` not found in the active run".into(),
        },
    );
    pin_json(
        "rejection.unreadable",
        &Rejection {
            subject: "awaken.decisions.thread-1".into(),
            decision_id: None,
            error: "invalid JSON decision: expected value at line 1 column 1".into(),
        },
    );
}

#[test]
fn run_inbox_requests_keep_their_wire_form() {
    pin("run_request", &run_request());
}

/// A user's request, as the KV inbox or a carrying enqueue holds it.
fn run_request() -> RunRequest {
    let message = Message {
        id: MessageId::new("message-1").unwrap(),
        role: Role::User,
        content: vec![ContentBlock::text("Hello")],
        tool_calls: Vec::new(),
        tool_call_id: None,
        visibility: Visibility::All,
        run_id: None,
        created_at: Some(AT_MS),
    };
    RunRequest::new(thread(), vec![message])
        .with_agent_id(AgentId::new("assistant").unwrap())
        .with_run_id(run())
        .with_origin(RunOrigin::User)
}

#[test]
fn approval_records_keep_their_wire_form() {
    use awaken_actors::contract::{
        Approval, ApprovalAnswer, ApprovalChange, ApprovalResolution, ApprovalStatus,
    };
    use awaken_actors::ids::ApprovalId;
    let requested = Approval {
        approval_id: ApprovalId::new("approval-1").unwrap(),
        tenant: Some("acme".into()),
        agent_id: AgentId::new("assistant").unwrap(),
        thread_id: thread(),
        run_id: run(),
        call_id: ToolCallId::new("call-1").unwrap(),
        tool_name: "delete_file".into(),
        arguments: json!({"path": "/tmp/report.txt"}),
        ticket_id: "permission:call-1".into(),
        action: "tool_permission".into(),
        message: "Allow delete_file?".into(),
        parameters: json!({"tool": "delete_file"}),
        response_schema: Some(json!({"type": "object"})),
        requested_at: AT_MS,
        expires_at: Some(AT_MS + 600_000),
        status: ApprovalStatus::Pending,
        resolved_at: None,
        decision_id: None,
        answer: None,
        cause: None,
    };
    pin_json(
        "approval_record.requested",
        &ApprovalChange::requested(requested.clone()),
    );
    let mut approved = requested.clone();
    approved.resolve(&ApprovalResolution {
        status: ApprovalStatus::Approved,
        resolved_at: AT_MS + 1_000,
        decision_id: Some(DecisionId::new("decision-1").unwrap()),
        answer: Some(ApprovalAnswer {
            action: ResumeDecisionAction::Resume,
            result: json!({"approved": true}),
            reason: Some("looks fine".into()),
        }),
        cause: None,
    });
    pin_json(
        "approval_record.resolved",
        &ApprovalChange::resolved(approved),
    );
    let mut cancelled = requested;
    cancelled.tenant = None;
    cancelled.resolve(&ApprovalResolution::cancelled(
        "run_cancelled",
        AT_MS + 2_000,
    ));
    pin_json(
        "approval_record.cancelled",
        &ApprovalChange::resolved(cancelled),
    );
}
