//! The permission plugin driven through real phases: deny blocks, ask suspends, allow
//! passes, replays after a decision run, "always allow" grants outlive the run, and
//! plain-name denials leave the tool offer.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::collections::BTreeSet;
use std::sync::Arc;

use awaken_actors::actions::{
    LoopActionHandlersPlugin, ToolFilterKey, ToolInterceptKey, ToolInterceptPayload,
    ToolInterceptUpdate,
};
use awaken_actors::contract::{
    AgentSpec, ResumeDecisionAction, ToolCallResume, ToolCallResumeMode, ToolStatus,
};
use awaken_actors::permission::{
    PERMISSION_ACTION, PermissionBehavior, PermissionGrantsKey, PermissionPlugin, PermissionRules,
    decision_schema,
};
use awaken_actors::phase::{PhaseContext, PhaseRuntime, ToolCallView};
use awaken_actors::plugin::{ExecutionEnv, PluginEntry};
use awaken_actors::state::{StateCommand, StateStore};
use awaken_actors::{AgentId, DecisionId, JsonValue, Phase, StateError, ToolCallId};
use serde_json::json;

const RULES: &str = r#"
default_behavior: ask
rules:
  - tool: read_file
    behavior: allow
  - tool: "Bash(npm *)"
    behavior: allow
  - tool: 'Bash(command =~ "(?i)\brm\b")'
    behavior: deny
  - tool: rm
    behavior: deny
  - tool: "delete_*"
    behavior: deny
  - tool: "mcp__*"
    behavior: ask
"#;

struct Harness {
    env: ExecutionEnv,
    store: StateStore,
    spec: Arc<AgentSpec>,
}

impl Harness {
    fn new(plugin: PermissionPlugin) -> Self {
        let env = ExecutionEnv::from_plugins(
            [
                PluginEntry::required(
                    LoopActionHandlersPlugin::ID,
                    Arc::new(LoopActionHandlersPlugin),
                ),
                PluginEntry::new(PermissionPlugin::ID, Arc::new(plugin)),
            ],
            &BTreeSet::new(),
        )
        .unwrap();
        let mut store = StateStore::new();
        env.install(&mut store).unwrap();
        Self {
            env,
            store,
            spec: PhaseContext::test_default().agent_spec,
        }
    }

    fn with_rules(yaml: &str) -> Self {
        Self::new(PermissionPlugin::new(
            PermissionRules::from_yaml(yaml).unwrap(),
        ))
    }

    fn ctx(&self, phase: Phase) -> PhaseContext {
        let mut ctx = PhaseContext::test_default().with_phase(phase).with_step(1);
        ctx.agent_spec = Arc::clone(&self.spec);
        ctx
    }

    async fn try_check(&mut self, call: ToolCallView) -> Result<(), StateError> {
        let ctx = self.ctx(Phase::BeforeToolExecute).with_tool_call(call);
        PhaseRuntime::new()
            .run_phase(&self.env, &mut self.store, ctx)
            .await
            .map(|_| ())
    }

    /// Runs BeforeToolExecute for `call`; returns its intercept, if any, and clears
    /// it as the run loop does once it acted on it.
    async fn check(&mut self, call: ToolCallView) -> Option<ToolInterceptPayload> {
        let id = call.call_id.clone();
        self.try_check(call).await.unwrap();
        let intercept = self.store.read::<ToolInterceptKey>().unwrap().remove(&id);
        let mut clear = StateCommand::new();
        clear.update::<ToolInterceptKey>(ToolInterceptUpdate::Clear(id));
        self.store.commit(clear).unwrap();
        intercept
    }

    async fn before_inference(&mut self) -> Result<(), StateError> {
        let ctx = self.ctx(Phase::BeforeInference);
        PhaseRuntime::new()
            .run_phase(&self.env, &mut self.store, ctx)
            .await
            .map(|_| ())
    }

    fn granted(&self) -> Vec<String> {
        self.store
            .read::<PermissionGrantsKey>()
            .unwrap()
            .tools
            .into_iter()
            .collect()
    }
}

fn call(id: &str, tool: &str, arguments: JsonValue) -> ToolCallView {
    ToolCallView {
        call_id: ToolCallId::new(id).unwrap(),
        tool_name: tool.into(),
        arguments,
        result: None,
        decision: None,
    }
}

fn replay(mut call: ToolCallView, action: ResumeDecisionAction, result: JsonValue) -> ToolCallView {
    call.decision = Some(ToolCallResume {
        decision_id: DecisionId::new(format!("d-{}", call.call_id)).unwrap(),
        action,
        result,
        reason: None,
        updated_at: 1,
        trace: None,
    });
    call
}

