//! Readable event output for a terminal: [`Terminal`] (where lines go) and
//! [`EventPrinter`] (an [`EventSink`] that turns events into lines).
//!
//! ```text
//! → tool call delete_file({"path":"notes.txt"})
//! ⏸ approval needed: Allow tool `delete_file` with arguments {"path":"notes.txt"}? …
//! ■ run finished: suspended
//! Approve? [y/N/a(lways)] y
//! ✓ tool result: {"deleted":"notes.txt","remaining":["draft.md","todo.md"]}
//! Done. delete_file answered: {"deleted":"notes.txt","remaining":["draft.md","todo.md"]}
//! ■ run finished: natural_end
//! ```

use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use awaken_actors::contract::{AgentEvent, TerminationReason, ToolCallOutcome, ToolResult};
use awaken_actors::event_sink::EventSink;

/// The longest tool argument or result text printed on one line.
const MAX_SHOWN_CHARS: usize = 300;

/// A line-oriented output that also takes inline text (streamed deltas).
///
/// It remembers whether the cursor is in the middle of a line, so a marker line
/// printed after streamed text starts on a line of its own.
pub struct Terminal {
    inner: Mutex<Cursor>,
}

struct Cursor {
    writer: Box<dyn Write + Send>,
    mid_line: bool,
}

impl std::fmt::Debug for Terminal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Terminal").finish_non_exhaustive()
    }
}

impl Terminal {
    /// A terminal writing to `writer`.
    pub fn new(writer: Box<dyn Write + Send>) -> Self {
        Self {
            inner: Mutex::new(Cursor {
                writer,
                mid_line: false,
            }),
        }
    }

    /// A terminal on the process's standard output.
    pub fn stdout() -> Self {
        Self::new(Box::new(std::io::stdout()))
    }

    fn lock(&self) -> MutexGuard<'_, Cursor> {
        // Each critical section writes whole pieces: a poisoned cursor is still usable.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Prints `line` on a line of its own.
    pub fn line(&self, line: &str) -> std::io::Result<()> {
        let mut cursor = self.lock();
        cursor.end_line()?;
        writeln!(cursor.writer, "{line}")?;
        cursor.writer.flush()
    }

    /// Appends `text` to the current line.
    pub fn inline(&self, text: &str) -> std::io::Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        let mut cursor = self.lock();
        write!(cursor.writer, "{text}")?;
        cursor.mid_line = !text.ends_with('\n');
        cursor.writer.flush()
    }

    /// Prints `prompt` on a fresh line and leaves the cursor after it.
    pub fn prompt(&self, prompt: &str) -> std::io::Result<()> {
        let mut cursor = self.lock();
        cursor.end_line()?;
        write!(cursor.writer, "{prompt}")?;
        cursor.mid_line = true;
        cursor.writer.flush()
    }

    /// Records that the line was ended outside this writer (a terminal echoing input).
    pub fn line_ended(&self) {
        self.lock().mid_line = false;
    }

    /// Ends the current line if text was streamed onto it.
    pub fn finish_line(&self) -> std::io::Result<()> {
        let mut cursor = self.lock();
        cursor.end_line()?;
        cursor.writer.flush()
    }
}

impl Cursor {
    fn end_line(&mut self) -> std::io::Result<()> {
        if self.mid_line {
            writeln!(self.writer)?;
            self.mid_line = false;
        }
        Ok(())
    }
}

/// Prints a run's events on a [`Terminal`]: text deltas inline, one marker line per
/// tool call, tool result, suspension and run end; other events are not shown.
#[derive(Debug, Clone)]
pub struct EventPrinter {
    terminal: Arc<Terminal>,
}

impl EventPrinter {
    /// A printer writing to `terminal`.
    pub fn new(terminal: Arc<Terminal>) -> Self {
        Self { terminal }
    }

    fn print(&self, event: &AgentEvent) -> std::io::Result<()> {
        match event {
            AgentEvent::TextDelta { delta } => self.terminal.inline(delta),
            AgentEvent::ToolCallReady {
                name, arguments, ..
            } => self.terminal.line(&format!(
                "→ tool call {name}({})",
                shorten(&arguments.to_string())
            )),
            AgentEvent::ToolCallDone {
                result, outcome, ..
            } => self.terminal.line(&tool_line(result, *outcome)),
            AgentEvent::RunFinish { termination, .. } => self
                .terminal
                .line(&format!("■ run finished: {}", describe(termination))),
            AgentEvent::Error { message, .. } => self.terminal.line(&format!("! error: {message}")),
            _ => Ok(()),
        }
    }
}

#[async_trait]
impl EventSink for EventPrinter {
    async fn emit(&self, event: AgentEvent) {
        // A sink never fails the run; a closed output only loses the transcript.
        let _ = self.print(&event);
    }
}

/// The marker line of a finished or suspended tool call.
fn tool_line(result: &ToolResult, outcome: ToolCallOutcome) -> String {
    let message = result.message.as_deref().unwrap_or_default();
    match outcome {
        ToolCallOutcome::Suspended => format!("⏸ approval needed: {message}"),
        ToolCallOutcome::Succeeded => {
            format!("✓ tool result: {}", shorten(&result.to_json_text()))
        }
        ToolCallOutcome::Failed => format!("✗ tool failed: {message}"),
    }
}

/// The termination's code, with the reason for blocks and errors.
pub fn describe(termination: &TerminationReason) -> String {
    match termination {
        TerminationReason::Blocked(reason) | TerminationReason::Error(reason) => {
            format!("{}: {reason}", termination.code())
        }
        other => other.code().to_owned(),
    }
}

fn shorten(text: &str) -> String {
    match text.char_indices().nth(MAX_SHOWN_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use awaken_actors::contract::StoppedReason;
    use awaken_actors::{RunId, ThreadId, ToolCallId};
    use serde_json::json;

    use super::*;

    /// A writer whose bytes the test can read back.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    #[tokio::test]
    async fn streams_text_inline_and_markers_on_their_own_lines() {
        let captured = Captured::default();
        let printer = EventPrinter::new(Arc::new(Terminal::new(Box::new(captured.clone()))));
        let id = ToolCallId::new("c1").unwrap();
        let events = [
            AgentEvent::TextDelta {
                delta: "Let me ".into(),
            },
            AgentEvent::TextDelta {
                delta: "check.".into(),
            },
            AgentEvent::ToolCallReady {
                id: id.clone(),
                name: "echo".into(),
                arguments: json!({"a": 1}),
            },
            AgentEvent::ToolCallDone {
                id,
                message_id: awaken_actors::MessageId::new("m1").unwrap(),
                result: ToolResult::success("echo", json!({"a": 1})),
                outcome: ToolCallOutcome::Succeeded,
            },
            AgentEvent::RunFinish {
                thread_id: ThreadId::new("t").unwrap(),
                run_id: RunId::new("r").unwrap(),
                result: None,
                termination: TerminationReason::Stopped(StoppedReason::new("max_rounds")),
            },
        ];
        for event in events {
            printer.emit(event).await;
        }
        assert_eq!(
            captured.text(),
            "Let me check.\n→ tool call echo({\"a\":1})\n✓ tool result: {\"a\":1}\n■ run finished: max_rounds\n"
        );
    }

    #[test]
    fn long_text_is_shortened() {
        let long = "x".repeat(MAX_SHOWN_CHARS + 10);
        let short = shorten(&long);
        assert_eq!(short.chars().count(), MAX_SHOWN_CHARS + 1);
        assert!(short.ends_with('…'));
        assert_eq!(
            describe(&TerminationReason::Error("boom".into())),
            "error: boom"
        );
    }
}
