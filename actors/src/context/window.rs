//! Fitting a conversation into a model's context window: token estimates, artifact
//! compaction of oversized tool results, and truncation of the oldest history.

use crate::contract::{ContentBlock, ContextWindowPolicy, Message, Role, ToolDescriptor};

/// Characters per token in the estimate (a deliberate over-estimate for English and
/// code; providers' tokenizers vary, and the window is a budget, not an exact fit).
const CHARS_PER_TOKEN: usize = 4;
/// Per-message framing overhead, in tokens.
const MESSAGE_OVERHEAD_TOKENS: usize = 4;
/// Tool results estimated above this many tokens are compacted to a preview.
pub const ARTIFACT_COMPACT_THRESHOLD_TOKENS: usize = 2048;
/// Longest preview kept of a compacted tool result, in characters.
pub const ARTIFACT_PREVIEW_MAX_CHARS: usize = 1600;
/// Longest preview kept of a compacted tool result, in lines.
pub const ARTIFACT_PREVIEW_MAX_LINES: usize = 24;

fn tokens_for_chars(chars: usize) -> usize {
    chars.div_ceil(CHARS_PER_TOKEN)
}

/// Estimated tokens of one message.
pub fn estimate_message_tokens(message: &Message) -> usize {
    let content: usize = message
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text { text } | ContentBlock::Reasoning { text, .. } => text.len(),
            // Images are priced by providers per tile; a flat estimate keeps budgets sane.
            ContentBlock::Image { .. } => 1024 * CHARS_PER_TOKEN,
        })
        .sum();
    let calls: usize = message
        .tool_calls
        .iter()
        .map(|call| call.name.len() + call.arguments.to_string().len())
        .sum();
    tokens_for_chars(content + calls) + MESSAGE_OVERHEAD_TOKENS
}

/// Estimated tokens of the tool schemas offered to the model.
pub fn estimate_tool_tokens(tools: &[ToolDescriptor]) -> usize {
    tools
        .iter()
        .map(|tool| {
            tokens_for_chars(
                tool.id.len() + tool.description.len() + tool.parameters.to_string().len(),
            )
        })
        .sum()
}

/// Replaces every oversized tool-result text with a preview that states the original
/// size. Only `Tool`-role messages are touched. Returns how many were compacted.
pub fn compact_artifacts(messages: &mut [Message]) -> usize {
    let mut compacted = 0;
    for message in messages.iter_mut().filter(|m| m.role == Role::Tool) {
        for block in &mut message.content {
            let ContentBlock::Text { text } = block else {
                continue;
            };
            if tokens_for_chars(text.len()) <= ARTIFACT_COMPACT_THRESHOLD_TOKENS {
                continue;
            }
            *text = preview(text);
            compacted += 1;
        }
    }
    compacted
}

fn preview(text: &str) -> String {
    let mut end = 0;
    for (lines, line) in text.split_inclusive('\n').enumerate() {
        if lines == ARTIFACT_PREVIEW_MAX_LINES || end + line.len() > ARTIFACT_PREVIEW_MAX_CHARS {
            break;
        }
        end += line.len();
    }
    if end == 0 {
        // A single huge line: cut at a character boundary.
        end = text
            .char_indices()
            .map(|(i, c)| i + c.len_utf8())
            .take_while(|&i| i <= ARTIFACT_PREVIEW_MAX_CHARS)
            .last()
            .unwrap_or(0);
    }
    let kept = &text[..end];
    let separator = if kept.ends_with('\n') { "" } else { "\n" };
    format!(
        "{kept}{separator}[compacted tool result: showing {end} of {} characters]",
        text.len()
    )
}

