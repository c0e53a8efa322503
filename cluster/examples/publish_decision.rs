//! Deciding a waiting tool call from a program of your own, over NATS.
//!
//! An Awaken cluster takes approval decisions from the JetStream stream
//! `AWAKEN_DECISIONS`: any node picks a decision up and the owner of its thread
//! applies it (`docs/cluster.md`, "Decision bus"). So a service that only has a
//! NATS client — a chat bot's approve button, a ticketing workflow — can answer
//! a run that waits for a human. This program is such a service: it uses
//! `async-nats` and `serde_json` and nothing of Awaken's.
//!
//! ```sh
//! cargo run -p awaken-cluster --example publish_decision -- \
//!     [--nats nats://127.0.0.1:4222] [--wait SECS] THREAD_ID CALL_ID approve|deny
//! ```
//!
//! The thread id and call id come from the waiting run (`GET /v1/runs/<run_id>`:
//! `waiting.tickets[].tool_call_id`). `approve` resumes the call; `deny` resumes
//! it with `{"approved": false}`, which the permission plugin turns into a
//! `permission_denied` result the model sees. The program exits once JetStream
//! has stored the decision; with `--wait`, it first waits up to that long for a
//! node to reject it (unknown call, no waiting run...) and exits 1 if one does.

use std::process::ExitCode;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};

/// Where nodes report decisions they refused.
const REJECTED_SUBJECT: &str = "awaken.advisories.decisions.rejected";

struct Args {
    nats_url: String,
    wait: Option<Duration>,
    thread_id: String,
    call_id: String,
    approve: bool,
}

const USAGE: &str =
    "usage: publish_decision [--nats URL] [--wait SECS] THREAD_ID CALL_ID approve|deny";

fn parse(mut raw: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut nats_url = "nats://127.0.0.1:4222".to_owned();
    let mut wait = None;
    let mut positional = Vec::new();
    while let Some(arg) = raw.next() {
        match arg.as_str() {
            "--nats" => nats_url = raw.next().ok_or("--nats needs a URL")?,
            "--wait" => {
                let secs = raw.next().ok_or("--wait needs seconds")?;
                let secs: u64 = secs.parse().map_err(|_| format!("--wait {secs}"))?;
                wait = Some(Duration::from_secs(secs));
            }
            _ => positional.push(arg),
        }
    }
    let [thread_id, call_id, verdict] = <[String; 3]>::try_from(positional)
        .map_err(|given| format!("expected 3 arguments, got {}", given.len()))?;
    // The thread id is the subject's tail: a wildcard, a space or an empty
    // token would publish somewhere else or nowhere.
    if thread_id.split('.').any(|token| {
        token.is_empty() || token.contains(['*', '>']) || token.contains(char::is_whitespace)
    }) {
        return Err(format!("`{thread_id}` cannot be a NATS subject's tail"));
    }
    let approve = match verdict.as_str() {
        "approve" => true,
        "deny" => false,
        other => return Err(format!("`{other}`: say approve or deny")),
    };
    Ok(Args {
        nats_url,
        wait,
        thread_id,
        call_id,
        approve,
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(error) => {
            eprintln!("{error}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match publish(args).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(2)
        }
    }
}

/// Publishes the decision; `false` when a node rejected it within `--wait`.
async fn publish(args: Args) -> Result<bool, Box<dyn std::error::Error>> {
    let client = async_nats::connect(&args.nats_url).await?;
    // Listening before publishing: a rejection can come back at once.
    let mut rejections = match args.wait {
        Some(_) => Some(client.subscribe(REJECTED_SUBJECT).await?),
        None => None,
    };

    // The decision id makes a retry safe: the stream drops a republish within
    // two minutes (Nats-Msg-Id) and a node applies an id once.
    let decision_id = format!("decision-{}", uuid::Uuid::now_v7());
    let decision = json!({
        "call_id": args.call_id,
        "decision_id": decision_id,
        "action": "resume",
        "result": {"approved": args.approve},
    });
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Content-Type", "application/json");
    headers.insert("Nats-Msg-Id", decision_id.as_str());
    let subject = format!("awaken.decisions.{}", args.thread_id);
    let jetstream = async_nats::jetstream::new(client.clone());
    let stored = jetstream
        .publish_with_headers(subject, headers, serde_json::to_vec(&decision)?.into())
        .await?
        .await?;
    println!(
        "decision {decision_id} stored in {} at sequence {}",
        stored.stream, stored.sequence
    );

    let (Some(wait), Some(rejections)) = (args.wait, rejections.as_mut()) else {
        return Ok(true);
    };
    let rejected = tokio::time::timeout(wait, async {
        while let Some(message) = rejections.next().await {
            let Ok(rejection) = serde_json::from_slice::<Value>(&message.payload) else {
                continue;
            };
            if rejection["decision_id"] == decision_id.as_str() {
                return Some(rejection["error"].as_str().unwrap_or("").to_owned());
            }
        }
        None
    })
    .await;
    match rejected {
        Ok(Some(error)) => {
            println!("rejected: {error}");
            Ok(false)
        }
        Ok(None) | Err(_) => {
            println!("not rejected within {wait:?}");
            Ok(true)
        }
    }
}
