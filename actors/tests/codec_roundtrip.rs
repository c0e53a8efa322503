//! Every wire type round-trips through the MessagePack codec.
//!
//! For each value this checks three things:
//! 1. `decode(encode(v)) == v`;
//! 2. the bytes transcode to exactly the JSON that `serde_json::to_value(v)` gives
//!    (the codec and the HTTP/JSON side agree on shapes);
//! 3. the bytes equal plain `rmp_serde::to_vec_named(v)` and decode with plain
//!    `rmp_serde::from_slice` (peers using the stock functions interoperate).
//!
//! It also pins forward and backward compatibility of named encoding.

// Test helpers outside `#[test]` functions unwrap too.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;

use awaken_actors::codec::{self, CodecError};
use awaken_actors::contract::*;
use awaken_actors::error::{InferenceExecutionError, StateError, StorageError, ToolError};
use awaken_actors::state::{PersistedState, UnknownKeyPolicy};
use awaken_actors::{
    AgentId, DecisionId, DispatchId, JsonValue, MessageId, Phase, RunId, ThreadId, ToolCallId,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::json;

fn assert_round_trip<T>(value: &T)
where
    T: Serialize + DeserializeOwned + PartialEq + Debug,
{
    let bytes = codec::encode(value).unwrap_or_else(|e| panic!("encode {value:?}: {e}"));
    let back: T = codec::decode(&bytes).unwrap_or_else(|e| panic!("decode {value:?}: {e}"));
    assert_eq!(&back, value);

    let transcoded: JsonValue = codec::decode(&bytes).unwrap();
    assert_eq!(
        transcoded,
        serde_json::to_value(value).unwrap(),
        "JSON parity for {value:?}"
    );

    assert_eq!(
        bytes,
        rmp_serde::to_vec_named(value).unwrap(),
        "plain named encoding differs for {value:?}"
    );
    let plain: T = rmp_serde::from_slice(&bytes).unwrap();
    assert_eq!(&plain, value);
}

fn assert_all<T>(values: &[T])
where
    T: Serialize + DeserializeOwned + PartialEq + Debug,
{
    for value in values {
        assert_round_trip(value);
    }
}

/// A JSON payload with nesting, floats, extreme integers, unicode and nulls.
fn payload() -> JsonValue {
    json!({
        "nested": {
            "list": [1, -2, 3.5, null, true, "ünïcødé ✓ 🚀"],
            "empty_object": {},
            "empty_array": [],
            "deeper": {"a": {"b": {"c": [0.1, 1e300, -0.0]}}}
        },
        "float": 0.1,
        "integral_float": 2.0,
        "big": u64::MAX,
        "min": i64::MIN,
        "null": null,
        "text": "line\nbreak \"quoted\" \u{0}"
    })
}

fn tid(s: &str) -> ThreadId {
    ThreadId::new(s).unwrap()
}
fn rid(s: &str) -> RunId {
    RunId::new(s).unwrap()
}
fn cid(s: &str) -> ToolCallId {
    ToolCallId::new(s).unwrap()
}
fn mid(s: &str) -> MessageId {
    MessageId::new(s).unwrap()
}
fn aid(s: &str) -> AgentId {
    AgentId::new(s).unwrap()
}

fn ticket() -> SuspendTicket {
    SuspendTicket::new(
        Suspension::new("s1", "confirm", "Delete everything?")
            .with_parameters(payload())
            .with_response_schema(json!({"type": "object"})),
        PendingToolCall {
            id: cid("c1"),
            name: "rm".into(),
            arguments: payload(),
        },
        ToolCallResumeMode::PassDecisionToTool,
    )
}

fn decision() -> ToolCallResume {
    ToolCallResume {
        decision_id: DecisionId::new("dec-1").unwrap(),
        action: ResumeDecisionAction::Resume,
        result: payload(),
        reason: Some("approved by ops 👍".into()),
        updated_at: 1_700_000_000_000,
        trace: None,
    }
}

fn termination_reasons() -> Vec<TerminationReason> {
    vec![
        TerminationReason::NaturalEnd,
        TerminationReason::BehaviorRequested,
        TerminationReason::Stopped(StoppedReason::new("max_rounds").with_detail("16 rounds")),
        TerminationReason::Stopped(StoppedReason::new("timeout")),
        TerminationReason::Cancelled,
        TerminationReason::Blocked("policy says no".into()),
        TerminationReason::Suspended,
        TerminationReason::Error("provider exploded ☄".into()),
    ]
}

fn tool_results() -> Vec<ToolResult> {
    vec![
        ToolResult::success("calc", payload()),
        ToolResult::success_with_message("calc", json!(42), "computed"),
        ToolResult::error("calc", "bad input"),
        ToolResult::error_with_code("calc", "div_zero", "division by zero"),
        ToolResult::suspended("rm", "approve?"),
        ToolResult::suspended_with("rm", "approve?", ticket()),
    ]
}

fn persisted_state() -> PersistedState {
    PersistedState {
        revision: 7,
        extensions: BTreeMap::from([
            ("plugin.counter".to_owned(), json!(3).into()),
            ("plugin.payload".to_owned(), payload().into()),
        ]),
    }
}

fn agent_events() -> Vec<AgentEvent> {
    vec![
        AgentEvent::RunStart {
            thread_id: tid("t1"),
            run_id: rid("r1"),
            parent_run_id: None,
        },
        AgentEvent::RunStart {
            thread_id: tid("t1"),
            run_id: rid("r1"),
            parent_run_id: Some(rid("r0")),
        },
        AgentEvent::RunFinish {
            thread_id: tid("t1"),
            run_id: rid("r1"),
            result: Some(payload()),
            termination: TerminationReason::Stopped(StoppedReason::new("max_rounds")),
        },
        AgentEvent::RunFinish {
            thread_id: tid("t1"),
            run_id: rid("r1"),
            result: None,
            termination: TerminationReason::Error("x".into()),
        },
        AgentEvent::TextDelta {
            delta: "héllo ".into(),
        },
        AgentEvent::ReasoningDelta {
            delta: "thinking".into(),
        },
        AgentEvent::ReasoningEncryptedValue {
            encrypted_value: "b64==".into(),
        },
        AgentEvent::ToolCallStart {
            id: cid("c1"),
            name: "search".into(),
        },
        AgentEvent::ToolCallDelta {
            id: cid("c1"),
            args_delta: "{\"q\":".into(),
        },
        AgentEvent::ToolCallReady {
            id: cid("c1"),
            name: "search".into(),
            arguments: payload(),
        },
        AgentEvent::ToolCallDone {
            id: cid("c1"),
            message_id: mid("m1"),
            result: ToolResult::suspended_with("rm", "approve?", ticket()),
            outcome: ToolCallOutcome::Suspended,
        },
        AgentEvent::ToolCallStreamDelta {
            id: cid("c1"),
            name: "sh".into(),
            delta: "output".into(),
        },
        AgentEvent::ToolCallResumed {
            target_id: cid("c1"),
            result: payload(),
        },
        AgentEvent::MessagesSnapshot {
            messages: vec![payload(), json!(null)],
        },
        AgentEvent::ActivitySnapshot {
            message_id: mid("m1"),
            activity_type: TOOL_CALL_PROGRESS_ACTIVITY_TYPE.into(),
            content: serde_json::to_value(
                ToolCallProgressState::new(cid("c1"), "index", ProgressStatus::Running)
                    .with_progress(0.25),
            )
            .unwrap(),
            replace: Some(true),
        },
        AgentEvent::ActivitySnapshot {
            message_id: mid("m1"),
            activity_type: "code".into(),
            content: json!("fn main() {}"),
            replace: None,
        },
        AgentEvent::ActivityDelta {
            message_id: mid("m1"),
            activity_type: "code".into(),
            patch: vec![json!({"op": "add", "path": "/x", "value": payload()})],
        },
        AgentEvent::StepStart {
            message_id: mid("m2"),
        },
        AgentEvent::StepEnd,
        AgentEvent::InferenceComplete {
            model: "gpt-4o".into(),
            usage: Some(TokenUsage::new(10, 5)),
            duration_ms: 1234,
        },
        AgentEvent::InferenceComplete {
            model: "gpt-4o".into(),
            usage: None,
            duration_ms: 0,
        },
        AgentEvent::StateSnapshot {
            snapshot: payload(),
        },
        AgentEvent::StateDelta {
            delta: vec![json!({"op": "remove", "path": "/a"})],
        },
        AgentEvent::Error {
            message: "boom".into(),
            code: Some("E42".into()),
        },
        AgentEvent::Error {
            message: "boom".into(),
            code: None,
        },
    ]
}

#[test]
fn messages_and_threads() {
    assert_all(&[Role::System, Role::User, Role::Assistant, Role::Tool]);
    assert_all(&[
        ContentBlock::text("hi ✓"),
        ContentBlock::Image {
            url: Some("https://example.com/a.png".into()),
            data: None,
            media_type: None,
        },
        ContentBlock::Image {
            url: None,
            data: Some("aGk=".into()),
            media_type: Some("image/png".into()),
        },
        ContentBlock::Reasoning {
            text: "hmm".into(),
            signature: Some("sig".into()),
        },
        ContentBlock::Reasoning {
            text: "hmm".into(),
            signature: None,
        },
    ]);
    assert_all(&[Visibility::All, Visibility::Internal]);
    let call = ToolCall::new(cid("c1"), "search", payload());
    assert_round_trip(&call);

    let mut with_everything = Message::assistant_with_tool_calls("let me check", vec![call])
        .with_run_id(rid("r1"))
        .with_visibility(Visibility::Internal);
    with_everything.created_at = Some(1_700_000_000_000);
    with_everything.content.push(ContentBlock::Reasoning {
        text: "why".into(),
        signature: None,
    });
    assert_all(&[
        Message::system("be helpful"),
        Message::internal_system("<reminder/>"),
        Message::user("héllo"),
        Message::assistant(""),
        Message::tool_result(cid("c1"), payload().to_string()),
        with_everything,
    ]);

    let mut thread = Thread::with_id(tid("t1")).with_title("Trip ✈");
    thread.metadata.created_at = Some(1);
    thread.metadata.updated_at = Some(2);
    thread.metadata.parent_thread_id = Some(tid("t0"));
    thread.metadata.custom.insert("payload".into(), payload());
    assert_all(&[Thread::with_id(tid("t2")), thread.clone()]);
    assert_all(&[ThreadMetadata::default(), thread.metadata]);
}

#[test]
fn identity_and_runs() {
    assert_all(&[RunOrigin::User, RunOrigin::A2a, RunOrigin::Internal]);
    let identity = RunIdentity::new(tid("t1"), rid("r1"), aid("agent"), RunOrigin::Internal);
    let child = identity
        .clone()
        .with_parent_run_id(rid("r0"))
        .with_parent_thread_id(tid("t0"));
    assert_all(&[identity.clone(), child.clone()]);

    assert_all(&[RunStatus::Running, RunStatus::Waiting, RunStatus::Done]);
    assert_all(&termination_reasons());
    assert_round_trip(&StoppedReason::new("x"));
    assert_all(&[WaitingReason::ToolDecision, WaitingReason::UserInput]);

    let ticket = RunWaitingTicket {
        ticket_id: "s1".into(),
        tool_call_id: cid("c1"),
        tool_name: "rm".into(),
        action: "confirm".into(),
        message: "sure?".into(),
    };
    assert_round_trip(&ticket);
    let waiting = RunWaitingState {
        reason: WaitingReason::ToolDecision,
        ticket_ids: vec!["s1".into()],
        tickets: vec![ticket],
        since_dispatch_id: Some(DispatchId::new("d1").unwrap()),
        message: Some("waiting for approval".into()),
    };
    let bare_waiting = RunWaitingState {
        reason: WaitingReason::UserInput,
        ticket_ids: vec![],
        tickets: vec![],
        since_dispatch_id: None,
        message: None,
    };
    assert_all(&[waiting.clone(), bare_waiting]);

    let fresh = RunRecord::new(&identity, 100);
    let mut full = RunRecord::new(&child, 100);
    full.steps = 3;
    full.input_tokens = u64::MAX;
    full.output_tokens = 5;
    full.state = Some(persisted_state());
    full.waiting = Some(waiting);
    full.finish(TerminationReason::Suspended, 101).unwrap();
    let mut done = fresh.clone();
    done.finish(
        TerminationReason::Stopped(StoppedReason::new("token_budget")),
        102,
    )
    .unwrap();
    assert_all(&[fresh, full, done]);
}

#[test]
fn tools_tool_calls_and_suspension() {
    assert_all(&[
        ToolDescriptor::new("greet", "greet", "Greet someone"),
        ToolDescriptor::new("search", "web_search", "Search the web ✓")
            .with_parameters(payload())
            .with_category("web"),
    ]);
    assert_all(&[ToolStatus::Success, ToolStatus::Pending, ToolStatus::Error]);
    assert_all(&tool_results());

    assert_all(&ToolCallStatus::ALL);
    assert_all(&[
        ToolCallOutcome::Succeeded,
        ToolCallOutcome::Failed,
        ToolCallOutcome::Suspended,
    ]);
    let fresh = ToolCallState::new(&ToolCall::new(cid("c1"), "rm", payload()));
    let mut full = fresh.clone();
    full.transition_to(ToolCallStatus::Suspended, 10).unwrap();
    full.ticket = Some(Box::new(ticket()));
    full.transition_to(ToolCallStatus::Resuming, 11).unwrap();
    full.decision = Some(decision());
    full.transition_to(ToolCallStatus::Running, 12).unwrap();
    full.transition_to(ToolCallStatus::Succeeded, 13).unwrap();
    full.result = Some(ToolResult::success("rm", payload()));
    assert_all(&[fresh, full]);

    assert_all(&[Suspension::new("s", "approve", "ok?"), ticket().suspension]);
    assert_round_trip(&ticket().pending);
    assert_all(&[
        ToolCallResumeMode::ReplayToolCall,
        ToolCallResumeMode::UseDecisionAsToolResult,
        ToolCallResumeMode::PassDecisionToTool,
    ]);
    assert_round_trip(&ticket());
    assert_all(&[ResumeDecisionAction::Resume, ResumeDecisionAction::Cancel]);
    let minimal_decision = ToolCallResume {
        decision_id: DecisionId::new("dec-2").unwrap(),
        action: ResumeDecisionAction::Cancel,
        result: JsonValue::Null,
        reason: None,
        updated_at: 0,
        trace: None,
    };
    assert_all(&[decision(), minimal_decision]);
}

#[test]
fn events_and_stream_envelopes() {
    let events = agent_events();
    assert_all(&events);
    let envelopes: Vec<_> = events
        .into_iter()
        .enumerate()
        .map(|(seq, event)| StreamEvent::new(seq as u64, "2026-01-01T00:00:00.000Z", event))
        .collect();
    assert_all(&envelopes);
}

#[test]
fn inputs_usage_inference_and_stop_conditions() {
    assert_all(&[
        RunInput::user_message("hi"),
        RunInput::ResumeDecision {
            tool_call_id: cid("c1"),
            action: ResumeDecisionAction::Resume,
            payload: payload(),
        },
        RunInput::ResumeDecision {
            tool_call_id: cid("c1"),
            action: ResumeDecisionAction::Cancel,
            payload: JsonValue::Null,
        },
    ]);

    assert_all(&[
        TokenUsage::default(),
        TokenUsage::new(1, 2),
        TokenUsage {
            prompt_tokens: Some(u64::MAX),
            completion_tokens: Some(0),
            total_tokens: None,
            cache_read_tokens: Some(3),
            cache_creation_tokens: Some(4),
            thinking_tokens: Some(5),
        },
    ]);

    assert_all(&[
        ReasoningEffort::None,
        ReasoningEffort::Low,
        ReasoningEffort::Medium,
        ReasoningEffort::High,
        ReasoningEffort::Max,
        ReasoningEffort::Budget(0),
        ReasoningEffort::Budget(u32::MAX),
    ]);
    assert_all(&[
        InferenceOverride::default(),
        InferenceOverride {
            model: Some("gpt-4o".into()),
            fallback_models: Some(vec!["a".into(), "b".into()]),
            temperature: Some(0.7),
            max_tokens: Some(4096),
            top_p: Some(0.95),
            reasoning_effort: Some(ReasoningEffort::Budget(1024)),
        },
    ]);
    assert_all(&[
        ContextCompactionMode::KeepRecentRawSuffix,
        ContextCompactionMode::CompactToSafeFrontier,
    ]);
    assert_all(&[
        ContextWindowPolicy::default(),
        ContextWindowPolicy {
            autocompact_threshold: Some(100_000),
            compaction_mode: ContextCompactionMode::CompactToSafeFrontier,
            ..ContextWindowPolicy::default()
        },
    ]);

    assert_all(&[
        StopConditionSpec::MaxRounds { rounds: 10 },
        StopConditionSpec::Timeout { seconds: 300 },
        StopConditionSpec::TokenBudget { max_total: 100_000 },
        StopConditionSpec::ConsecutiveErrors { max: 3 },
        StopConditionSpec::StopOnTool {
            tool_name: "finish".into(),
        },
        StopConditionSpec::ContentMatch {
            pattern: r"^DONE\b".into(),
        },
        StopConditionSpec::LoopDetection { window: 5 },
    ]);
}

#[test]
fn progress_and_dispatch() {
    assert_all(&[
        ProgressStatus::Pending,
        ProgressStatus::Running,
        ProgressStatus::Done,
        ProgressStatus::Failed,
        ProgressStatus::Cancelled,
    ]);
    let mut nested = ToolCallProgressState::new(cid("c2"), "index", ProgressStatus::Running)
        .with_progress(1.0 / 3.0)
        .with_message("batch 1/3");
    nested.loaded = Some(1);
    nested.total = Some(3);
    nested.parent_node_id = Some("c1".into());
    nested.parent_call_id = Some(cid("c1"));
    assert_all(&[
        ToolCallProgressState::new(cid("c1"), "index", ProgressStatus::Pending),
        nested,
    ]);

    assert_all(&[
        RunDispatchStatus::Queued,
        RunDispatchStatus::Claimed,
        RunDispatchStatus::Acked,
        RunDispatchStatus::Cancelled,
        RunDispatchStatus::Superseded,
        RunDispatchStatus::DeadLetter,
    ]);
    let queued = RunDispatch::new(tid("t1"), rid("r1"), 3, 1_000);
    let mut projected = RunDispatch::new(tid("t1"), rid("r1"), 3, 1_000)
        .with_priority(0)
        .with_dedupe_key("msg-1");
    projected.dispatch_epoch = 9;
    projected.status = RunDispatchStatus::Acked;
    projected.attempt_count = 2;
    projected.last_error = Some("node died".into());
    projected.claim_token = Some("tok".into());
    projected.claimed_by = Some("node-a".into());
    projected.lease_until = Some(31_000);
    projected.dispatch_instance_id = Some("inst".into());
    projected.run_status = Some(RunStatus::Done);
    projected.termination = Some(TerminationReason::Stopped(StoppedReason::new("x")));
    projected.run_response = Some("answer".into());
    projected.run_error = None;
    projected.completed_at = Some(2_000);
    assert_all(&[queued.clone(), projected.clone()]);

    assert_all(&[
        RunDispatchResult {
            run_id: rid("r1"),
            dispatch_instance_id: "inst".into(),
            status: RunStatus::Waiting,
            termination: Some(TerminationReason::Suspended),
            response: None,
            error: None,
        },
        RunDispatchResult {
            run_id: rid("r1"),
            dispatch_instance_id: "inst".into(),
            status: RunStatus::Done,
            termination: Some(TerminationReason::Error("e".into())),
            response: Some("r".into()),
            error: Some("e".into()),
        },
    ]);
    assert_all(&[
        MailboxInterrupt {
            new_dispatch_epoch: 10,
            active_dispatch: Some(projected),
            superseded_count: 4,
        },
        MailboxInterrupt {
            new_dispatch_epoch: 0,
            active_dispatch: None,
            superseded_count: 0,
        },
    ]);
}

#[test]
fn specs() {
    assert_all(&[
        ToolExecutionMode::Sequential,
        ToolExecutionMode::ParallelBatchApproval,
        ToolExecutionMode::ParallelStreaming,
    ]);
    let mut auth = RemoteAuth::bearer("token-abc");
    auth.params.insert("extra".into(), payload());
    assert_all(&[
        RemoteAuth::bearer("t"),
        auth.clone(),
        RemoteAuth {
            r#type: "none".into(),
            params: BTreeMap::new(),
        },
    ]);
    let mut endpoint = RemoteEndpoint::new("a2a", "https://analyst.example.com/v1/a2a");
    let bare_endpoint = endpoint.clone();
    endpoint.auth = Some(auth);
    endpoint.target = Some("analyst".into());
    endpoint
        .options
        .insert("poll_interval_ms".into(), json!(1000));
    assert_all(&[bare_endpoint, endpoint.clone()]);

    let full = AgentSpec {
        context_policy: Some(ContextWindowPolicy::default()),
        plugin_ids: vec!["permission".into()],
        active_hook_filter: BTreeSet::from(["permission".to_owned()]),
        allowed_tools: Some(vec!["search".into()]),
        excluded_tools: Some(vec![]),
        delegates: vec!["writer".into()],
        registry: Some("main".into()),
        ..AgentSpec::new(aid("orchestrator"))
            .with_model("gpt-4o")
            .with_system_prompt("Coordinate ✓")
            .with_max_rounds(5)
            .with_endpoint(endpoint)
            .with_section("reminder", payload())
            .with_tool_execution_mode(ToolExecutionMode::ParallelBatchApproval)
    };
    assert_all(&[AgentSpec::new(aid("a")), full]);

    assert_all(&[ModelSpec::new(
        "claude-sonnet",
        "anthropic",
        "claude-sonnet-4-20250514",
    )]);
    assert_all(&[
        ProviderSpec::new("local", "scripted"),
        ProviderSpec::new("openai", "openai")
            .with_base_url("http://127.0.0.1:9/v1/")
            .with_api_key_env("OPENAI_API_KEY")
            .with_timeout_ms(30_000),
    ]);
}

#[test]
fn errors_and_persisted_state() {
    assert_all(&[
        StateError::RevisionConflict {
            expected: 1,
            actual: 2,
        },
        StateError::MutationBaseRevisionMismatch { left: 1, right: 2 },
        StateError::PluginAlreadyInstalled { name: "p".into() },
        StateError::PluginNotInstalled {
            type_name: "p".into(),
        },
        StateError::KeyAlreadyRegistered { key: "k".into() },
        StateError::UnknownKey { key: "k".into() },
        StateError::KeyTypeMismatch { key: "k".into() },
        StateError::KeyDecode {
            key: "k".into(),
            message: "bad".into(),
        },
        StateError::KeyEncode {
            key: "k".into(),
            message: "bad".into(),
        },
        StateError::HandlerAlreadyRegistered { key: "a".into() },
        StateError::EffectHandlerAlreadyRegistered { key: "e".into() },
        StateError::PhaseRunLoopExceeded {
            phase: Phase::BeforeToolExecute,
            max_rounds: 16,
        },
        StateError::UnknownScheduledActionHandler { key: "a".into() },
        StateError::UnknownEffectHandler { key: "e".into() },
        StateError::ParallelMergeConflict { key: "k".into() },
        StateError::ToolAlreadyRegistered {
            tool_id: "t".into(),
        },
        StateError::HookAlreadyRegistered {
            plugin_id: "p".into(),
            hook: "h".into(),
            phase: Phase::RunEnd,
        },
        StateError::ProfileKeyAlreadyRegistered { key: "k".into() },
        StateError::HookFailed {
            source_id: "p/h".into(),
            message: "boom".into(),
        },
        StateError::Cancelled,
    ]);
    assert_all(&[
        ToolError::InvalidArguments("a".into()),
        ToolError::ExecutionFailed("b".into()),
        ToolError::Denied("c".into()),
        ToolError::NotFound("d".into()),
        ToolError::Internal("é".into()),
    ]);
    assert_all(&[
        InferenceExecutionError::provider("500"),
        InferenceExecutionError::RateLimited {
            message: "slow down".into(),
            retry_after_ms: Some(1500),
        },
        InferenceExecutionError::RateLimited {
            message: "slow down".into(),
            retry_after_ms: None,
        },
        InferenceExecutionError::Timeout {
            message: "30s".into(),
        },
        InferenceExecutionError::Cancelled,
    ]);
    assert_all(&[
        StorageError::NotFound("thread t1".into()),
        StorageError::AlreadyExists("run r1".into()),
        StorageError::VersionConflict {
            expected: 3,
            actual: 4,
        },
        StorageError::Fenced {
            presented: 1,
            current: 2,
        },
        StorageError::InvalidInput("thread id `..` cannot name a file".into()),
        StorageError::Io("disk full".into()),
        StorageError::Serialization("bad bytes".into()),
    ]);

    assert_all(&[PersistedState::default(), persisted_state()]);
    assert_all(&[UnknownKeyPolicy::Error, UnknownKeyPolicy::Skip]);
}

#[test]
fn bare_json_values_round_trip() {
    assert_all(&[
        payload(),
        JsonValue::Null,
        json!(true),
        json!(-1),
        json!(1.5),
        json!("✓"),
        json!([]),
        json!({}),
    ]);
}

/// `Some(null)` is indistinguishable from `None` for an `Option<Value>` field, in JSON
/// and here alike: both decode as `None`.
#[test]
fn some_null_collapses_to_none() {
    let event = AgentEvent::RunFinish {
        thread_id: tid("t1"),
        run_id: rid("r1"),
        result: Some(JsonValue::Null),
        termination: TerminationReason::NaturalEnd,
    };
    let back: AgentEvent = codec::decode(&codec::encode(&event).unwrap()).unwrap();
    let via_json: AgentEvent =
        serde_json::from_value(serde_json::to_value(&event).unwrap()).unwrap();
    assert_eq!(back, via_json);
    assert!(matches!(back, AgentEvent::RunFinish { result: None, .. }));
}

// --- Compatibility -------------------------------------------------------------------

/// What an older node knows about a record.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct WidgetV1 {
    id: String,
    count: u32,
}

