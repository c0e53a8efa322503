//! Approvals: written with their checkpoint or not at all, resolved once, listed
//! by filters and a stable cursor, cancelled and kept when their thread goes,
//! owed to the feed until it published them.

use super::*;
use std::time::Duration;

use crate::contract::{
    Approval, ApprovalAnswer, ApprovalChange, ApprovalEvent, ApprovalResolution, ApprovalStatus,
    ApprovalWrite, ResumeDecisionAction, TENANT_KEY,
};
use crate::ids::{ApprovalId, DecisionId, ToolCallId};
use crate::store::now_millis;
use crate::store::{ApprovalQuery, THREAD_DELETED};

/// A pending approval of `run` on `thread` for `tool`, asked for at `requested_at`.
pub fn approval(id: &str, thread: &ThreadId, run: &str, tool: &str, requested_at: u64) -> Approval {
    Approval {
        approval_id: ApprovalId::new(id).unwrap(),
        tenant: None,
        agent_id: AgentId::new("agent").unwrap(),
        thread_id: thread.clone(),
        run_id: rid(run),
        call_id: ToolCallId::new(format!("call-{id}")).unwrap(),
        tool_name: tool.to_owned(),
        arguments: json!({"path": format!("/tmp/{id}")}),
        ticket_id: format!("permission:call-{id}"),
        action: "tool_permission".to_owned(),
        message: format!("Allow {tool}?"),
        parameters: json!({"path": format!("/tmp/{id}")}),
        response_schema: Some(json!({"type": "object"})),
        requested_at,
        expires_at: Some(requested_at + 60_000),
        status: ApprovalStatus::Pending,
        resolved_at: None,
        decision_id: None,
        answer: None,
        cause: None,
    }
}

/// The resolution of an approving decision `decision` at `at`.
fn approved(decision: &str, at: u64) -> ApprovalResolution {
    ApprovalResolution {
        status: ApprovalStatus::Approved,
        resolved_at: at,
        decision_id: Some(DecisionId::new(decision).unwrap()),
        answer: Some(ApprovalAnswer {
            action: ResumeDecisionAction::Resume,
            result: json!({"approved": true}),
            reason: Some("looks fine".to_owned()),
        }),
        cause: None,
    }
}

/// A first checkpoint of `thread`, made by `tenant` when given, asking for `approvals`.
fn asking(
    thread: &ThreadId,
    tenant: Option<&str>,
    run_id: &str,
    approvals: &[Approval],
) -> Checkpoint {
    let mut metadata = ThreadMetadata::default();
    if let Some(tenant) = tenant {
        metadata
            .custom
            .insert(TENANT_KEY.to_owned(), JsonValue::String(tenant.to_owned()));
    }
    let mut first = checkpoint(
        thread,
        1,
        0,
        user_messages("q", 1),
        run(thread, run_id, 100),
    );
    first.new_thread = Some(Box::new(metadata));
    first.approvals = approvals
        .iter()
        .map(|approval| ApprovalWrite::Requested(Box::new(approval.clone())))
        .collect();
    first
}

/// A later checkpoint of `thread` (after `expected` messages) with `writes`.
fn writing(
    thread: &ThreadId,
    expected: u64,
    run_id: &str,
    writes: Vec<ApprovalWrite>,
) -> Checkpoint {
    let mut next = checkpoint(thread, 1, expected, vec![], run(thread, run_id, 100));
    next.approvals = writes;
    next
}

fn ids(approvals: &[Approval]) -> Vec<&str> {
    approvals.iter().map(|a| a.approval_id.as_str()).collect()
}

/// An approval asked for in a checkpoint is there with it, with its thread's
/// tenant; asked for again, it stays as first written; a refused checkpoint
/// writes none.
pub async fn approvals_are_written_with_their_checkpoint<S: ThreadRunStore + ?Sized>(store: &S) {
    let id = tid("t-approvals");
    let first = approval("a-1", &id, "r1", "delete_file", 1_000);
    store
        .checkpoint(asking(
            &id,
            Some("acme"),
            "r1",
            std::slice::from_ref(&first),
        ))
        .await
        .unwrap();
    let stored = store
        .load_approval(&first.approval_id)
        .await
        .unwrap()
        .expect("written with its checkpoint");
    let mut expected = first.clone();
    expected.tenant = Some("acme".to_owned());
    assert_eq!(stored, expected);

    let mut changed = first.clone();
    changed.message = "something else".to_owned();
    store
        .checkpoint(writing(
            &id,
            1,
            "r1",
            vec![ApprovalWrite::Requested(Box::new(changed))],
        ))
        .await
        .unwrap();
    assert_eq!(
        store.load_approval(&first.approval_id).await.unwrap(),
        Some(expected)
    );

    let refused = writing(
        &id,
        7,
        "r1",
        vec![ApprovalWrite::Requested(Box::new(approval(
            "a-refused",
            &id,
            "r1",
            "delete_file",
            2_000,
        )))],
    );
    let error = store.checkpoint(refused).await.unwrap_err();
    assert!(
        matches!(error, StorageError::VersionConflict { .. }),
        "{error:?}"
    );
    assert_eq!(
        store
            .load_approval(&ApprovalId::new("a-refused").unwrap())
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store
            .load_approval(&ApprovalId::new("never-asked").unwrap())
            .await
            .unwrap(),
        None
    );
}