#[tokio::test]
async fn deny_blocks_with_the_rule_named() {
    let mut h = Harness::with_rules(RULES);
    assert_eq!(
        h.check(call("c1", "delete_all", json!({}))).await,
        Some(ToolInterceptPayload::Block {
            reason: "tool `delete_all` is denied by permission rule `delete_*`".into()
        })
    );
    let blocked = h
        .check(call("c2", "Bash", json!({"command": "sudo RM -rf /"})))
        .await;
    assert!(
        matches!(blocked, Some(ToolInterceptPayload::Block { ref reason }) if reason.contains("rm")),
        "{blocked:?}"
    );
}

#[tokio::test]
async fn ask_suspends_with_a_replay_ticket() {
    let mut h = Harness::with_rules(RULES);
    let args = json!({"repo": "awaken", "title": "bug"});
    let Some(ToolInterceptPayload::Suspend(ticket)) = h
        .check(call("c1", "mcp__github__create_issue", args.clone()))
        .await
    else {
        panic!("expected a suspension");
    };
    assert_eq!(ticket.resume_mode, ToolCallResumeMode::ReplayToolCall);
    assert_eq!(ticket.suspension.id, "permission:c1");
    assert_eq!(ticket.suspension.action, PERMISSION_ACTION);
    assert_eq!(ticket.suspension.parameters, args);
    assert_eq!(ticket.suspension.response_schema, Some(decision_schema()));
    assert!(
        ticket
            .suspension
            .message
            .contains("`mcp__github__create_issue`"),
        "{}",
        ticket.suspension.message
    );
    assert!(
        ticket
            .suspension
            .message
            .contains(r#"{"repo":"awaken","title":"bug"}"#)
    );
    assert_eq!(ticket.pending.id, ToolCallId::new("c1").unwrap());
    assert_eq!(ticket.pending.name, "mcp__github__create_issue");
    assert_eq!(ticket.pending.arguments, args);

    // No rule matches: the default (ask) applies.
    assert!(matches!(
        h.check(call("c2", "Bash", json!({"command": "ls"}))).await,
        Some(ToolInterceptPayload::Suspend(_))
    ));
}

#[tokio::test]
async fn allow_and_default_allow_leave_the_call_alone() {
    let mut h = Harness::with_rules(RULES);
    assert_eq!(
        h.check(call("c1", "read_file", json!({"path": "a"}))).await,
        None
    );
    assert_eq!(
        h.check(call("c2", "Bash", json!({"command": "npm test"})))
            .await,
        None
    );
    let mut open = Harness::new(PermissionPlugin::new(PermissionRules::new(
        PermissionBehavior::Allow,
    )));
    assert_eq!(open.check(call("c1", "anything", json!({}))).await, None);
}

#[tokio::test]
async fn a_replayed_call_runs_once_without_asking_again() {
    let mut h = Harness::with_rules(RULES);
    let ask = call("c1", "mcp__gh__pr", json!({"n": 1}));
    assert!(matches!(
        h.check(ask.clone()).await,
        Some(ToolInterceptPayload::Suspend(_))
    ));
    let approved = replay(ask, ResumeDecisionAction::Resume, json!({"approved": true}));
    assert_eq!(h.check(approved).await, None);
    assert!(h.granted().is_empty(), "a plain approval is not remembered");
    // The next call of the same tool asks again: ask decisions are never cached.
    assert!(matches!(
        h.check(call("c2", "mcp__gh__pr", json!({"n": 1}))).await,
        Some(ToolInterceptPayload::Suspend(_))
    ));
}

#[tokio::test]
async fn a_refused_decision_gives_an_error_result() {
    let mut h = Harness::with_rules(RULES);
    for (id, action, payload) in [
        (
            "c1",
            ResumeDecisionAction::Resume,
            json!({"approved": false}),
        ),
        ("c2", ResumeDecisionAction::Cancel, JsonValue::Null),
    ] {
        let refused = replay(call(id, "mcp__gh__pr", json!({})), action, payload);
        match h.check(refused).await {
            Some(ToolInterceptPayload::SetResult(result)) => {
                assert_eq!(result.status, ToolStatus::Error);
                assert_eq!(result.error_code.as_deref(), Some("permission_denied"));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test]
async fn always_allow_is_remembered_on_the_thread_across_runs() {
    let mut h = Harness::with_rules(RULES);
    let first = call("c1", "mcp__gh__pr", json!({"n": 1}));
    let decision = replay(
        first,
        ResumeDecisionAction::Resume,
        json!({"approved": true, "always_allow": true}),
    );
    assert_eq!(h.check(decision).await, None);
    assert_eq!(h.granted(), ["mcp__gh__pr"]);

    // Same run, other arguments: allowed without asking.
    assert_eq!(
        h.check(call("c2", "mcp__gh__pr", json!({"n": 2}))).await,
        None
    );
    // The grant is for that exact tool, not the `mcp__*` rule that asked.
    assert!(matches!(
        h.check(call("c3", "mcp__gh__issues", json!({}))).await,
        Some(ToolInterceptPayload::Suspend(_))
    ));

    // A new run on the same thread: run-scoped intercepts reset, the grant survives.
    h.store.begin_run();
    assert!(h.store.read::<ToolInterceptKey>().unwrap().is_empty());
    assert_eq!(h.granted(), ["mcp__gh__pr"]);
    assert_eq!(
        h.check(call("c4", "mcp__gh__pr", json!({"n": 3}))).await,
        None
    );
    // ...and it is checkpointed with the thread.
    let exported = h.store.export().unwrap();
    assert_eq!(
        exported.extensions["permission.grants"],
        json!({"tools": ["mcp__gh__pr"]})
    );
}

#[tokio::test]
async fn deny_rules_win_over_grants_and_approvals() {
    let mut h = Harness::with_rules(RULES);
    let bash = call("c1", "Bash", json!({"command": "ls"}));
    let decision = replay(
        bash,
        ResumeDecisionAction::Resume,
        json!({"always_allow": true}),
    );
    assert_eq!(h.check(decision).await, None);
    assert_eq!(h.granted(), ["Bash"]);
    assert_eq!(
        h.check(call("c2", "Bash", json!({"command": "pwd"}))).await,
        None
    );
    assert!(matches!(
        h.check(call("c3", "Bash", json!({"command": "rm -rf /"})))
            .await,
        Some(ToolInterceptPayload::Block { .. })
    ));
    // Even a replayed approval does not get past a deny rule.
    let approved_rm = replay(
        call("c4", "Bash", json!({"command": "rm x"})),
        ResumeDecisionAction::Resume,
        json!({"approved": true}),
    );
    assert!(matches!(
        h.check(approved_rm).await,
        Some(ToolInterceptPayload::Block { .. })
    ));
}

#[tokio::test]
async fn plain_name_denials_are_excluded_before_inference() {
    let mut h = Harness::with_rules(RULES);
    h.before_inference().await.unwrap();
    let filter = h.store.read::<ToolFilterKey>().unwrap();
    assert_eq!(
        filter
            .excluded
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        ["rm"]
    );
    assert!(filter.allows("read_file") && filter.allows("Bash"));
}

#[tokio::test]
async fn agent_sections_add_rules_and_bad_ones_fail_the_hook() {
    let mut h = Harness::new(PermissionPlugin::new(PermissionRules::new(
        PermissionBehavior::Allow,
    )));
    h.spec = Arc::new(AgentSpec::new(AgentId::new("a").unwrap()).with_section(
        "permission",
        json!({"rules": [{"tool": "shutdown", "behavior": "deny"}]}),
    ));
    assert!(matches!(
        h.check(call("c1", "shutdown", json!({}))).await,
        Some(ToolInterceptPayload::Block { .. })
    ));
    assert_eq!(
        h.check(call("c2", "ls", json!({}))).await,
        None,
        "plugin default kept"
    );
    h.before_inference().await.unwrap();
    assert!(!h.store.read::<ToolFilterKey>().unwrap().allows("shutdown"));

    h.spec = Arc::new(AgentSpec::new(AgentId::new("b").unwrap()).with_section(
        "permission",
        json!({"default_behavior": "deny", "rules": [{"tool": "Bash(npm *", "behavior": "allow"}]}),
    ));
    let err = h.try_check(call("c3", "ls", json!({}))).await.unwrap_err();
    match err {
        StateError::HookFailed { source_id, message } => {
            assert_eq!(source_id, "permission/check_tool_permission");
            assert!(message.contains("`Bash(npm *`"), "{message}");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn rules_files_load_by_extension() {
    let dir = std::env::temp_dir().join(format!("awaken-permission-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let yaml = dir.join("permissions.yaml");
    std::fs::write(&yaml, RULES).unwrap();
    let json_path = dir.join("permissions.json");
    std::fs::write(
        &json_path,
        r#"{"default_behavior": "deny", "rules": [{"tool": "ls", "behavior": "allow"}]}"#,
    )
    .unwrap();

    let from_yaml = PermissionRules::from_file(&yaml).unwrap();
    assert_eq!(from_yaml.rules().len(), 6);
    let from_json = PermissionRules::from_file(&json_path).unwrap();
    assert_eq!(from_json.default_behavior(), PermissionBehavior::Deny);
    assert_eq!(
        from_json.evaluate("ls", &json!({})).behavior,
        PermissionBehavior::Allow
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
