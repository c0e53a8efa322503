//! The decision payload anyone may publish on `awaken.decisions.<thread_id>`.
//!
//! JSON by default; MessagePack (field names) when the message's `Content-Type`
//! header is `application/msgpack`. Unknown fields are refused, so a typo never
//! turns into a silently different decision.

use awaken_actors::contract::{ResumeDecisionAction, ToolCallResume};
use awaken_actors::ids::{DecisionId, RunId, ThreadId, ToolCallId};
use serde::{Deserialize, Serialize};
use serde_json::Value as JsonValue;

use crate::codec;

/// Subject prefix of decisions; the rest of the subject is the thread id.
pub const DECISION_SUBJECT_PREFIX: &str = "awaken.decisions.";

/// Largest decision payload accepted, in bytes.
pub const MAX_DECISION_BYTES: usize = 64 * 1024;

/// A decision as published.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionPayload {
    /// The suspended tool call.
    pub call_id: String,
    /// Idempotency key: a decision id is applied once.
    pub decision_id: String,
    /// `resume` or `cancel`.
    pub action: ResumeDecisionAction,
    /// The decision payload (e.g. `true`, edited arguments, a tool result).
    #[serde(default)]
    pub result: JsonValue,
    /// Why (shown to the model and in the audit trail).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The thread; when given it must match the subject.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
    /// The run the call belongs to; when given it must be the thread's waiting run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// When the decision was made, unix millis (default: when it was received).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "awaken_actors::integral::optional"
    )]
    pub updated_at: Option<u64>,
}

/// A decision ready to be applied (also forwarded to a thread's owner, with the
/// cluster codec).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// The thread.
    pub thread_id: ThreadId,
    /// The suspended call.
    pub call_id: ToolCallId,
    /// The run, when the publisher named it.
    pub run_id: Option<RunId>,
    /// What to do with the call.
    pub resume: ToolCallResume,
}

impl DecisionPayload {
    /// A `resume` decision carrying `result`, with nothing optional set: what an
    /// approving client usually publishes.
    pub fn resume(
        call_id: impl Into<String>,
        decision_id: impl Into<String>,
        result: JsonValue,
    ) -> Self {
        Self {
            call_id: call_id.into(),
            decision_id: decision_id.into(),
            action: ResumeDecisionAction::Resume,
            result,
            reason: None,
            thread_id: None,
            run_id: None,
            updated_at: None,
        }
    }
}

/// The body's encoding, from the `Content-Type` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// `application/json` or no header.
    Json,
    /// `application/msgpack`.
    MessagePack,
}

impl Encoding {
    /// The encoding a `Content-Type` value names; `Err` with the value otherwise.
    pub fn from_content_type(content_type: Option<&str>) -> Result<Self, String> {
        let Some(value) = content_type else {
            return Ok(Self::Json);
        };
        let essence = value
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match essence.as_str() {
            "" | "application/json" => Ok(Self::Json),
            "application/msgpack" | "application/x-msgpack" | "application/vnd.msgpack" => {
                Ok(Self::MessagePack)
            }
            _ => Err(format!(
                "unsupported content-type {value:?}: use application/json or application/msgpack"
            )),
        }
    }
}

/// Reads and validates a published decision; the error says what is wrong.
pub fn parse_decision(
    subject: &str,
    encoding: Encoding,
    body: &[u8],
    now_ms: u64,
) -> Result<Decision, String> {
    let thread = subject
        .strip_prefix(DECISION_SUBJECT_PREFIX)
        .filter(|rest| !rest.is_empty())
        .ok_or_else(|| {
            format!("subject {subject:?} is not {DECISION_SUBJECT_PREFIX}<thread_id>")
        })?;
    if body.len() > MAX_DECISION_BYTES {
        return Err(format!(
            "decision of {} bytes exceeds the limit of {MAX_DECISION_BYTES}",
            body.len()
        ));
    }
    let payload: DecisionPayload = match encoding {
        Encoding::Json => {
            serde_json::from_slice(body).map_err(|e| format!("invalid JSON decision: {e}"))?
        }
        Encoding::MessagePack => {
            codec::decode(body).map_err(|e| format!("invalid MessagePack decision: {e}"))?
        }
    };
    let thread_id = ThreadId::new(thread).map_err(|e| e.to_string())?;
    payload.into_decision(thread_id, now_ms)
}