/// An approval keeps the first resolution written: a later one (a decision
/// arriving late, the run's end cancelling what it left) changes nothing.
pub async fn an_approval_keeps_its_first_resolution<S: ThreadRunStore + ?Sized>(store: &S) {
    let id = tid("t-resolved");
    let asked = approval("a-resolved", &id, "r1", "delete_file", 1_000);
    store
        .checkpoint(asking(&id, None, "r1", std::slice::from_ref(&asked)))
        .await
        .unwrap();
    let resolution = approved("d-1", 5_000);
    store
        .checkpoint(writing(
            &id,
            1,
            "r1",
            vec![
                ApprovalWrite::Resolved {
                    approval_id: asked.approval_id.clone(),
                    resolution: resolution.clone(),
                },
                ApprovalWrite::Resolved {
                    approval_id: asked.approval_id.clone(),
                    resolution: ApprovalResolution::cancelled("run_cancelled", 6_000),
                },
            ],
        ))
        .await
        .unwrap();
    let stored = store
        .load_approval(&asked.approval_id)
        .await
        .unwrap()
        .unwrap();
    let mut expected = asked.clone();
    assert!(expected.resolve(&resolution));
    assert_eq!(stored, expected);
    assert_eq!(stored.status, ApprovalStatus::Approved);
    assert_eq!(stored.resolved_at, Some(5_000));

    store
        .checkpoint(writing(
            &id,
            1,
            "r1",
            vec![ApprovalWrite::Resolved {
                approval_id: asked.approval_id.clone(),
                resolution: ApprovalResolution::cancelled("run_error", 7_000),
            }],
        ))
        .await
        .unwrap();
    assert_eq!(
        store.load_approval(&asked.approval_id).await.unwrap(),
        Some(expected)
    );
}

