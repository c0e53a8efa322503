//! Webhooks on runs: configs, the per-run maximum, leases and delivery progress.

use super::*;

/// The secret every [`webhook`]'s config carries; it must never reach a `Debug` output.
pub const WEBHOOK_TOKEN: &str = "webhook-secret-7f3a9c";

/// A webhook id from a literal.
pub fn wid(id: &str) -> WebhookId {
    WebhookId::new(id).unwrap()
}

/// A new webhook `id` on run `run` of `thread`, stored at `created_at`; its config
/// names a receiver and carries [`WEBHOOK_TOKEN`].
pub fn webhook(thread: &ThreadId, run: &str, id: &str, created_at: u64) -> Webhook {
    Webhook {
        run_id: rid(run),
        thread_id: thread.clone(),
        id: wid(id),
        config: json!({
            "url": format!("https://receiver.example/{id}"),
            "token": WEBHOOK_TOKEN,
        }),
        progress: JsonValue::Null,
        done: false,
        dead_letters: Vec::new(),
        created_at,
    }
}

/// A claim by `holder` at `now_ms` until `until_ms`, of up to 100 webhooks of any run.
fn claim_by(holder: &str, now_ms: u64, until_ms: u64) -> WebhookClaim {
    WebhookClaim {
        holder: holder.to_owned(),
        now_ms,
        until_ms,
        limit: 100,
        run_id: None,
    }
}

/// An advance recording `progress`, not done, without a dead letter.
fn progress_until(progress: JsonValue, lease_until_ms: u64) -> WebhookAdvance {
    WebhookAdvance {
        progress,
        done: false,
        dead_letter: None,
        lease_until_ms,
    }
}

/// `run/id` of each webhook, in order.
fn hook_keys(webhooks: &[Webhook]) -> Vec<String> {
    webhooks
        .iter()
        .map(|webhook| format!("{}/{}", webhook.run_id, webhook.id))
        .collect()
}

async fn claimed_keys<S: ThreadRunStore + ?Sized>(store: &S, claim: &WebhookClaim) -> Vec<String> {
    hook_keys(&store.webhooks().claim_webhooks(claim).await.unwrap())
}

/// A put webhook loads back whole; a run's webhooks list oldest first, ties by
/// id; a run without any has none; neither run nor thread needs to exist.
pub async fn webhook_put_and_load<S: ThreadRunStore + ?Sized>(store: &S) {
    let hooks = store.webhooks();
    let thread = tid("t-hooks");
    assert!(
        hooks
            .load_webhooks(&rid("r-none"))
            .await
            .unwrap()
            .is_empty()
    );

    let mut first = webhook(&thread, "r1", "b", 20);
    first.config["nested"] = json!({"list": [1, "two", null], "ü": true});
    let stored = hooks.put_webhook(first.clone(), 10).await.unwrap();
    assert_eq!(stored, first);
    for (run, id, created_at) in [("r1", "a", 20), ("r1", "c", 10), ("r2", "z", 5)] {
        hooks
            .put_webhook(webhook(&thread, run, id, created_at), 10)
            .await
            .unwrap();
    }

    let loaded = hooks.load_webhooks(&rid("r1")).await.unwrap();
    assert_eq!(hook_keys(&loaded), ["r1/c", "r1/a", "r1/b"]);
    assert_eq!(loaded[2], first, "config, progress and all round-trip");
    assert_eq!(loaded[0], webhook(&thread, "r1", "c", 10));
    assert_eq!(
        hook_keys(&hooks.load_webhooks(&rid("r2")).await.unwrap()),
        ["r2/z"]
    );
    assert_eq!(store.load_thread(&thread).await.unwrap(), None);
    assert_eq!(store.load_run(&rid("r1")).await.unwrap(), None);
}

