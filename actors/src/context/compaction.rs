//! Compaction: summarizing older history into one internal message.
//!
//! When a conversation's estimated size passes `autocompact_threshold`, the part
//! before a safe boundary (no tool call separated from its result) is summarized by an
//! LLM and a `<conversation-summary>` internal system message is inserted at the
//! boundary. The thread log stays append-only; [`trim_to_compaction_boundary`] drops
//! what the latest summary covers when the history is loaded for inference.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::sync::Arc;

use super::window::estimate_message_tokens;
use crate::contract::{
    ContextCompactionMode, ContextWindowPolicy, Message, PluginConfigKey, Role, Visibility,
};
use crate::error::InferenceExecutionError;
use crate::ids::{MessageId, ToolCallId};
use crate::llm::{InferenceRequest, LlmExecutor};
use crate::state::{KeyScope, StateKey};

/// A compaction must save at least this many tokens to be worth an LLM call.
pub const MIN_COMPACTION_GAIN_TOKENS: usize = 1024;
/// Opening tag of summary messages.
pub const SUMMARY_OPEN_TAG: &str = "<conversation-summary>";
/// Closing tag of summary messages.
pub const SUMMARY_CLOSE_TAG: &str = "</conversation-summary>";

/// How summaries are produced (the agent's `compaction` section).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct CompactionConfig {
    /// System prompt of the summarizer call.
    pub summarizer_system_prompt: String,
    /// User prompt template; `{messages}` is replaced by the transcript.
    pub summarizer_user_prompt: String,
    /// Output limit of the summary.
    pub summary_max_tokens: Option<u32>,
    /// Model for summaries; the agent's model when unset.
    pub summary_model: Option<String>,
    /// Minimum expected savings (0.0–1.0 of the conversation) to compact.
    pub min_savings_ratio: f64,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        Self {
            summarizer_system_prompt: "You are a conversation summarizer. Preserve all key facts, \
                decisions, tool results, and action items. Be concise but complete."
                .to_owned(),
            summarizer_user_prompt: "Summarize the following conversation:\n\n{messages}"
                .to_owned(),
            summary_max_tokens: None,
            summary_model: None,
            min_savings_ratio: 0.3,
        }
    }
}

/// Binds [`CompactionConfig`] to the `compaction` section.
#[derive(Debug)]
pub struct CompactionConfigKey;

impl PluginConfigKey for CompactionConfigKey {
    const KEY: &'static str = "compaction";
    type Config = CompactionConfig;
}

/// One compaction, as recorded in [`CompactionState`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompactionRecord {
    /// The summary text.
    pub summary: String,
    /// Estimated tokens before.
    pub pre_tokens: usize,
    /// Estimated tokens after.
    pub post_tokens: usize,
    /// When it happened, unix millis.
    pub at_ms: u64,
    /// The first message the summary does not cover; the history sent to the model
    /// is the summary followed by the log from this message on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boundary: Option<MessageId>,
}

impl CompactionRecord {
    /// The summary as the internal system message sent in place of what it covers.
    pub fn summary_message(&self) -> Message {
        Message::internal_system(format!(
            "{SUMMARY_OPEN_TAG}\n{}\n{SUMMARY_CLOSE_TAG}",
            self.summary
        ))
    }
}

/// The history to send to the model: after a compaction, its summary followed by the
/// messages from its boundary on; otherwise the whole log. The log itself is never
/// rewritten (it is append-only); compactions live in [`CompactionState`].
pub fn compacted_view(messages: &[Message], compactions: &[CompactionRecord]) -> Vec<Message> {
    let latest = compactions.iter().rev().find_map(|record| {
        let boundary = record.boundary.as_ref()?;
        let index = messages.iter().position(|m| &m.id == boundary)?;
        Some((record, index))
    });
    match latest {
        Some((record, index)) => std::iter::once(record.summary_message())
            .chain(messages[index..].iter().cloned())
            .collect(),
        None => messages.to_vec(),
    }
}

/// Thread-scoped history of compactions.
#[derive(Debug)]
pub struct CompactionState;

impl StateKey for CompactionState {
    const KEY: &'static str = "runtime.compaction";
    const SCOPE: KeyScope = KeyScope::Thread;
    type Value = Vec<CompactionRecord>;
    type Update = CompactionRecord;

    fn apply(value: &mut Vec<CompactionRecord>, update: CompactionRecord) {
        value.push(update);
    }
}

/// Produces a summary of a transcript, optionally extending an earlier summary.
#[async_trait]
pub trait ContextSummarizer: Send + Sync {
    /// Summarizes `transcript`; `previous` is the summary it continues, if any.
    async fn summarize(
        &self,
        transcript: &str,
        previous: Option<&str>,
    ) -> Result<String, InferenceExecutionError>;
}