impl DecisionPayload {
    /// The decision for `thread_id` (the subject's, or an HTTP route's), checking
    /// the ids; `now_ms` stamps it when the payload has no `updated_at`.
    pub fn into_decision(self, thread_id: ThreadId, now_ms: u64) -> Result<Decision, String> {
        // The same limits whichever way the decision came (HTTP bodies may be
        // larger than a decision, and MessagePack carries NUL unescaped).
        let size = serde_json::to_vec(&self.result)
            .map_err(|e| format!("unreadable decision result: {e}"))?
            .len()
            .saturating_add(self.reason.as_ref().map_or(0, String::len));
        if size > MAX_DECISION_BYTES {
            return Err(format!(
                "decision result and reason of {size} bytes exceed the limit of \
                 {MAX_DECISION_BYTES}"
            ));
        }
        if holds_nul(&self.result) || self.reason.as_deref().is_some_and(|r| r.contains('\0')) {
            return Err("the decision holds a NUL character, which cannot be stored".into());
        }
        if let Some(named) = &self.thread_id
            && named != thread_id.as_str()
        {
            return Err(format!(
                "payload names thread {named:?} but was published for {thread_id:?}"
            ));
        }
        Ok(Decision {
            call_id: ToolCallId::new(self.call_id).map_err(|e| e.to_string())?,
            run_id: self
                .run_id
                .map(RunId::new)
                .transpose()
                .map_err(|e| e.to_string())?,
            resume: ToolCallResume {
                decision_id: DecisionId::new(self.decision_id).map_err(|e| e.to_string())?,
                action: self.action,
                result: self.result,
                reason: self.reason,
                updated_at: self.updated_at.unwrap_or(now_ms),
                trace: None,
            },
            thread_id,
        })
    }
}