/// Putting a webhook id the run has already replaces its config only: progress,
/// dead letters, creation time and lease are kept, and a done webhook is
/// delivered to again.
pub async fn webhook_put_again_replaces_the_config<S: ThreadRunStore + ?Sized>(store: &S) {
    let hooks = store.webhooks();
    let thread = tid("t-hooks");
    let (run, id) = (rid("r1"), wid("w"));
    hooks
        .put_webhook(webhook(&thread, "r1", "w", 10), 10)
        .await
        .unwrap();
    assert_eq!(
        claimed_keys(store, &claim_by("n1", 100, 1_000)).await,
        ["r1/w"]
    );
    let finished = WebhookAdvance {
        progress: json!({"sent": 3}),
        done: true,
        dead_letter: Some(json!({"status": "lost"})),
        lease_until_ms: 1_000,
    };
    assert!(
        hooks
            .advance_webhook(&run, &id, "n1", &finished)
            .await
            .unwrap()
    );

    let mut again = webhook(&thread, "r1", "w", 99);
    again.config = json!({"url": "https://receiver.example/new"});
    again.progress = json!("ignored");
    again.done = true;
    again.dead_letters = vec![json!("ignored")];
    let stored = hooks.put_webhook(again, 10).await.unwrap();

    let mut expected = webhook(&thread, "r1", "w", 10);
    expected.config = json!({"url": "https://receiver.example/new"});
    expected.progress = json!({"sent": 3});
    expected.dead_letters = vec![json!({"status": "lost"})];
    assert_eq!(stored, expected);
    assert_eq!(hooks.load_webhooks(&run).await.unwrap(), vec![expected]);
    // The lease is n1's still, until 1000.
    assert!(
        claimed_keys(store, &claim_by("n2", 500, 2_000))
            .await
            .is_empty()
    );
    assert!(
        hooks
            .advance_webhook(&run, &id, "n1", &progress_until(json!({"sent": 4}), 1_000))
            .await
            .unwrap()
    );
    assert_eq!(
        claimed_keys(store, &claim_by("n2", 1_000, 2_000)).await,
        ["r1/w"]
    );
}

/// A new webhook beyond `max_per_run` is `InvalidInput` and changes nothing;
/// replacing one of a run at the most is fine, and other runs count on their own.
pub async fn webhook_max_per_run_refuses_new_ones_only<S: ThreadRunStore + ?Sized>(store: &S) {
    let hooks = store.webhooks();
    let thread = tid("t-hooks");
    let run = rid("r1");
    for (id, created_at) in [("w1", 1), ("w2", 2)] {
        hooks
            .put_webhook(webhook(&thread, "r1", id, created_at), 2)
            .await
            .unwrap();
    }
    let before = hooks.load_webhooks(&run).await.unwrap();

    let err = hooks
        .put_webhook(webhook(&thread, "r1", "w3", 3), 2)
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::InvalidInput(_)), "{err:?}");
    assert_eq!(hooks.load_webhooks(&run).await.unwrap(), before);

    let mut replaced = webhook(&thread, "r1", "w1", 1);
    replaced.config = json!({"url": "https://receiver.example/moved"});
    hooks.put_webhook(replaced.clone(), 2).await.unwrap();
    assert_eq!(hooks.load_webhooks(&run).await.unwrap()[0], replaced);

    hooks
        .put_webhook(webhook(&thread, "r2", "w3", 3), 2)
        .await
        .expect("another run has its own count");
    let err = hooks
        .put_webhook(webhook(&thread, "r3", "w1", 1), 0)
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::InvalidInput(_)), "{err:?}");
    assert!(hooks.load_webhooks(&rid("r3")).await.unwrap().is_empty());
}

/// Deleting a webhook is `true` once, then `false`; a deleted webhook is not claimed.
pub async fn webhook_delete<S: ThreadRunStore + ?Sized>(store: &S) {
    let hooks = store.webhooks();
    let thread = tid("t-hooks");
    let run = rid("r1");
    for (id, created_at) in [("w1", 1), ("w2", 2)] {
        hooks
            .put_webhook(webhook(&thread, "r1", id, created_at), 10)
            .await
            .unwrap();
    }
    assert!(hooks.delete_webhook(&run, &wid("w1")).await.unwrap());
    assert!(!hooks.delete_webhook(&run, &wid("w1")).await.unwrap());
    assert!(
        !hooks
            .delete_webhook(&rid("r-none"), &wid("w2"))
            .await
            .unwrap()
    );
    assert_eq!(
        hook_keys(&hooks.load_webhooks(&run).await.unwrap()),
        ["r1/w2"]
    );
    assert_eq!(
        claimed_keys(store, &claim_by("n1", 1, 100)).await,
        ["r1/w2"]
    );

    assert!(hooks.delete_webhook(&run, &wid("w2")).await.unwrap());
    assert!(hooks.load_webhooks(&run).await.unwrap().is_empty());
    assert!(
        claimed_keys(store, &claim_by("n2", 1_000, 2_000))
            .await
            .is_empty()
    );
}

