// Checks that the histories `awaken serve`'s /v1/ag-ui routes send — the
// `MESSAGES_SNAPSHOT` and `STATE_SNAPSHOT` that end every run, and
// `GET …/threads/{id}/messages` — pass `@ag-ui/core`'s own schemas, and that the
// real `HttpAgent` goes on from each.
//
// Six threads are played with `HttpAgent`: an approved call (resume `resolved`), a
// denied one (`cancelled`), an approved call whose tool fails, a run left waiting,
// a waiting run interrupted, and a delegated child's approval (agent
// `orchestrator`). Every event of every run is checked with `EventSchema`, the
// snapshots with `MessagesSnapshotEventSchema` / `StateSnapshotEventSchema`. Each
// thread's history is then loaded and checked with `MessageSchema`, and a new agent
// initialised with it goes on: the waiting run is resumed with the interrupt the
// first agent was given, the others get a new message whose interrupt is cancelled.
//
// Prints one JSON line; exits non-zero when the client or a schema rejects
// anything. Usage: node ag_ui_histories.mjs <base-url>
import { HttpAgent } from "@ag-ui/client";
import {
  EventSchema,
  MessageSchema,
  MessagesSnapshotEventSchema,
  StateSnapshotEventSchema,
} from "@ag-ui/core/schemas";
import { z } from "zod";

const base = process.argv[2];
let runs = 0;

function check(condition, message) {
  if (!condition) throw new Error(message);
}

function parsed(schema, value, what) {
  const result = schema.safeParse(value);
  check(result.success, `${what} rejected: ${result.error}\n${JSON.stringify(value)}`);
  return result.data;
}

function agentFor(agentId, threadId, messages) {
  return new HttpAgent({
    url: `${base}/v1/ag-ui/agents/${agentId}/runs`,
    threadId,
    initialMessages: messages,
  });
}

// One run; every event validated, the snapshots by their own schemas too.
async function run(agent, parameters, what) {
  const seen = { messagesSnapshots: [], stateSnapshots: 0, finished: null };
  runs += 1;
  await agent.runAgent(
    { runId: `run-${runs}-${process.pid}`, ...parameters },
    {
      onEvent({ event }) {
        parsed(EventSchema, event, `${what}: ${event.type}`);
        if (event.type === "MESSAGES_SNAPSHOT") {
          parsed(MessagesSnapshotEventSchema, event, `${what}: MESSAGES_SNAPSHOT`);
          seen.messagesSnapshots.push(event.messages);
        }
        if (event.type === "STATE_SNAPSHOT") {
          parsed(StateSnapshotEventSchema, event, `${what}: STATE_SNAPSHOT`);
          seen.stateSnapshots += 1;
        }
      },
      onRunFinishedEvent({ event }) {
        seen.finished = event;
      },
    },
  );
  check(seen.finished, `${what}: no RUN_FINISHED`);
  check(seen.messagesSnapshots.length > 0, `${what}: no MESSAGES_SNAPSHOT`);
  check(seen.stateSnapshots > 0, `${what}: no STATE_SNAPSHOT`);
  parsed(z.array(MessageSchema), agent.messages, `${what}: the agent's messages`);
  return seen;
}

// JSON with sorted keys: the client hands events on as its schema parsed them.
const canonical = (value) =>
  JSON.stringify(value, (_, v) =>
    v && typeof v === "object" && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v).sort(([a], [b]) => (a < b ? -1 : 1)))
      : v,
  );

const interruptsOf = (seen) =>
  seen.finished.outcome?.type === "interrupt" ? seen.finished.outcome.interrupts : [];

async function resume(agent, interrupts, status, what) {
  check(interrupts.length === 1, `${what}: interrupts ${JSON.stringify(interrupts)}`);
  return run(agent, { resume: interrupts.map((i) => ({ interruptId: i.id, status })) }, what);
}

async function history(threadId) {
  const response = await fetch(`${base}/v1/ag-ui/threads/${threadId}/messages`);
  check(response.status === 200, `history of ${threadId}: ${response.status}`);
  const { messages } = await response.json();
  parsed(z.array(MessageSchema), messages, `the history of ${threadId}`);
  parsed(
    MessagesSnapshotEventSchema,
    { type: "MESSAGES_SNAPSHOT", messages },
    `the history of ${threadId} as a snapshot`,
  );
  return messages;
}

async function play(name, agentId, act) {
  const threadId = `ag-h-${name}-${process.pid}`;
  const agent = agentFor(agentId, threadId, [
    { id: `u-${name}-${process.pid}`, role: "user", content: "tidy up" },
  ]);
  const asked = await run(agent, {}, name);
  const interrupts = interruptsOf(asked);
  const last = (await act(agent, interrupts)) ?? asked;
  return { name, agentId, threadId, interrupts, last };
}

const scenarios = [
  await play("approved", "demo", (a, i) => resume(a, i, "resolved", "approved")),
  await play("denied", "demo", (a, i) => resume(a, i, "cancelled", "denied")),
  // notes.txt is gone by now: the approved call fails.
  await play("failed", "demo", (a, i) => resume(a, i, "resolved", "failed")),
  await play("waiting", "demo", async () => null),
  await play("cancelled", "demo", async (a) => {
    const response = await fetch(`${base}/v1/ag-ui/threads/${a.threadId}/interrupt`, {
      method: "POST",
    });
    check(response.status === 202, `interrupt answered ${response.status}`);
    return null;
  }),
  await play("delegated", "orchestrator", (a, i) => resume(a, i, "resolved", "delegated")),
];

const report = {};
for (const { name, agentId, threadId, interrupts, last } of scenarios) {
  const loaded = await history(threadId);
  const streamed = last.messagesSnapshots[last.messagesSnapshots.length - 1];
  if (name !== "cancelled") {
    check(
      canonical(streamed) === canonical(loaded),
      `${name}: the last snapshot and the history differ\n${canonical(streamed)}\n${canonical(loaded)}`,
    );
  }
  const tool = loaded.filter((m) => m.role === "tool").pop();
  const entry = {
    roles: loaded.map((m) => m.role),
    outcome: last.finished.outcome?.type ?? null,
    tool: tool?.content ?? null,
  };
  if (name === "delegated") {
    const child = await history(JSON.parse(tool.content).thread_id);
    entry.child = child.map((m) => m.role);
  }

  // A new agent initialised with the history goes on from it.
  let next;
  if (name === "waiting") {
    next = await resume(agentFor(agentId, threadId, loaded), interrupts, "resolved", `${name} resumed`);
  } else {
    const agent = agentFor(agentId, threadId, [
      ...loaded,
      { id: `u2-${name}-${process.pid}`, role: "user", content: "once more" },
    ]);
    const asked = await run(agent, {}, `${name} continued`);
    next = await resume(agent, interruptsOf(asked), "cancelled", `${name} continued`);
  }
  const reloaded = await history(threadId);
  entry.resumed = {
    outcome: next.finished.outcome?.type ?? null,
    messages: reloaded.length,
    grew: reloaded.length > loaded.length,
  };
  report[name] = entry;
}
console.log(JSON.stringify(report));
