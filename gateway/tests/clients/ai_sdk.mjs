// Drives `awaken serve`'s /v1/ai-sdk routes with the real `ai@6` client and prints
// what it saw as one JSON line; exits non-zero when the client rejects anything.
// Usage: node ai_sdk.mjs <base-url>
import {
  DefaultChatTransport,
  parseJsonEventStream,
  readUIMessageStream,
  uiMessageChunkSchema,
} from "ai";

const base = process.argv[2];
const api = `${base}/v1/ai-sdk/chat`;

function check(condition, message) {
  if (!condition) throw new Error(message);
}

function streamOf(text) {
  return new ReadableStream({
    start(controller) {
      controller.enqueue(new TextEncoder().encode(text));
      controller.close();
    },
  });
}

// Every chunk of a run with a tool call, validated by the client's own schema.
async function validatedChunks() {
  const response = await fetch(api, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      id: `raw-${process.pid}`,
      agentId: "bench",
      trigger: "submit-message",
      messages: [{ id: "u-raw", role: "user", parts: [{ type: "text", text: "go" }] }],
    }),
  });
  check(response.status === 200, `chat answered ${response.status}`);
  check(
    response.headers.get("x-vercel-ai-ui-message-stream") === "v1",
    "missing x-vercel-ai-ui-message-stream: v1",
  );
  const text = await response.text();
  check(text.endsWith("data: [DONE]\n\n"), "the stream does not end with [DONE]");
  const types = [];
  for await (const parsed of parseJsonEventStream({
    stream: streamOf(text),
    schema: uiMessageChunkSchema,
  })) {
    check(parsed.success, `chunk rejected: ${parsed.error} in ${JSON.stringify(parsed.rawValue)}`);
    types.push(parsed.value.type);
  }
  // The same chunks, assembled by the client into a message.
  const chunks = parseJsonEventStream({ stream: streamOf(text), schema: uiMessageChunkSchema })
    .pipeThrough(new TransformStream({ transform: (r, c) => c.enqueue(r.value) }));
  let message;
  for await (const m of readUIMessageStream({ stream: chunks, terminateOnError: true })) message = m;
  return { types, message };
}

async function lastMessage(stream, message) {
  let last;
  for await (const m of readUIMessageStream({ message, stream, terminateOnError: true })) last = m;
  return last;
}

// useChat's transport through an approval: the run suspends, the client answers
// in the same assistant message, the continuation resumes the same run.
async function approvalRoundTrip(approved) {
  const transport = new DefaultChatTransport({ api, body: { agentId: "demo" } });
  const chatId = `chat-${approved ? "yes" : "no"}-${process.pid}`;
  const user = { id: `u-${chatId}`, role: "user", parts: [{ type: "text", text: "tidy up" }] };
  const first = await transport.sendMessages({
    chatId,
    messages: [user],
    trigger: "submit-message",
    messageId: undefined,
    abortSignal: undefined,
  });
  const asked = await lastMessage(first);
  const part = asked.parts.find((p) => p.type === "tool-delete_file");
  check(part, `no delete_file part in ${JSON.stringify(asked)}`);
  check(part.state === "approval-requested", `tool part is ${part.state}`);
  const approvalId = part.approval.id;

  const answered = structuredClone(asked);
  const answeredPart = answered.parts.find((p) => p.type === "tool-delete_file");
  answeredPart.state = "approval-responded";
  answeredPart.approval = { id: approvalId, approved, reason: approved ? undefined : "keep it" };
  const second = await transport.sendMessages({
    chatId,
    messages: [user, answered],
    trigger: "submit-message",
    messageId: undefined,
    abortSignal: undefined,
  });
  const final = await lastMessage(second, answered);
  const finalPart = final.parts.find((p) => p.type === "tool-delete_file");
  const resumed = await transport.reconnectToStream({ chatId });
  return {
    askedId: asked.id,
    askedMetadata: asked.metadata,
    approvalId,
    finalId: final.id,
    finalMetadata: final.metadata,
    toolState: finalPart.state,
    toolOutput: finalPart.output ?? null,
    text: final.parts.filter((p) => p.type === "text").map((p) => p.text).join(""),
    resumedAfterFinish: resumed !== null,
  };
}

const raw = await validatedChunks();
const approvedRun = await approvalRoundTrip(true);
const deniedRun = await approvalRoundTrip(false);
console.log(JSON.stringify({ raw, approved: approvedRun, denied: deniedRun }));