/// A claim leases, oldest first and up to its limit, the webhooks not done whose
/// lease ended, whoever held it; a live lease, even the claiming holder's own, is
/// left alone; a claim for one run takes only that run's.
pub async fn webhook_claims_follow_the_leases<S: ThreadRunStore + ?Sized>(store: &S) {
    let hooks = store.webhooks();
    let thread = tid("t-hooks");
    for (run, id, created_at) in [("r1", "b", 2), ("r2", "c", 3), ("r1", "a", 1)] {
        hooks
            .put_webhook(webhook(&thread, run, id, created_at), 10)
            .await
            .unwrap();
    }
    let limited = WebhookClaim {
        limit: 2,
        ..claim_by("n1", 100, 200)
    };
    assert_eq!(claimed_keys(store, &limited).await, ["r1/a", "r1/b"]);
    assert_eq!(
        claimed_keys(store, &claim_by("n2", 150, 300)).await,
        ["r2/c"],
        "a and b are n1's until 200"
    );
    assert!(
        claimed_keys(store, &claim_by("n1", 199, 400))
            .await
            .is_empty(),
        "a holder's own live leases are not claimed again"
    );
    assert!(
        claimed_keys(store, &claim_by("n3", 199, 500))
            .await
            .is_empty()
    );
    assert_eq!(
        claimed_keys(store, &claim_by("n3", 200, 500)).await,
        ["r1/a", "r1/b"],
        "n1's leases ended at 200; c is n2's until 300"
    );
    assert_eq!(
        claimed_keys(store, &claim_by("n2", 300, 600)).await,
        ["r2/c"],
        "a holder's own lease that ended is claimed like any other"
    );

    let one_run = WebhookClaim {
        run_id: Some(rid("r2")),
        ..claim_by("n4", 1_000, 2_000)
    };
    assert_eq!(claimed_keys(store, &one_run).await, ["r2/c"]);
    let one = WebhookClaim {
        limit: 1,
        ..claim_by("n4", 1_000, 2_000)
    };
    assert_eq!(claimed_keys(store, &one).await, ["r1/a"]);
    let none = WebhookClaim {
        limit: 0,
        ..claim_by("n5", 10_000, 20_000)
    };
    assert!(claimed_keys(store, &none).await.is_empty());
    let absent = WebhookClaim {
        run_id: Some(rid("r-none")),
        ..claim_by("n5", 10_000, 20_000)
    };
    assert!(claimed_keys(store, &absent).await.is_empty());
}

/// The holder's advance records progress and done, appends the dead letter and
/// renews the lease; anybody else's, or the old holder's once another node claimed
/// the webhook, is `false` and changes nothing.
pub async fn webhook_advance_needs_the_lease<S: ThreadRunStore + ?Sized>(store: &S) {
    let hooks = store.webhooks();
    let thread = tid("t-hooks");
    let (run, id) = (rid("r1"), wid("w"));
    hooks
        .put_webhook(webhook(&thread, "r1", "w", 1), 10)
        .await
        .unwrap();
    let nobody = progress_until(json!("x"), 5_000);
    assert!(
        !hooks
            .advance_webhook(&run, &id, "n1", &nobody)
            .await
            .unwrap(),
        "nobody holds a webhook never claimed"
    );
    assert_eq!(
        claimed_keys(store, &claim_by("n1", 100, 200)).await,
        ["r1/w"]
    );
    let untouched = hooks.load_webhooks(&run).await.unwrap();

    assert!(
        !hooks
            .advance_webhook(&run, &id, "n2", &nobody)
            .await
            .unwrap()
    );
    assert!(
        !hooks
            .advance_webhook(&run, &wid("other"), "n1", &nobody)
            .await
            .unwrap()
    );
    assert!(
        !hooks
            .advance_webhook(&rid("r-none"), &id, "n1", &nobody)
            .await
            .unwrap()
    );
    assert_eq!(hooks.load_webhooks(&run).await.unwrap(), untouched);

    for (n, until) in [(1, 250), (2, 300)] {
        let advance = WebhookAdvance {
            progress: json!({"sent": n}),
            done: false,
            dead_letter: Some(json!({"lost": n})),
            lease_until_ms: until,
        };
        assert!(
            hooks
                .advance_webhook(&run, &id, "n1", &advance)
                .await
                .unwrap()
        );
    }
    let mut expected = webhook(&thread, "r1", "w", 1);
    expected.progress = json!({"sent": 2});
    expected.dead_letters = vec![json!({"lost": 1}), json!({"lost": 2})];
    assert_eq!(
        hooks.load_webhooks(&run).await.unwrap(),
        vec![expected.clone()]
    );
    // A lease that ended is still the holder's while nobody claimed it since.
    assert!(
        hooks
            .advance_webhook(&run, &id, "n1", &progress_until(json!({"sent": 2}), 300))
            .await
            .unwrap()
    );

    assert!(
        claimed_keys(store, &claim_by("n2", 299, 900))
            .await
            .is_empty(),
        "renewed until 300"
    );
    assert_eq!(
        claimed_keys(store, &claim_by("n2", 300, 900)).await,
        ["r1/w"]
    );
    let late = WebhookAdvance {
        progress: json!("late"),
        done: true,
        dead_letter: Some(json!("late")),
        lease_until_ms: 10_000,
    };
    assert!(!hooks.advance_webhook(&run, &id, "n1", &late).await.unwrap());
    assert_eq!(hooks.load_webhooks(&run).await.unwrap(), vec![expected]);
    assert!(
        hooks
            .advance_webhook(&run, &id, "n2", &progress_until(json!({"sent": 3}), 900))
            .await
            .unwrap()
    );
    assert!(hooks.delete_webhook(&run, &id).await.unwrap());
    assert!(
        !hooks
            .advance_webhook(&run, &id, "n2", &progress_until(json!({"sent": 4}), 900))
            .await
            .unwrap(),
        "a deleted webhook has no holder"
    );
}

