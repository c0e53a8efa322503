//! Workload W over HTTP while a backing service fails, and what it must not
//! lose: the outage suites' (`tests/nats_outage.rs`, `tests/store_outage.rs`)
//! shared load and checks. [`IN_FLIGHT`] W runs are kept going at once, each on
//! a new thread submitted through one node and its SSE stream followed through
//! the next; [`WAITING`] runs wait for approval through the outage.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use awaken_actors::contract::AgentEvent;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::support::{self, Node, RunStream, SETTLE, record, tool_starts_per_call};

/// W runs executing at once.
pub(crate) const IN_FLIGHT: usize = 8;
/// Runs waiting for approval through the outage.
pub(crate) const WAITING: usize = 200;
/// How long after its run's end a stream may end (the record's `updated_at`
/// counts whole seconds: one more).
const STREAM_END_SLACK: f64 = 5.0 + 1.0;

pub(crate) fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// One W run as the load saw it.
#[derive(Debug)]
pub(crate) struct Sample {
    run_id: String,
    /// Every HTTP status the run's requests were answered with.
    statuses: Vec<u16>,
    /// The last event of its stream.
    last: Option<AgentEvent>,
    /// When its stream was asked for, and when the response began (unix
    /// seconds): a node whose mailbox replica catches up after a reconnect
    /// looks a run just accepted elsewhere up only once it has.
    stream_asked_at: f64,
    stream_began_at: f64,
    /// When its stream ended (unix seconds).
    stream_ended_at: f64,
}

/// A request's status, recorded; its body.
async fn send(statuses: &mut Vec<u16>, request: reqwest::RequestBuilder) -> reqwest::Response {
    let response = request.send().await.unwrap();
    statuses.push(response.status().as_u16());
    response
}

/// One W run: a new thread and its message through `submit_to`, its stream
/// followed through `follow_on` to its end.
async fn w_run(client: &reqwest::Client, submit_to: &str, follow_on: &str) -> Sample {
    let mut statuses = Vec::new();
    let thread: Value = send(
        &mut statuses,
        client
            .post(format!("{submit_to}/v1/threads"))
            .json(&json!({})),
    )
    .await
    .json()
    .await
    .unwrap_or(Value::Null);
    let Some(thread) = thread["id"].as_str() else {
        let now = unix_now();
        return Sample {
            run_id: String::new(),
            statuses,
            last: None,
            stream_asked_at: now,
            stream_began_at: now,
            stream_ended_at: now,
        };
    };
    let body = json!({"agentId": "bench",
        "messages": [{"role": "user", "content": "echo this"}]});
    let queued: Value = send(
        &mut statuses,
        client
            .post(format!("{submit_to}/v1/threads/{thread}/messages"))
            .json(&body),
    )
    .await
    .json()
    .await
    .unwrap_or(Value::Null);
    let run_id = queued["run_id"].as_str().unwrap_or_default().to_owned();
    let stream_asked_at = unix_now();
    let response = send(
        &mut statuses,
        client.get(format!("{follow_on}/v1/runs/{run_id}/events")),
    )
    .await;
    let stream_began_at = unix_now();
    let mut last = None;
    if response.status() == 200 {
        let mut stream = RunStream::new(response);
        let followed = tokio::time::timeout(SETTLE, async {
            while let Some(event) = stream.next().await {
                last = Some(event.event);
            }
        })
        .await;
        assert!(
            followed.is_ok(),
            "the stream of {run_id} hung: last {last:?}"
        );
    }
    Sample {
        run_id,
        statuses,
        last,
        stream_asked_at,
        stream_began_at,
        stream_ended_at: unix_now(),
    }
}

/// Workload W kept [`IN_FLIGHT`] at a time until told to stop.
pub(crate) struct Load {
    stop: watch::Sender<bool>,
    finished: Arc<AtomicUsize>,
    workers: Vec<tokio::task::JoinHandle<Vec<Sample>>>,
}