/// Summarizes with an LLM, using the prompts of a [`CompactionConfig`].
pub struct DefaultSummarizer {
    executor: Arc<dyn LlmExecutor>,
    model: String,
    config: CompactionConfig,
}

impl std::fmt::Debug for DefaultSummarizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DefaultSummarizer")
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl DefaultSummarizer {
    /// A summarizer calling `executor`; `agent_model` is used unless the config names
    /// a summary model.
    pub fn new(
        executor: Arc<dyn LlmExecutor>,
        agent_model: &str,
        config: CompactionConfig,
    ) -> Self {
        let model = config
            .summary_model
            .clone()
            .unwrap_or_else(|| agent_model.to_owned());
        Self {
            executor,
            model,
            config,
        }
    }
}

#[async_trait]
impl ContextSummarizer for DefaultSummarizer {
    async fn summarize(
        &self,
        transcript: &str,
        previous: Option<&str>,
    ) -> Result<String, InferenceExecutionError> {
        let body = match previous {
            // Cumulative: extend the earlier summary instead of starting over.
            Some(previous) => format!(
                "Here is the summary of the conversation so far:\n\n{previous}\n\nUpdate it with \
                 the following newer part of the conversation:\n\n{transcript}"
            ),
            None => self
                .config
                .summarizer_user_prompt
                .replace("{messages}", transcript),
        };
        let mut request = InferenceRequest::new(
            self.model.clone(),
            vec![
                Message::system(self.config.summarizer_system_prompt.clone()),
                Message::user(body),
            ],
        );
        request.max_tokens = self.config.summary_max_tokens;
        let result = self.executor.execute(request).await?;
        Ok(result.text())
    }
}

/// Whether a message is a compaction summary.
pub fn is_summary(message: &Message) -> bool {
    message.role == Role::System
        && message.is_internal()
        && message.text().starts_with(SUMMARY_OPEN_TAG)
}

fn summary_text(message: &Message) -> String {
    let text = message.text();
    text.trim_start_matches(SUMMARY_OPEN_TAG)
        .trim_end_matches(SUMMARY_CLOSE_TAG)
        .trim()
        .to_owned()
}

/// Keeps leading system messages, then everything from the latest summary on.
pub fn trim_to_compaction_boundary(messages: &[Message]) -> Vec<Message> {
    let Some(latest) = messages.iter().rposition(is_summary) else {
        return messages.to_vec();
    };
    messages
        .iter()
        .take_while(|m| m.role == Role::System && !is_summary(m))
        .chain(&messages[latest..])
        .cloned()
        .collect()
}

/// Indexes `i` such that no tool call in `messages[..i]` lacks its result there.
fn safe_boundaries(messages: &[Message]) -> Vec<usize> {
    let mut open: HashSet<&ToolCallId> = HashSet::new();
    let mut safe = Vec::new();
    for (index, message) in messages.iter().enumerate() {
        if open.is_empty() {
            safe.push(index);
        }
        open.extend(message.tool_calls.iter().map(|c| &c.id));
        if let Some(id) = &message.tool_call_id {
            open.remove(id);
        }
    }
    if open.is_empty() {
        safe.push(messages.len());
    }
    safe
}

/// Where compaction should cut, per the policy's mode; `None` if nothing can go.
pub fn find_compaction_boundary(
    messages: &[Message],
    policy: &ContextWindowPolicy,
) -> Option<usize> {
    let start = messages
        .iter()
        .position(|m| m.role != Role::System || is_summary(m))
        .unwrap_or(messages.len());
    let limit = match policy.compaction_mode {
        ContextCompactionMode::KeepRecentRawSuffix => messages.len().saturating_sub(
            usize::try_from(policy.compaction_raw_suffix_messages).unwrap_or(usize::MAX),
        ),
        ContextCompactionMode::CompactToSafeFrontier => messages.len(),
    };
    safe_boundaries(messages)
        .into_iter()
        .filter(|&b| b > start && b <= limit)
        .max()
}

/// A compaction to apply to the thread log.
#[derive(Debug, Clone, PartialEq)]
pub struct Compaction {
    /// Index in the (trimmed) history before which `summary_message` is inserted.
    pub boundary: usize,
    /// The internal `<conversation-summary>` system message.
    pub summary_message: Message,
    /// What to record in [`CompactionState`].
    pub record: CompactionRecord,
}