/// The same record after a newer node added fields, with defaults.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct WidgetV2 {
    id: String,
    count: u32,
    #[serde(default)]
    color: Option<String>,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    details: BTreeMap<String, JsonValue>,
}

#[test]
fn newer_encodings_decode_into_older_structs() {
    let v2 = WidgetV2 {
        id: "w".into(),
        count: 3,
        color: Some("red".into()),
        tags: vec!["a".into()],
        details: BTreeMap::from([("x".to_owned(), payload())]),
    };
    let v1: WidgetV1 = codec::decode(&codec::encode(&v2).unwrap()).unwrap();
    assert_eq!(
        v1,
        WidgetV1 {
            id: "w".into(),
            count: 3
        }
    );
}

#[test]
fn older_encodings_decode_into_newer_structs() {
    let v1 = WidgetV1 {
        id: "w".into(),
        count: 3,
    };
    let v2: WidgetV2 = codec::decode(&codec::encode(&v1).unwrap()).unwrap();
    assert_eq!(
        v2,
        WidgetV2 {
            id: "w".into(),
            count: 3,
            color: None,
            tags: vec![],
            details: BTreeMap::new(),
        }
    );
}

/// Encodes a JSON object as a msgpack map, as a node with a different schema would.
fn encode_object(value: JsonValue) -> Vec<u8> {
    codec::encode(&value).unwrap()
}

