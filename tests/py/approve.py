"""A NATS-only approver, as docs/cluster.md describes it: follows the approval
feed, decides each requested approval on the decision bus with JetStream, and
waits until the feed says each was resolved. Uses nats-py (a NATS client that is
not Awaken's code), logged in as a least-privilege approver user.

usage: approve.py URL USER PASSWORD COUNT
Prints "ready" once subscribed, then one JSON line:
{"requested": [records], "resolved": [records], "tenants": [headers], "acks": [streams]}.
"""

import asyncio
import json
import sys

import nats

# How long the approvals may take to arrive and resolve, in seconds.
WITHIN = 90


async def main() -> None:
    url, user, password, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    nc = await nats.connect(url, user=user, password=password, allow_reconnect=False)
    js = nc.jetstream()
    requested, resolved, tenants, acks = [], [], [], []
    done = asyncio.Event()

    async def on_requested(msg) -> None:
        record = json.loads(msg.data)
        requested.append(record)
        tenants.append((msg.headers or {}).get("Awaken-Tenant"))
        approval = record["approval"]
        decision = {
            "call_id": approval["call_id"],
            "decision_id": "nats-" + approval["approval_id"],
            "action": "resume",
            "result": {"approved": True},
            "reason": "approved from NATS",
        }
        ack = await js.publish(
            "awaken.decisions." + approval["thread_id"],
            json.dumps(decision).encode(),
            headers={"Content-Type": "application/json"},
        )
        acks.append(ack.stream)

    async def on_resolved(msg) -> None:
        resolved.append(json.loads(msg.data))
        if len(resolved) >= count:
            done.set()

    await nc.subscribe("awaken.approvals.requested.>", cb=on_requested)
    await nc.subscribe("awaken.approvals.resolved.>", cb=on_resolved)
    await nc.flush()
    print("ready", flush=True)
    await asyncio.wait_for(done.wait(), WITHIN)
    print(json.dumps({"requested": requested, "resolved": resolved,
                      "tenants": tenants, "acks": acks}), flush=True)
    await nc.close()


asyncio.run(main())