impl Load {
    pub(crate) fn start(client: &reqwest::Client, nodes: &[Node]) -> Self {
        let (stop, stopping) = watch::channel(false);
        let finished = Arc::new(AtomicUsize::new(0));
        let bases: Vec<String> = nodes.iter().map(|node| node.base.clone()).collect();
        let workers = (0..IN_FLIGHT)
            .map(|i| {
                let (client, stopping) = (client.clone(), stopping.clone());
                let finished = Arc::clone(&finished);
                let submit_to = bases[i % bases.len()].clone();
                let follow_on = bases[(i + 1) % bases.len()].clone();
                tokio::spawn(async move {
                    let mut samples = Vec::new();
                    while !*stopping.borrow() {
                        samples.push(w_run(&client, &submit_to, &follow_on).await);
                        finished.fetch_add(1, Ordering::SeqCst);
                    }
                    samples
                })
            })
            .collect();
        Self {
            stop,
            finished,
            workers,
        }
    }

    /// Waits (bounded) until `more` runs beyond those finished now have finished.
    pub(crate) async fn finishes(&self, more: usize) {
        let target = self.finished.load(Ordering::SeqCst) + more;
        let deadline = tokio::time::Instant::now() + SETTLE;
        while self.finished.load(Ordering::SeqCst) < target {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the load stalled at {} runs",
                self.finished.load(Ordering::SeqCst)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(crate) async fn stop(self) -> Vec<Sample> {
        self.stop.send_replace(true);
        let mut samples = Vec::new();
        for worker in self.workers {
            samples.extend(worker.await.unwrap());
        }
        samples
    }
}

/// Runs of `bench-hitl` on new threads spread over `nodes`, 16 started at a
/// time, once each waits: (run id, call id).
pub(crate) async fn waiting_runs(
    client: &reqwest::Client,
    nodes: &[Node],
) -> Vec<(String, String)> {
    let bases: Vec<String> = nodes.iter().map(|node| node.base.clone()).collect();
    let mut waiting = Vec::with_capacity(WAITING);
    for batch in (0..WAITING).collect::<Vec<_>>().chunks(16) {
        let started: Vec<_> = batch
            .iter()
            .map(|&i| {
                let (client, base) = (client.clone(), bases[i % bases.len()].clone());
                tokio::spawn(async move {
                    let thread_id = support::new_thread(&client, &base).await;
                    let body = json!({"agentId": "bench-hitl",
                        "messages": [{"role": "user", "content": "echo, once approved"}]});
                    let url = format!("{base}/v1/threads/{thread_id}/messages");
                    let (status, queued) = support::post(&client, url, body).await;
                    assert_eq!(status, 202, "{queued}");
                    let run_id = queued["run_id"].as_str().unwrap().to_owned();
                    let call = support::waiting_call(&client, &base, &run_id).await;
                    (run_id, call)
                })
            })
            .collect();
        for run in started {
            waiting.push(run.await.unwrap());
        }
    }
    waiting
}

/// Runs of the `slow` agent (its tool sleeps 1.5 s) on new threads spread over
/// `nodes`, returned once every one's tool executes (the journal shows it), so
/// an outage begun now catches each in its call: (run id, call id).
pub(crate) async fn runs_in_their_tools(
    client: &reqwest::Client,
    nodes: &[Node],
    journal: &Path,
    count: usize,
) -> Vec<(String, String)> {
    let mut runs = Vec::with_capacity(count);
    for i in 0..count {
        let base = &nodes[i % nodes.len()].base;
        let thread_id = support::new_thread(client, base).await;
        let body = json!({"agentId": "slow",
            "messages": [{"role": "user", "content": "take your time"}]});
        let url = format!("{base}/v1/threads/{thread_id}/messages");
        let (status, queued) = support::post(client, url, body).await;
        assert_eq!(status, 202, "{queued}");
        runs.push(queued["run_id"].as_str().unwrap().to_owned());
    }
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let starts = tool_starts_per_call(journal);
        let calls: Vec<(String, String)> = runs
            .iter()
            .filter_map(|run| {
                let prefix = format!("{run}:");
                let call = starts.keys().find_map(|key| key.strip_prefix(&prefix))?;
                Some((run.clone(), call.to_owned()))
            })
            .collect();
        if calls.len() == count {
            return calls;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {} of {count} slow runs reached their tools",
            calls.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Approves every waiting run, through the nodes in turn: each answered 200
/// at the first try, and applied.
pub(crate) async fn approve_all(
    client: &reqwest::Client,
    nodes: &[Node],
    waiting: &[(String, String)],
) {
    for (i, (run_id, call)) in waiting.iter().enumerate() {
        let base = &nodes[i % nodes.len()].base;
        let decision = json!({"call_id": call, "decision_id": format!("d-{i}"),
            "action": "resume", "result": {"approved": true}});
        let url = format!("{base}/v1/runs/{run_id}/decision");
        let (status, answer) = support::post(client, url, decision).await;
        assert_eq!(status, 200, "the decision for {run_id}: {answer}");
        assert_eq!(answer["duplicate"], false, "{answer}");
    }
}

/// Every W run, and every run of `calls` (approved ones, ones an outage caught
/// in their tool: run and call ids), ended on its own, every stream with its
/// run's `run_finish` within the slack of the run's end (or of NATS being
/// back, `nats_back_at`, for a run that ended while the stream's node could not
/// hear of it, or of the stream's start, for a stream that began after its run
/// ended: how long that took is reported), nothing answered 5xx, and no tool call ran twice, but where the
/// outage outlasted the shard leases (`leases_lapsed`): then a call a node was
/// cut off in (its tenure over, so it stops, decision 0048) starts once more on
/// the next owner, as after a kill in `tests/chaos.rs`.
pub(crate) async fn nothing_lost(
    client: &reqwest::Client,
    base: &str,
    journal: &Path,
    samples: &[Sample],
    calls: &[(String, String)],
    nats_back_at: f64,
    leases_lapsed: bool,
) {
    let failed: Vec<&Sample> = samples
        .iter()
        .filter(|sample| sample.statuses.iter().any(|status| *status >= 500))
        .collect();
    assert!(failed.is_empty(), "requests answered 5xx: {failed:#?}");
    let mut slowest_end: f64 = 0.0;
    let mut slowest_start: f64 = 0.0;
    for sample in samples {
        assert!(
            matches!(sample.last, Some(AgentEvent::RunFinish { .. })),
            "the stream of {} ended without its run_finish: {sample:?}",
            sample.run_id
        );
        let run = support::done_run(client, base, &sample.run_id).await;
        assert_eq!(run["termination"]["type"], "natural_end", "{run}");
        let ended_at = run["updated_at"]
            .as_f64()
            .unwrap()
            .max(nats_back_at)
            .max(sample.stream_began_at);
        slowest_start = slowest_start.max(sample.stream_began_at - sample.stream_asked_at);
        assert!(
            sample.stream_ended_at - ended_at <= STREAM_END_SLACK,
            "the stream of {} ended {:.1} s after its run (or NATS) was back",
            sample.run_id,
            sample.stream_ended_at - ended_at
        );
        slowest_end = slowest_end.max(sample.stream_ended_at - ended_at);
    }
    // What docs/benchmarks.md reports of these runs.
    eprintln!(
        "outage: {} W runs and {} approved or caught runs ended on their own; \
         slowest stream end {slowest_end:.1} s after its run (or NATS) was back; \
         slowest stream start {slowest_start:.1} s",
        samples.len(),
        calls.len()
    );
    for (run_id, _) in calls {
        let run = support::done_run(client, base, run_id).await;
        assert_eq!(run["termination"]["type"], "natural_end", "{run}");
    }
    let most = if leases_lapsed { 2 } else { 1 };
    let starts = tool_starts_per_call(journal);
    let repeated: Vec<_> = starts.iter().filter(|(_, n)| **n > most).collect();
    assert!(
        repeated.is_empty(),
        "calls run more than {most} times: {repeated:?}"
    );
    for (run_id, call) in calls {
        let started = starts.get(&format!("{run_id}:{call}")).copied();
        assert!(
            started.is_some_and(|n| (1..=most).contains(&n)),
            "{run_id}:{call} started {started:?} times"
        );
    }
    eprintln!(
        "outage: {} calls started twice (a node cut off mid-call)",
        starts.values().filter(|n| **n > 1).count()
    );
    assert!(
        record(client, base, &samples[0].run_id).await.is_some(),
        "the node still serves"
    );
}