/// Drops the oldest history until the conversation fits the policy's budget.
///
/// Leading system messages always stay; at least `min_recent_messages` history
/// messages stay; a kept tool result is never separated from the assistant message
/// that requested it; tool calls whose results were dropped are removed. Returns how
/// many history messages were dropped.
pub fn truncate_to_budget(
    messages: &mut Vec<Message>,
    tools: &[ToolDescriptor],
    policy: &ContextWindowPolicy,
) -> usize {
    let available = usize::try_from(policy.max_context_tokens)
        .unwrap_or(usize::MAX)
        .saturating_sub(usize::try_from(policy.max_output_tokens).unwrap_or(usize::MAX))
        .saturating_sub(estimate_tool_tokens(tools));
    let system_len = messages
        .iter()
        .take_while(|m| m.role == Role::System)
        .count();
    let costs: Vec<usize> = messages.iter().map(estimate_message_tokens).collect();
    let total: usize = costs.iter().sum();
    if total <= available {
        return 0;
    }

    let history_len = messages.len() - system_len;
    let min_recent = usize::try_from(policy.min_recent_messages).unwrap_or(usize::MAX);
    let latest_split = messages.len() - min_recent.min(history_len);
    let mut split = system_len;
    let mut remaining = total;
    while split < latest_split && remaining > available {
        remaining -= costs[split];
        split += 1;
    }
    // Never start the kept history with tool results whose request was dropped: step
    // back to the assistant message that asked for them.
    while split > system_len && messages[split].role == Role::Tool {
        split -= 1;
    }
    let dropped = split - system_len;
    if dropped == 0 {
        return 0;
    }
    messages.drain(system_len..split);
    crate::contract::strip_unpaired_tool_calls(messages);
    dropped
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::ToolCall;
    use crate::ids::ToolCallId;

    fn policy(max_context_tokens: u64, min_recent_messages: u32) -> ContextWindowPolicy {
        ContextWindowPolicy {
            max_context_tokens,
            max_output_tokens: 0,
            min_recent_messages,
            ..ContextWindowPolicy::default()
        }
    }

    fn text(n: usize) -> String {
        "x".repeat(n)
    }

    #[test]
    fn estimates_grow_with_content() {
        let small = estimate_message_tokens(&Message::user("hi"));
        let large = estimate_message_tokens(&Message::user(text(400)));
        assert_eq!(small, 1 + MESSAGE_OVERHEAD_TOKENS);
        assert_eq!(large, 100 + MESSAGE_OVERHEAD_TOKENS);
    }

    #[test]
    fn oversized_tool_results_become_previews() {
        let call = ToolCallId::new("c1").unwrap();
        let big: String = (0..2000).map(|i| format!("line {i}\n")).collect();
        let mut messages = vec![
            Message::user(text(20_000)),
            Message::tool_result(call.clone(), big.clone()),
            Message::tool_result(call, "small"),
        ];
        assert_eq!(compact_artifacts(&mut messages), 1);
        assert_eq!(
            messages[0].text().len(),
            20_000,
            "user messages are never compacted"
        );
        let preview = messages[1].text();
        assert!(preview.starts_with("line 0\n"));
        assert_eq!(preview.lines().count(), ARTIFACT_PREVIEW_MAX_LINES + 1);
        assert!(preview.ends_with(&format!("of {} characters]", big.len())));
        assert_eq!(messages[2].text(), "small");
    }

    #[test]
    fn single_line_artifacts_are_cut_by_characters() {
        let mut messages = vec![Message::tool_result(
            ToolCallId::new("c").unwrap(),
            "é".repeat(9000),
        )];
        compact_artifacts(&mut messages);
        let preview = messages[0].text();
        assert!(preview.len() < ARTIFACT_PREVIEW_MAX_CHARS + 100);
        assert!(preview.starts_with("éé"));
    }

    #[test]
    fn keeps_system_prompt_and_recent_messages() {
        let mut messages = vec![Message::system("rules")];
        for i in 0..10 {
            messages.push(Message::user(format!("{i}{}", text(396))));
        }
        // Each history message costs 104; budget for about three of them plus system.
        let dropped = truncate_to_budget(&mut messages, &[], &policy(330, 2));
        assert_eq!(dropped, 7);
        assert_eq!(messages[0].text(), "rules");
        assert!(messages[1].text().starts_with('7'));
        assert_eq!(messages.len(), 4);

        // min_recent wins over the budget.
        let mut messages = vec![Message::system("rules")];
        messages.extend((0..5).map(|_| Message::user(text(400))));
        truncate_to_budget(&mut messages, &[], &policy(10, 3));
        assert_eq!(messages.len(), 4);
    }

    #[test]
    fn fits_untouched() {
        let mut messages = vec![Message::system("s"), Message::user("hello")];
        assert_eq!(truncate_to_budget(&mut messages, &[], &policy(1000, 1)), 0);
        assert_eq!(messages.len(), 2);
    }

    #[test]
    fn never_splits_a_tool_call_from_its_result() {
        let call = ToolCallId::new("c1").unwrap();
        let mut messages = vec![
            Message::system("s"),
            Message::user(text(400)),
            Message::assistant_with_tool_calls(
                "",
                vec![ToolCall::new(call.clone(), "search", serde_json::json!({}))],
            ),
            Message::tool_result(call, text(400)),
            Message::user("thanks"),
        ];
        // Budget forces the split to land on the tool result; it steps back instead.
        truncate_to_budget(&mut messages, &[], &policy(115, 1));
        assert_eq!(messages[1].role, Role::Assistant);
        assert_eq!(messages[2].role, Role::Tool);
        assert_eq!(messages.len(), 4);
    }

    #[test]
    fn tool_schemas_count_against_the_budget() {
        let tools = vec![ToolDescriptor::new("t", "t", text(4000))];
        let mut messages = vec![Message::user(text(40)), Message::user(text(40))];
        assert_eq!(
            truncate_to_budget(&mut messages, &tools, &policy(1000, 1)),
            1
        );
    }
}