/// Summarizes the history if it passes the policy's threshold and the expected gain
/// is worth it; `messages` is the history as sent to the model (already trimmed).
pub async fn compact(
    messages: &[Message],
    policy: &ContextWindowPolicy,
    config: &CompactionConfig,
    summarizer: &dyn ContextSummarizer,
    now_ms: u64,
) -> Result<Option<Compaction>, InferenceExecutionError> {
    let Some(threshold) = policy.autocompact_threshold else {
        return Ok(None);
    };
    let costs: Vec<usize> = messages.iter().map(estimate_message_tokens).collect();
    let total: usize = costs.iter().sum();
    if total < usize::try_from(threshold).unwrap_or(usize::MAX) {
        return Ok(None);
    }
    let Some(boundary) = find_compaction_boundary(messages, policy) else {
        return Ok(None);
    };
    let covered: usize = costs[..boundary].iter().sum();
    let expected_summary = config
        .summary_max_tokens
        .map_or(MIN_COMPACTION_GAIN_TOKENS, |t| t as usize);
    let gain = covered.saturating_sub(expected_summary);
    #[allow(clippy::cast_precision_loss)] // token counts are far below 2^52
    let ratio = gain as f64 / total.max(1) as f64;
    if gain < MIN_COMPACTION_GAIN_TOKENS || ratio < config.min_savings_ratio {
        return Ok(None);
    }

    let previous = messages[..boundary]
        .iter()
        .rev()
        .find(|m| is_summary(m))
        .map(summary_text);
    let transcript = render_transcript(&messages[..boundary]);
    let summary = summarizer
        .summarize(&transcript, previous.as_deref())
        .await?;
    let summary_message = Message::internal_system(format!(
        "{SUMMARY_OPEN_TAG}\n{summary}\n{SUMMARY_CLOSE_TAG}"
    ));
    let post_tokens = total - covered + estimate_message_tokens(&summary_message);
    Ok(Some(Compaction {
        boundary,
        record: CompactionRecord {
            summary,
            pre_tokens: total,
            post_tokens,
            at_ms: now_ms,
            boundary: messages.get(boundary).map(|m| m.id.clone()),
        },
        summary_message,
    }))
}

