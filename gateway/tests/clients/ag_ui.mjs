// Drives `awaken serve`'s /v1/ag-ui routes with the real `@ag-ui/client`
// (`HttpAgent`), validating every event with `@ag-ui/core`'s zod schema, through an
// interrupt and its resume. Prints what it saw as one JSON line; exits non-zero
// when the client or a schema rejects anything.
// Usage: node ag_ui.mjs <base-url>
import { HttpAgent } from "@ag-ui/client";
import { EventSchema } from "@ag-ui/core/schemas";

const base = process.argv[2];

function check(condition, message) {
  if (!condition) throw new Error(message);
}

async function run(agent, parameters) {
  const types = [];
  const finished = [];
  await agent.runAgent(parameters, {
    onEvent({ event }) {
      const parsed = EventSchema.safeParse(event);
      check(parsed.success, `event rejected: ${JSON.stringify(event)}: ${parsed.error}`);
      types.push(event.type);
    },
    onRunFinishedEvent({ event }) {
      finished.push(event);
    },
  });
  check(finished.length === 1, `expected one RUN_FINISHED, saw ${types.join(",")}`);
  return { types, finished: finished[0] };
}

async function interruptAndResume(status) {
  const agent = new HttpAgent({
    url: `${base}/v1/ag-ui/agents/demo/runs`,
    threadId: `ag-${status}-${process.pid}`,
    initialMessages: [{ id: `u-${status}-${process.pid}`, role: "user", content: "tidy up" }],
  });
  const first = await run(agent, { runId: `first-${status}-${process.pid}` });
  check(first.finished.outcome?.type === "interrupt", `no interrupt: ${JSON.stringify(first.finished)}`);
  const pending = agent.pendingInterrupts.map((i) => ({ id: i.id, toolCallId: i.toolCallId }));
  check(pending.length === 1, `pending interrupts: ${JSON.stringify(agent.pendingInterrupts)}`);

  const second = await run(agent, {
    runId: `second-${status}-${process.pid}`,
    resume: pending.map((i) => ({ interruptId: i.id, status })),
  });
  return {
    first: { types: first.types, runId: first.finished.runId, outcome: first.finished.outcome },
    pending,
    second: {
      types: second.types,
      runId: second.finished.runId,
      outcome: second.finished.outcome,
      result: second.finished.result ?? null,
    },
    pendingAfter: agent.pendingInterrupts.length,
    messages: agent.messages.map((m) => ({
      role: m.role,
      content: typeof m.content === "string" ? m.content : null,
      toolCallId: m.toolCallId ?? null,
      toolCalls: (m.toolCalls ?? []).map((c) => c.function.name),
    })),
  };
}

const resolved = await interruptAndResume("resolved");
const cancelled = await interruptAndResume("cancelled");
console.log(JSON.stringify({ resolved, cancelled }));