/// A webhook advanced as done is never claimed again (until it is put again); a
/// lease advanced to end at `0` lets another holder claim at once.
pub async fn webhook_done_and_handed_back<S: ThreadRunStore + ?Sized>(store: &S) {
    let hooks = store.webhooks();
    let thread = tid("t-hooks");
    let run = rid("r1");
    for (id, created_at) in [("w1", 1), ("w2", 2)] {
        hooks
            .put_webhook(webhook(&thread, "r1", id, created_at), 10)
            .await
            .unwrap();
    }
    assert_eq!(
        claimed_keys(store, &claim_by("n1", 100, 1_000)).await,
        ["r1/w1", "r1/w2"]
    );
    let done = WebhookAdvance {
        progress: json!({"final": true}),
        done: true,
        dead_letter: None,
        lease_until_ms: 1_000,
    };
    assert!(
        hooks
            .advance_webhook(&run, &wid("w1"), "n1", &done)
            .await
            .unwrap()
    );
    let handed_back = progress_until(json!({"sent": 1}), 0);
    assert!(
        hooks
            .advance_webhook(&run, &wid("w2"), "n1", &handed_back)
            .await
            .unwrap()
    );

    assert_eq!(
        claimed_keys(store, &claim_by("n2", 101, 2_000)).await,
        ["r1/w2"],
        "w2 was handed back, w1 is done"
    );
    assert!(
        claimed_keys(store, &claim_by("n1", 5_000, 6_000))
            .await
            .iter()
            .all(|key| key != "r1/w1"),
        "done is never claimed, not even by its holder"
    );
    let loaded = hooks.load_webhooks(&run).await.unwrap();
    assert!(loaded[0].done && !loaded[1].done);

    hooks
        .put_webhook(webhook(&thread, "r1", "w1", 1), 10)
        .await
        .unwrap();
    let claimed = claimed_keys(store, &claim_by("n3", 10_000, 11_000)).await;
    assert_eq!(
        claimed,
        ["r1/w1", "r1/w2"],
        "put again, w1 is delivered to again"
    );
}

