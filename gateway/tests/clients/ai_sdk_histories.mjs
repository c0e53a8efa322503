// Checks that the thread histories of `awaken serve`'s /v1/ai-sdk routes are UI
// messages the real `ai@6` package accepts, and that `useChat`'s machinery
// (`AbstractChat`, on which the React `Chat` is built) continues from each.
//
// Six chats are played with `AbstractChat` over the real routes: an approved call,
// a denied one, an approved call whose tool fails, a run left waiting for approval,
// a waiting run cancelled, and a delegated child's approval (agent `orchestrator`).
// Then each chat's history is loaded (`GET …/threads/{id}/messages`), validated with
// `validateUIMessages` (with the server's tools and their input schemas), compared
// with what the client built from the stream (same approval ids and states), and a
// new chat initialised with it goes on: the waiting one is approved with
// `addToolApprovalResponse`, the others get a follow-up message whose approval is
// denied. The continued chat and the reloaded history are validated again.
//
// Prints one JSON line; exits non-zero when the client or a validator rejects
// anything. Usage: node ai_sdk_histories.mjs <base-url> <tools-json>
// (<tools-json>: {"<tool name>": <JSON Schema of its input>, ...}).
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  safeValidateUIMessages,
} from "ai";
import { z } from "zod";

const [base, toolsJson] = process.argv.slice(2);
const api = `${base}/v1/ai-sdk/chat`;
const tools = Object.fromEntries(
  Object.entries(JSON.parse(toolsJson)).map(([name, schema]) => [
    name,
    { inputSchema: z.fromJSONSchema(schema) },
  ]),
);

function check(condition, message) {
  if (!condition) throw new Error(message);
}

// What `useChat` keeps its messages in (the React binding's state, without React).
class ChatState {
  constructor(messages) {
    this.messages = messages;
    this.status = "ready";
    this.error = undefined;
  }
  pushMessage = (message) => {
    this.messages = this.messages.concat(message);
  };
  popMessage = () => {
    this.messages = this.messages.slice(0, -1);
  };
  replaceMessage = (index, message) => {
    this.messages = [
      ...this.messages.slice(0, index),
      this.snapshot(message),
      ...this.messages.slice(index + 1),
    ];
  };
  snapshot = (thing) => structuredClone(thing);
}

class Chat extends AbstractChat {
  constructor({ messages, ...init }) {
    let waiter;
    super({
      ...init,
      state: new ChatState(messages),
      sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
      onFinish: (finish) => waiter?.resolve(finish),
      onError: (error) => waiter?.reject(error),
    });
    // The next response's end (the automatic send after an approval is not awaited).
    this.nextFinish = () =>
      new Promise((resolve, reject) => {
        waiter = { resolve, reject };
      });
  }
}

function chat(id, agentId, messages = []) {
  return new Chat({
    id,
    messages,
    transport: new DefaultChatTransport({ api, body: { agentId } }),
  });
}

async function validated(messages, what) {
  const result = await safeValidateUIMessages({ messages, tools });
  check(
    result.success,
    `${what} rejected by validateUIMessages: ${result.error?.message}\n${JSON.stringify(messages)}`,
  );
}

const toolParts = (message) =>
  message.parts.filter((part) => part.type.startsWith("tool-"));

// What a tool part says about its call: enough to compare the client's and the history's.
const summary = (part) => ({
  toolCallId: part.toolCallId,
  state: part.state,
  approval: part.approval ? { id: part.approval.id, approved: part.approval.approved } : null,
});

function lastToolPart(chat) {
  const last = chat.messages[chat.messages.length - 1];
  check(last?.role === "assistant", `no assistant answer: ${JSON.stringify(chat.messages)}`);
  const parts = toolParts(last);
  check(parts.length > 0, `no tool part in ${JSON.stringify(last)}`);
  return parts[parts.length - 1];
}

