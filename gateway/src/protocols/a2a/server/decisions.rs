//! A follow-up message to an `INPUT_REQUIRED` task as decisions on its open tool
//! calls: the text "approve"/"deny" answers all of them; a data part
//! `{"decisions": [{"toolCallId", "approved", "reason"?, "result"?}]}` answers each.

use awaken_actors::contract::{ResumeDecisionAction, RunRecord};
use awaken_cluster::decisions::DecisionPayload;
use serde::Deserialize;
use serde_json::Value as JsonValue;

use super::error::A2aError;
use super::wire::Message;

const APPROVALS: &[&str] = &["approve", "approved", "yes", "y", "allow", "ok"];
const DENIALS: &[&str] = &["deny", "denied", "no", "n", "reject", "rejected"];

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct DecisionPart {
    tool_call_id: String,
    approved: bool,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    result: Option<JsonValue>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DecisionsData {
    decisions: Vec<DecisionPart>,
}

/// The decisions `message` makes for the waiting `run`; every open call must be
/// answered (the caller checks that against the run).
pub(crate) fn decisions_of(
    message: &Message,
    run: &RunRecord,
) -> Result<Vec<DecisionPayload>, A2aError> {
    let open: Vec<String> = run
        .waiting
        .iter()
        .flat_map(|waiting| waiting.tickets.iter())
        .map(|ticket| ticket.tool_call_id.to_string())
        .collect();
    let decision_id = |call_id: &str| format!("a2a-{}-{call_id}", message.message_id);
    for part in &message.parts {
        if let Some(data) = &part.data {
            let data: DecisionsData = serde_json::from_value(data.clone()).map_err(|e| {
                A2aError::InvalidParams(format!(
                    "a data part answering an input request must be {{\"decisions\": [{{\"toolCallId\", \"approved\"}}]}}: {e}"
                ))
            })?;
            return Ok(data
                .decisions
                .into_iter()
                .map(|decision| payload(&decision_id(&decision.tool_call_id), decision))
                .collect());
        }
    }
    let text: String = message
        .parts
        .iter()
        .filter_map(|part| part.text.as_deref())
        .collect::<Vec<_>>()
        .join(" ");
    let word = text.trim().trim_end_matches(['.', '!']).to_lowercase();
    let approved = if APPROVALS.contains(&word.as_str()) {
        true
    } else if DENIALS.contains(&word.as_str()) {
        false
    } else {
        return Err(A2aError::InvalidParams(format!(
            "task `{}` waits for approval: reply \"approve\" or \"deny\", or send {{\"decisions\": [...]}} as data",
            run.run_id
        )));
    };
    Ok(open
        .iter()
        .map(|call_id| {
            payload(
                &decision_id(call_id),
                DecisionPart {
                    tool_call_id: call_id.clone(),
                    approved,
                    reason: (!approved).then(|| "denied over A2A".to_owned()),
                    result: None,
                },
            )
        })
        .collect())
}

fn payload(decision_id: &str, decision: DecisionPart) -> DecisionPayload {
    let mut payload = DecisionPayload::resume(
        decision.tool_call_id,
        decision_id,
        decision
            .result
            .unwrap_or(JsonValue::Bool(decision.approved)),
    );
    if !decision.approved {
        payload.action = ResumeDecisionAction::Cancel;
    }
    payload.reason = decision.reason;
    payload
}