/// Whether any string (or key) in `value` holds a NUL character.
fn holds_nul(value: &JsonValue) -> bool {
    match value {
        JsonValue::String(text) => text.contains('\0'),
        JsonValue::Array(items) => items.iter().any(holds_nul),
        JsonValue::Object(fields) => fields
            .iter()
            .any(|(key, value)| key.contains('\0') || holds_nul(value)),
        JsonValue::Null | JsonValue::Bool(_) | JsonValue::Number(_) => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn json_body(value: serde_json::Value) -> Vec<u8> {
        serde_json::to_vec(&value).unwrap()
    }

    #[test]
    fn oversized_or_nul_decisions_are_refused_whichever_way_they_come() {
        let payload = |result: serde_json::Value, reason: Option<&str>| DecisionPayload {
            call_id: "c1".into(),
            decision_id: "d1".into(),
            action: ResumeDecisionAction::Resume,
            result,
            reason: reason.map(str::to_owned),
            thread_id: None,
            run_id: None,
            updated_at: None,
        };
        let thread = || ThreadId::new("t").unwrap();
        let big = json!({"text": "x".repeat(MAX_DECISION_BYTES)});
        let error = payload(big, None).into_decision(thread(), 1).unwrap_err();
        assert!(error.contains("exceed the limit"), "{error}");
        let long_reason = "r".repeat(MAX_DECISION_BYTES);
        assert!(
            payload(json!(true), Some(&long_reason))
                .into_decision(thread(), 1)
                .is_err()
        );
        for nul in [json!({"note": "a\0b"}), json!([{"a\0": 1}])] {
            let error = payload(nul, None).into_decision(thread(), 1).unwrap_err();
            assert!(error.contains("NUL"), "{error}");
        }
        assert!(
            payload(json!(true), Some("no\0"))
                .into_decision(thread(), 1)
                .is_err()
        );
        // NUL straight from MessagePack, which needs no escape.
        let packed = codec::encode(&payload(json!("a\0b"), None)).unwrap();
        let error =
            parse_decision("awaken.decisions.t", Encoding::MessagePack, &packed, 1).unwrap_err();
        assert!(error.contains("NUL"), "{error}");
        assert!(
            payload(json!({"fine": "ok"}), Some("ok"))
                .into_decision(thread(), 1)
                .is_ok()
        );
    }

    #[test]
    fn a_json_decision_is_read_from_subject_and_body() {
        let body = json_body(json!({
            "call_id": "c1", "decision_id": "d1", "action": "resume",
            "result": {"approved": true}, "reason": "ok"
        }));
        let decision = parse_decision("awaken.decisions.t.1", Encoding::Json, &body, 42).unwrap();
        assert_eq!(
            decision.thread_id.as_str(),
            "t.1",
            "thread ids may hold dots"
        );
        assert_eq!(decision.call_id.as_str(), "c1");
        assert_eq!(decision.resume.decision_id.as_str(), "d1");
        assert_eq!(decision.resume.action, ResumeDecisionAction::Resume);
        assert_eq!(decision.resume.result, json!({"approved": true}));
        assert_eq!(decision.resume.updated_at, 42);
        assert_eq!(decision.run_id, None);
    }

    #[test]
    fn a_msgpack_decision_reads_the_same() {
        let payload = DecisionPayload {
            call_id: "c1".into(),
            decision_id: "d1".into(),
            action: ResumeDecisionAction::Cancel,
            result: JsonValue::Null,
            reason: None,
            thread_id: Some("t1".into()),
            run_id: Some("r1".into()),
            updated_at: Some(7),
        };
        let body = codec::encode(&payload).unwrap();
        let decision =
            parse_decision("awaken.decisions.t1", Encoding::MessagePack, &body, 0).unwrap();
        assert_eq!(decision.resume.action, ResumeDecisionAction::Cancel);
        assert_eq!(decision.run_id.unwrap().as_str(), "r1");
        assert_eq!(decision.resume.updated_at, 7);
    }

    #[test]
    fn bad_decisions_say_what_is_wrong() {
        let ok = json!({"call_id": "c1", "decision_id": "d1", "action": "resume"});
        let cases = [
            ("awaken.decisions.", json_body(ok.clone()), "is not"),
            ("awaken.decisions.t1", b"{not json".to_vec(), "invalid JSON"),
            (
                "awaken.decisions.t1",
                json_body(json!({"call_id": "c1", "action": "resume"})),
                "decision_id",
            ),
            (
                "awaken.decisions.t1",
                json_body(json!({"call_id": "c1", "decision_id": "d1", "action": "maybe"})),
                "unknown variant",
            ),
            (
                "awaken.decisions.t1",
                json_body(
                    json!({"call_id": "c1", "decision_id": "d1", "action": "resume", "aprove": true}),
                ),
                "unknown field",
            ),
            (
                "awaken.decisions.t1",
                json_body(json!({"call_id": "", "decision_id": "d1", "action": "resume"})),
                "empty",
            ),
            (
                "awaken.decisions.t1",
                json_body(
                    json!({"call_id": "c1", "decision_id": "d1", "action": "resume", "thread_id": "t2"}),
                ),
                "published for",
            ),
            (
                "awaken.decisions.t1",
                vec![b' '; MAX_DECISION_BYTES + 1],
                "exceeds",
            ),
        ];
        for (subject, body, expected) in cases {
            let error = parse_decision(subject, Encoding::Json, &body, 0).unwrap_err();
            assert!(
                error.contains(expected),
                "{subject}: {error:?} lacks {expected:?}"
            );
        }
    }

    #[test]
    fn content_types_choose_the_encoding() {
        assert_eq!(Encoding::from_content_type(None), Ok(Encoding::Json));
        assert_eq!(
            Encoding::from_content_type(Some("application/json; charset=utf-8")),
            Ok(Encoding::Json)
        );
        assert_eq!(
            Encoding::from_content_type(Some("Application/MsgPack")),
            Ok(Encoding::MessagePack)
        );
        assert!(Encoding::from_content_type(Some("text/plain")).is_err());
    }
}