async function answer(chat, part, approved, reason) {
  check(part.state === "approval-requested", `not asked: ${JSON.stringify(part)}`);
  const finished = chat.nextFinish();
  await chat.addToolApprovalResponse({ id: part.approval.id, approved, reason });
  const finish = await finished;
  check(!finish.isError && !finish.isAbort, `the answer failed: ${chat.error}`);
}

async function history(threadId) {
  const response = await fetch(`${base}/v1/ai-sdk/threads/${threadId}/messages`);
  check(response.status === 200, `history of ${threadId}: ${response.status}`);
  return (await response.json()).messages;
}

// The history matches what the client built, message by message (`live` may
// lag behind: it never learns of a cancel it did not ask for).
function compare(live, loaded, what) {
  for (const message of live.filter((m) => m.role === "assistant")) {
    const stored = loaded.find((m) => m.id === message.id);
    check(stored, `${what}: message ${message.id} is not in the history`);
    const seen = JSON.stringify(toolParts(message).map(summary));
    const kept = JSON.stringify(toolParts(stored).map(summary));
    check(seen === kept, `${what}: the client saw ${seen}, the history holds ${kept}`);
  }
}

// Plays one chat to the point the scenario needs; returns the live client.
async function play(name, agentId, act) {
  const id = `h-${name}-${process.pid}`;
  const live = chat(id, agentId);
  await live.sendMessage({ text: "tidy up" });
  check(live.status === "ready", `${name}: ${live.status} ${live.error}`);
  const asked = lastToolPart(live);
  await act(live, asked);
  return { name, id, agentId, live, approvalId: asked.approval.id };
}

const scenarios = [
  await play("approved", "demo", (c, part) => answer(c, part, true)),
  await play("denied", "demo", (c, part) => answer(c, part, false, "keep it")),
  // notes.txt is gone by now: the approved call fails.
  await play("failed", "demo", (c, part) => answer(c, part, true)),
  await play("waiting", "demo", async () => {}),
  await play("cancelled", "demo", async (c) => {
    const response = await fetch(`${base}/v1/ai-sdk/threads/${c.id}/cancel`, { method: "POST" });
    check(response.status === 202, `cancel answered ${response.status}`);
  }),
  await play("delegated", "orchestrator", (c, part) => answer(c, part, true)),
];

const report = {};
for (const { name, id, agentId, live, approvalId } of scenarios) {
  const loaded = await history(id);
  await validated(loaded, `the history of ${name}`);
  compare(name === "cancelled" ? [] : live.messages, loaded, name);
  const part = toolParts(loaded[loaded.length - 1]).pop();
  const entry = {
    history: summary(part),
    streamApprovalId: approvalId,
    errorText: part.errorText ?? null,
    reason: part.approval?.reason ?? null,
  };

  // The delegate's child thread has a history of its own.
  if (name === "delegated") {
    const child = await history(part.output.thread_id);
    await validated(child, "the child's history");
    entry.child = toolParts(child[child.length - 1]).map(summary);
  }

  // `useChat` initialised with the history goes on from it.
  const resumed = chat(id, agentId, loaded);
  if (name === "waiting") {
    await answer(resumed, lastToolPart(resumed), true);
  } else {
    await resumed.sendMessage({ text: "once more" });
    check(resumed.status === "ready", `${name} resumed: ${resumed.status} ${resumed.error}`);
    await answer(resumed, lastToolPart(resumed), false, "enough");
  }
  await validated(resumed.messages, `the chat resumed from ${name}`);
  const reloaded = await history(id);
  await validated(reloaded, `the history of ${name} after resuming`);
  compare(resumed.messages, reloaded, `${name} resumed`);
  const last = resumed.messages[resumed.messages.length - 1];
  entry.resumed = {
    messages: resumed.messages.length,
    sameMessage: last.id === loaded[loaded.length - 1].id,
    tool: summary(lastToolPart(resumed)),
    termination: last.metadata?.termination ?? null,
  };
  report[name] = entry;
}
console.log(JSON.stringify(report));