/// Deleting a thread deletes the webhooks of its runs (also of runs it has not
/// stored yet) and no others; deleting an unknown thread deletes none.
pub async fn webhook_delete_thread_deletes_the_threads_webhooks<S: ThreadRunStore + ?Sized>(
    store: &S,
) {
    let hooks = store.webhooks();
    let (gone, kept, absent) = (tid("t-gone"), tid("t-kept"), tid("t-absent"));
    for (thread, run_id) in [(&gone, "r-gone"), (&kept, "r-kept")] {
        store
            .checkpoint(checkpoint(
                thread,
                0,
                0,
                user_messages("m", 1),
                run(thread, run_id, 1),
            ))
            .await
            .unwrap();
    }
    for (thread, run, id, created_at) in [
        (&gone, "r-gone", "w1", 1),
        (&gone, "r-gone-later", "w2", 2),
        (&kept, "r-kept", "w3", 3),
        (&absent, "r-absent", "w4", 4),
    ] {
        hooks
            .put_webhook(webhook(thread, run, id, created_at), 10)
            .await
            .unwrap();
    }

    store.delete_thread(&gone).await.unwrap();
    assert!(
        hooks
            .load_webhooks(&rid("r-gone"))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        hooks
            .load_webhooks(&rid("r-gone-later"))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        hook_keys(&hooks.load_webhooks(&rid("r-kept")).await.unwrap()),
        ["r-kept/w3"]
    );

    let err = store.delete_thread(&absent).await.unwrap_err();
    assert!(matches!(err, StorageError::NotFound(_)), "{err:?}");
    assert_eq!(
        claimed_keys(store, &claim_by("n1", 1, 100)).await,
        ["r-kept/w3", "r-absent/w4"]
    );
}

/// A webhook's `Debug` leaves its config, and the receiver's token in it, out.
pub async fn webhook_debug_leaves_the_config_out<S: ThreadRunStore + ?Sized>(store: &S) {
    let hooks = store.webhooks();
    let stored = hooks
        .put_webhook(webhook(&tid("t-hooks"), "r1", "w", 1), 10)
        .await
        .unwrap();
    let claimed = hooks.claim_webhooks(&claim_by("n1", 1, 100)).await.unwrap();
    let loaded = hooks.load_webhooks(&rid("r1")).await.unwrap();
    for shown in [
        format!("{stored:?}"),
        format!("{claimed:?}"),
        format!("{loaded:#?}"),
    ] {
        assert!(shown.contains("Webhook"), "{shown}");
        assert!(!shown.contains(WEBHOOK_TOKEN), "the token leaked: {shown}");
        assert!(
            !shown.contains("receiver.example"),
            "the config leaked: {shown}"
        );
    }
}

/// Nodes claiming at the same moment never lease one webhook to two of them.
pub async fn webhook_concurrent_claims_lease_each_once<S: ThreadRunStore>(store: Arc<S>) {
    const WEBHOOKS: u64 = 24;
    let thread = tid("t-hooks");
    for i in 0..WEBHOOKS {
        store
            .webhooks()
            .put_webhook(
                webhook(&thread, &format!("r{}", i % 5), &format!("w{i}"), i),
                100,
            )
            .await
            .unwrap();
    }
    let claimers: Vec<_> = (0..4)
        .map(|node| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let claim = WebhookClaim {
                    limit: 3,
                    ..claim_by(&format!("n{node}"), 1_000, 60_000)
                };
                let mut claimed = Vec::new();
                loop {
                    let got = store.webhooks().claim_webhooks(&claim).await.unwrap();
                    if got.is_empty() {
                        return claimed;
                    }
                    claimed.extend(hook_keys(&got));
                }
            })
        })
        .collect();
    let mut all = Vec::new();
    for claimer in claimers {
        all.extend(claimer.await.unwrap());
    }
    let distinct: BTreeSet<&String> = all.iter().collect();
    assert_eq!(distinct.len(), all.len(), "leased twice: {all:?}");
    assert_eq!(all.len() as u64, WEBHOOKS);
}

/// New webhooks put on one run at the same moment never exceed its most.
pub async fn webhook_concurrent_puts_respect_the_max<S: ThreadRunStore>(store: Arc<S>) {
    const MAX: usize = 3;
    let thread = tid("t-hooks");
    for round in 0..5 {
        let run = format!("r-race-{round}");
        let putters: Vec<_> = (0..8)
            .map(|i| {
                let store = Arc::clone(&store);
                let hook = webhook(&thread, &run, &format!("w{i}"), i);
                tokio::spawn(async move { store.webhooks().put_webhook(hook, MAX).await })
            })
            .collect();
        let mut stored = 0;
        for putter in putters {
            match putter.await.unwrap() {
                Ok(_) => stored += 1,
                Err(StorageError::InvalidInput(_)) => {}
                Err(err) => panic!("round {round}: {err}"),
            }
        }
        assert_eq!(stored, MAX, "round {round}");
        let loaded = store.webhooks().load_webhooks(&rid(&run)).await.unwrap();
        assert_eq!(loaded.len(), MAX, "round {round}");
    }
}