/// The inbox lists approvals oldest request first, by each filter, page after
/// page without skipping or repeating one, also while new ones are asked for.
pub async fn approvals_list_filters_and_pages<S: ThreadRunStore + ?Sized>(store: &S) {
    let acme = tid("t-list-acme");
    let globex = tid("t-list-globex");
    let acme_approvals: Vec<Approval> = (0..5)
        .map(|n| {
            let tool = if n % 2 == 0 {
                "delete_file"
            } else {
                "send_mail"
            };
            approval(&format!("acme-{n}"), &acme, "r-acme", tool, 1_000 + n * 10)
        })
        .collect();
    let mut globex_approvals: Vec<Approval> = (0..3)
        .map(|n| {
            approval(
                &format!("globex-{n}"),
                &globex,
                "r-globex",
                "delete_file",
                1_005 + n * 10,
            )
        })
        .collect();
    for approval in &mut globex_approvals {
        approval.agent_id = AgentId::new("other-agent").unwrap();
    }
    store
        .checkpoint(asking(&acme, Some("acme"), "r-acme", &acme_approvals))
        .await
        .unwrap();
    store
        .checkpoint(asking(
            &globex,
            Some("globex"),
            "r-globex",
            &globex_approvals,
        ))
        .await
        .unwrap();
    store
        .checkpoint(writing(
            &acme,
            1,
            "r-acme",
            vec![ApprovalWrite::Resolved {
                approval_id: acme_approvals[1].approval_id.clone(),
                resolution: approved("d-acme-1", 9_000),
            }],
        ))
        .await
        .unwrap();

    let list = |query: ApprovalQuery| async move { store.list_approvals(&query).await.unwrap() };
    let all = list(ApprovalQuery::default()).await;
    assert_eq!(
        ids(&all.items),
        [
            "acme-0", "globex-0", "acme-1", "globex-1", "acme-2", "globex-2", "acme-3", "acme-4"
        ]
    );
    assert_eq!(all.next_cursor, None);

    let tenant = list(ApprovalQuery {
        tenant: Some("globex".to_owned()),
        ..ApprovalQuery::default()
    })
    .await;
    assert_eq!(ids(&tenant.items), ["globex-0", "globex-1", "globex-2"]);
    let pending_acme = list(ApprovalQuery {
        tenant: Some("acme".to_owned()),
        status: Some(ApprovalStatus::Pending),
        ..ApprovalQuery::default()
    })
    .await;
    assert_eq!(
        ids(&pending_acme.items),
        ["acme-0", "acme-2", "acme-3", "acme-4"]
    );
    let approved_only = list(ApprovalQuery {
        status: Some(ApprovalStatus::Approved),
        ..ApprovalQuery::default()
    })
    .await;
    assert_eq!(ids(&approved_only.items), ["acme-1"]);
    assert_eq!(
        approved_only.items[0]
            .decision_id
            .as_ref()
            .map(|d| d.as_str()),
        Some("d-acme-1")
    );
    let by_tool = list(ApprovalQuery {
        tool_name: Some("send_mail".to_owned()),
        ..ApprovalQuery::default()
    })
    .await;
    assert_eq!(ids(&by_tool.items), ["acme-1", "acme-3"]);
    let by_agent = list(ApprovalQuery {
        agent_id: Some(AgentId::new("other-agent").unwrap()),
        status: Some(ApprovalStatus::Pending),
        ..ApprovalQuery::default()
    })
    .await;
    assert_eq!(ids(&by_agent.items), ["globex-0", "globex-1", "globex-2"]);
    let by_thread = list(ApprovalQuery {
        thread_id: Some(acme.clone()),
        ..ApprovalQuery::default()
    })
    .await;
    assert_eq!(by_thread.items.len(), 5);
    let by_age = list(ApprovalQuery {
        requested_from: Some(1_010),
        requested_before: Some(1_030),
        ..ApprovalQuery::default()
    })
    .await;
    assert_eq!(
        ids(&by_age.items),
        ["acme-1", "globex-1", "acme-2", "globex-2"]
    );
    let nobody = list(ApprovalQuery {
        tenant: Some("initech".to_owned()),
        ..ApprovalQuery::default()
    })
    .await;
    assert!(nobody.items.is_empty());

    // Pages of three, with a new approval asked for between two pages.
    let page = |after| ApprovalQuery {
        after,
        limit: 3,
        ..ApprovalQuery::default()
    };
    let first = list(page(None)).await;
    assert_eq!(ids(&first.items), ["acme-0", "globex-0", "acme-1"]);
    let late = approval("acme-late", &acme, "r-acme", "delete_file", 50_000);
    store
        .checkpoint(writing(
            &acme,
            1,
            "r-acme",
            vec![ApprovalWrite::Requested(Box::new(late))],
        ))
        .await
        .unwrap();
    let second = list(page(first.next_cursor.clone())).await;
    assert_eq!(ids(&second.items), ["globex-1", "acme-2", "globex-2"]);
    let third = list(page(second.next_cursor.clone())).await;
    assert_eq!(ids(&third.items), ["acme-3", "acme-4", "acme-late"]);
    assert_eq!(third.next_cursor, None, "nothing after the last page");
    let filtered = list(ApprovalQuery {
        status: Some(ApprovalStatus::Pending),
        after: first.next_cursor,
        limit: 2,
        ..ApprovalQuery::default()
    })
    .await;
    assert_eq!(ids(&filtered.items), ["globex-1", "acme-2"]);
    assert!(filtered.next_cursor.is_some());
}