#[test]
fn real_wire_types_ignore_unknown_fields() {
    let identity = RunIdentity::new(tid("t1"), rid("r1"), aid("a"), RunOrigin::User);
    let mut record = RunRecord::new(&identity, 5);
    record
        .finish(TerminationReason::Blocked("no".into()), 6)
        .unwrap();
    let mut value = serde_json::to_value(&record).unwrap();
    value["added_in_v2"] = payload();
    value["termination"]["added_in_v2"] = json!(1);
    assert_eq!(
        codec::decode::<RunRecord>(&encode_object(value)).unwrap(),
        record
    );

    let event = StreamEvent::new(
        3,
        "t",
        AgentEvent::ToolCallStart {
            id: cid("c1"),
            name: "s".into(),
        },
    );
    let mut value = serde_json::to_value(&event).unwrap();
    value["trace_id"] = json!("abc");
    assert_eq!(
        codec::decode::<StreamEvent>(&encode_object(value)).unwrap(),
        event
    );

    let mut value = serde_json::to_value(AgentEvent::StepEnd).unwrap();
    value["extra"] = json!([1, 2]);
    assert_eq!(
        codec::decode::<AgentEvent>(&encode_object(value)).unwrap(),
        AgentEvent::StepEnd
    );
}

#[test]
fn real_wire_types_fill_missing_defaulted_fields() {
    let record: RunRecord = codec::decode(&encode_object(json!({
        "run_id": "r1", "thread_id": "t1", "agent_id": "a",
        "created_at": 1, "updated_at": 2
    })))
    .unwrap();
    assert_eq!(record.origin, RunOrigin::User);
    assert_eq!(record.status, RunStatus::Running);
    assert_eq!((record.steps, record.input_tokens), (0, 0));

    let dispatch: RunDispatch = codec::decode(&encode_object(json!({
        "dispatch_id": "d1", "thread_id": "t1", "run_id": "r1",
        "created_at": 1, "updated_at": 1
    })))
    .unwrap();
    assert_eq!(dispatch.priority, 128);
    assert_eq!(dispatch.status, RunDispatchStatus::Queued);

    let policy: ContextWindowPolicy =
        codec::decode(&encode_object(json!({"min_recent_messages": 4}))).unwrap();
    assert_eq!(policy.min_recent_messages, 4);
    assert_eq!(policy.max_context_tokens, 200_000);
}

/// Adding an enum *variant* is not forward compatible: older nodes refuse it. New
/// variants need a version bump or must only be sent to nodes that know them.
#[test]
fn unknown_enum_variants_are_decode_errors() {
    let err = codec::decode::<RunStatus>(&codec::encode("paused").unwrap()).unwrap_err();
    assert!(matches!(err, CodecError::Decode(_)));
    let err =
        codec::decode::<AgentEvent>(&encode_object(json!({"event_type": "new_kind"}))).unwrap_err();
    assert!(matches!(err, CodecError::Decode(_)));
}

#[test]
fn invalid_ids_are_decode_errors() {
    let err = codec::decode::<Thread>(&encode_object(json!({"id": ""}))).unwrap_err();
    assert!(err.to_string().contains("must not be empty"), "{err}");
}