/// A plain-text transcript for the summarizer. Internal messages (re-injected context,
/// earlier summaries) are left out; the earlier summary is passed separately.
pub fn render_transcript(messages: &[Message]) -> String {
    let mut out = String::new();
    for message in messages
        .iter()
        .filter(|m| m.visibility != Visibility::Internal)
    {
        let role = match message.role {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        };
        let text = message.text();
        if !text.is_empty() {
            out.push_str(&format!("{role}: {text}\n"));
        }
        for call in &message.tool_calls {
            out.push_str(&format!(
                "{role} called {}({})\n",
                call.name, call.arguments
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::contract::{ContentBlock, ToolCall};
    use crate::llm::StreamResult;

    fn policy(threshold: u64, mode: ContextCompactionMode, suffix: u32) -> ContextWindowPolicy {
        ContextWindowPolicy {
            autocompact_threshold: Some(threshold),
            compaction_mode: mode,
            compaction_raw_suffix_messages: suffix,
            ..ContextWindowPolicy::default()
        }
    }

    fn call(id: &str) -> ToolCall {
        ToolCall::new(
            ToolCallId::new(id).unwrap(),
            "search",
            serde_json::json!({"q": id}),
        )
    }

    /// system, then user / assistant(call) / tool / assistant pairs of ~500 tokens each.
    fn history(rounds: usize) -> Vec<Message> {
        let mut messages = vec![Message::system("rules")];
        for i in 0..rounds {
            let id = format!("c{i}");
            messages.push(Message::user(format!("question {i} {}", "x".repeat(2000))));
            messages.push(Message::assistant_with_tool_calls("", vec![call(&id)]));
            messages.push(Message::tool_result(
                ToolCallId::new(id).unwrap(),
                "y".repeat(2000),
            ));
            messages.push(Message::assistant(format!("answer {i}")));
        }
        messages
    }

    #[derive(Default)]
    struct Recorder {
        calls: Mutex<Vec<(String, Option<String>)>>,
    }

    #[async_trait]
    impl ContextSummarizer for Recorder {
        async fn summarize(
            &self,
            transcript: &str,
            previous: Option<&str>,
        ) -> Result<String, InferenceExecutionError> {
            self.calls
                .lock()
                .unwrap()
                .push((transcript.to_owned(), previous.map(str::to_owned)));
            Ok(format!("summary #{}", self.calls.lock().unwrap().len()))
        }
    }

    #[test]
    fn boundaries_never_split_tool_pairs() {
        let mut messages = history(2);
        // An open call at the end: the frontier stops before it.
        messages.push(Message::assistant_with_tool_calls("", vec![call("open")]));
        let safe = find_compaction_boundary(
            &messages,
            &policy(0, ContextCompactionMode::CompactToSafeFrontier, 0),
        )
        .unwrap();
        assert_eq!(safe, messages.len() - 1);
        // Keep a raw suffix of 2: the cut moves back to a safe point (after round 0
        // plus round 1's user message).
        let cut = find_compaction_boundary(
            &messages,
            &policy(0, ContextCompactionMode::KeepRecentRawSuffix, 2),
        )
        .unwrap();
        assert!(cut <= messages.len() - 2);
        assert_ne!(messages[cut].role, Role::Tool);
        assert!(messages[..cut].iter().flat_map(|m| &m.tool_calls).all(|c| {
            messages[..cut]
                .iter()
                .any(|m| m.tool_call_id.as_ref() == Some(&c.id))
        }));
    }

    #[tokio::test]
    async fn compacts_above_threshold_and_records() {
        let messages = history(6);
        let summarizer = Recorder::default();
        let p = policy(1000, ContextCompactionMode::KeepRecentRawSuffix, 2);
        let compaction = compact(&messages, &p, &CompactionConfig::default(), &summarizer, 42)
            .await
            .unwrap()
            .expect("compaction");
        assert!(is_summary(&compaction.summary_message));
        assert!(compaction.summary_message.text().contains("summary #1"));
        assert!(compaction.record.post_tokens < compaction.record.pre_tokens);
        assert_eq!(compaction.record.at_ms, 42);
        let (transcript, previous) = summarizer.calls.lock().unwrap()[0].clone();
        assert!(transcript.contains("question 0"));
        assert!(
            !transcript.contains("answer 5"),
            "the raw suffix is not summarized"
        );
        assert_eq!(previous, None);

        // Insert the summary into the log; loading trims what it covers.
        let mut log = messages.clone();
        log.insert(compaction.boundary, compaction.summary_message.clone());
        let loaded = trim_to_compaction_boundary(&log);
        assert_eq!(loaded[0].text(), "rules");
        assert!(is_summary(&loaded[1]));
        assert_eq!(loaded.len(), 2 + messages.len() - compaction.boundary);

        // A second compaction extends the first summary.
        let mut longer = loaded.clone();
        longer.extend(history(6).into_iter().skip(1));
        compact(&longer, &p, &CompactionConfig::default(), &summarizer, 43)
            .await
            .unwrap()
            .expect("second compaction");
        let (_, previous) = summarizer.calls.lock().unwrap()[1].clone();
        assert_eq!(previous.as_deref(), Some("summary #1"));
    }

    #[tokio::test]
    async fn skips_when_not_worth_it() {
        let summarizer = Recorder::default();
        let config = CompactionConfig::default();
        let below = policy(1_000_000, ContextCompactionMode::KeepRecentRawSuffix, 2);
        assert!(
            compact(&history(6), &below, &config, &summarizer, 0)
                .await
                .unwrap()
                .is_none()
        );
        let disabled = ContextWindowPolicy::default();
        assert!(
            compact(&history(6), &disabled, &config, &summarizer, 0)
                .await
                .unwrap()
                .is_none()
        );
        // Tiny conversation: the gain is under MIN_COMPACTION_GAIN_TOKENS.
        let tiny = vec![
            Message::system("s"),
            Message::user("a"),
            Message::user("b"),
            Message::user("c"),
        ];
        let low = policy(1, ContextCompactionMode::KeepRecentRawSuffix, 1);
        assert!(
            compact(&tiny, &low, &config, &summarizer, 0)
                .await
                .unwrap()
                .is_none()
        );
        assert!(summarizer.calls.lock().unwrap().is_empty());
    }

    struct Capture(Mutex<Option<InferenceRequest>>);

    #[async_trait]
    impl LlmExecutor for Capture {
        async fn execute(
            &self,
            request: InferenceRequest,
        ) -> Result<StreamResult, InferenceExecutionError> {
            *self.0.lock().unwrap() = Some(request);
            Ok(StreamResult {
                content: vec![ContentBlock::text("the gist")],
                ..StreamResult::default()
            })
        }
        fn name(&self) -> &str {
            "capture"
        }
    }

    #[tokio::test]
    async fn default_summarizer_uses_config_prompts_and_model() {
        let executor = Arc::new(Capture(Mutex::new(None)));
        let config = CompactionConfig {
            summary_model: Some("cheap".into()),
            summary_max_tokens: Some(256),
            ..CompactionConfig::default()
        };
        let summarizer = DefaultSummarizer::new(executor.clone(), "main", config);
        let summary = summarizer.summarize("user: hi\n", None).await.unwrap();
        assert_eq!(summary, "the gist");
        let request = executor.0.lock().unwrap().take().unwrap();
        assert_eq!(request.model, "cheap");
        assert_eq!(request.max_tokens, Some(256));
        assert!(request.messages[1].text().ends_with("user: hi\n"));
    }
}