/// Deleting a thread cancels its open approvals, with the cause, and keeps them
/// all: what was decided stays decided, and both can still be read and listed.
pub async fn deleting_a_thread_cancels_its_approvals<S: ThreadRunStore + ?Sized>(store: &S) {
    let id = tid("t-deleted-approvals");
    let open = approval("a-open", &id, "r1", "delete_file", 1_000);
    let decided = approval("a-decided", &id, "r1", "delete_file", 1_001);
    let elsewhere = approval("a-elsewhere", &tid("t-kept"), "r2", "delete_file", 1_002);
    store
        .checkpoint(asking(&id, None, "r1", &[open.clone(), decided.clone()]))
        .await
        .unwrap();
    store
        .checkpoint(asking(
            &tid("t-kept"),
            None,
            "r2",
            std::slice::from_ref(&elsewhere),
        ))
        .await
        .unwrap();
    store
        .checkpoint(writing(
            &id,
            1,
            "r1",
            vec![ApprovalWrite::Resolved {
                approval_id: decided.approval_id.clone(),
                resolution: approved("d-1", 2_000),
            }],
        ))
        .await
        .unwrap();
    store.delete_thread(&id).await.unwrap();

    let cancelled = store
        .load_approval(&open.approval_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(cancelled.status, ApprovalStatus::Cancelled);
    assert_eq!(cancelled.cause.as_deref(), Some(THREAD_DELETED));
    assert!(cancelled.resolved_at.is_some());
    let kept = store
        .load_approval(&decided.approval_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(kept.status, ApprovalStatus::Approved);
    assert_eq!(kept.resolved_at, Some(2_000));
    let other = store
        .load_approval(&elsewhere.approval_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        other.status,
        ApprovalStatus::Pending,
        "another thread's stays"
    );
    let listed = store
        .list_approvals(&ApprovalQuery {
            thread_id: Some(id.clone()),
            ..ApprovalQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(ids(&listed.items), ["a-open", "a-decided"]);
}

fn changes(changes: &[ApprovalChange]) -> Vec<(&str, ApprovalEvent, ApprovalStatus)> {
    changes
        .iter()
        .map(|change| {
            (
                change.approval.approval_id.as_str(),
                change.event,
                change.approval.status,
            )
        })
        .collect()
}

/// Every change a write makes is returned by it and owed to the feed, as the
/// approval was right after it, until it is marked published; a change made
/// within `older_than` is not owed yet.
pub async fn the_feed_is_owed_every_change_until_published<S: ThreadRunStore + ?Sized>(store: &S) {
    use ApprovalEvent::{Requested, Resolved};
    use ApprovalStatus::{Approved, Cancelled, Pending};
    let id = tid("t-feed");
    let first = approval("a-1", &id, "r1", "delete_file", 1_000);
    let second = approval("a-2", &id, "r1", "delete_file", 1_001);
    let asked = store
        .checkpoint(asking(&id, Some("acme"), "r1", &[first.clone(), second]))
        .await
        .unwrap();
    assert_eq!(
        changes(&asked),
        [("a-1", Requested, Pending), ("a-2", Requested, Pending)]
    );
    assert!(
        asked
            .iter()
            .all(|change| change.approval.tenant.as_deref() == Some("acme"))
    );
    let resolve = |approval_id: &Approval, resolution| ApprovalWrite::Resolved {
        approval_id: approval_id.approval_id.clone(),
        resolution,
    };
    let decided = store
        .checkpoint(writing(
            &id,
            1,
            "r1",
            vec![resolve(&first, approved("d-1", 2_000))],
        ))
        .await
        .unwrap();
    assert_eq!(changes(&decided), [("a-1", Resolved, Approved)]);
    assert_eq!(decided[0].approval.tenant.as_deref(), Some("acme"));
    let late = store
        .checkpoint(writing(
            &id,
            1,
            "r1",
            vec![resolve(
                &first,
                ApprovalResolution::cancelled("run_cancelled", 3_000),
            )],
        ))
        .await
        .unwrap();
    assert!(late.is_empty(), "a resolution that did not apply: {late:?}");

    let owed = store
        .unpublished_approvals(Duration::ZERO, 10)
        .await
        .unwrap();
    assert_eq!(
        changes(&owed),
        [
            ("a-1", Requested, Pending),
            ("a-1", Resolved, Approved),
            ("a-2", Requested, Pending)
        ],
        "each change as it was made, oldest request first"
    );
    assert_eq!(owed[0].approval, {
        let mut requested = first.clone();
        requested.tenant = Some("acme".to_owned());
        requested
    });
    assert_eq!(
        store
            .unpublished_approvals(Duration::ZERO, 1)
            .await
            .unwrap()
            .len(),
        1
    );

    store
        .approvals_published(&[
            (first.approval_id.clone(), Requested),
            (ApprovalId::new("a-2").unwrap(), Requested),
            (ApprovalId::new("a-unknown").unwrap(), Resolved),
        ])
        .await
        .unwrap();
    let owed = store
        .unpublished_approvals(Duration::ZERO, 10)
        .await
        .unwrap();
    assert_eq!(changes(&owed), [("a-1", Resolved, Approved)]);

    let recent = approval("a-recent", &id, "r1", "delete_file", now_millis());
    store
        .checkpoint(writing(
            &id,
            1,
            "r1",
            vec![ApprovalWrite::Requested(Box::new(recent))],
        ))
        .await
        .unwrap();
    let owed = store
        .unpublished_approvals(Duration::from_secs(3600), 10)
        .await
        .unwrap();
    assert_eq!(
        changes(&owed),
        [("a-1", Resolved, Approved)],
        "a change younger than `older_than` is the announcer's still"
    );

    let cancelled = store.delete_thread(&id).await.unwrap();
    let mut cancelled = changes(&cancelled);
    cancelled.sort_by_key(|(id, _, _)| *id);
    assert_eq!(
        cancelled,
        [
            ("a-2", Resolved, Cancelled),
            ("a-recent", Resolved, Cancelled)
        ]
    );
    store
        .approvals_published(&[(first.approval_id.clone(), Resolved)])
        .await
        .unwrap();
    let owed = store
        .unpublished_approvals(Duration::ZERO, 10)
        .await
        .unwrap();
    assert_eq!(
        changes(&owed),
        [
            ("a-2", Resolved, Cancelled),
            ("a-recent", Requested, Pending),
            ("a-recent", Resolved, Cancelled)
        ]
    );
}
