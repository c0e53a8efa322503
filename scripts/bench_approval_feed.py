#!/usr/bin/env python3
"""How soon the approval feed's records reach a NATS subscriber.

Starts a `nats-server -js` of its own (a free port, a temporary directory) and one
`awaken serve` cluster node on a PostgreSQL database made for the run, subscribes
with nats-py to `awaken.approvals.>`, then, `--concurrency` at a time, starts
`--approvals` runs of the `bench-hitl` agent (each waits for one approval) and
decides each one over HTTP. For every record it takes the time it arrived minus
the time its change was made: the approval's `requested_at` (set as the call
suspends, before its checkpoint) for a request, `resolved_at` (set as the decision
is applied, before its checkpoint) for a resolution. Both are unix milliseconds,
so each latency is good to about a millisecond.

The physical reference, in the same run and under the same load: `--approvals`
raw JetStream publishes (one every 5 ms) to a stream of their own, from publish
to the same subscriber. The subscriber is a process of its own, so the load
generator's threads never delay its timestamps.

Prints one JSON report: p50/p99/max in milliseconds for requested, resolved and
the raw publishes, and how many records arrived.

    target/py-venv/bin/python scripts/bench_approval_feed.py --awaken target/release/awaken
"""

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import nats

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_memory import get, post, start_waiting  # noqa: E402


def percentile(samples, fraction):
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def summary(samples):
    return {
        "count": len(samples),
        "p50_ms": round(percentile(samples, 0.5), 2),
        "p99_ms": round(percentile(samples, 0.99), 2),
        "max_ms": round(max(samples), 2),
    }


def store_means(text):
    """The node's mean store latency per operation, in ms, from /metrics."""
    sums, counts = {}, {}
    for line in text.splitlines():
        for suffix, into in (("_sum", sums), ("_count", counts)):
            prefix = f"awaken_store_operation_duration_seconds{suffix}{{"
            if line.startswith(prefix):
                operation = line.split('operation="', 1)[1].split('"', 1)[0]
                into[operation] = float(line.rsplit(" ", 1)[1])
    return {
        operation: round(1000 * sums[operation] / counts[operation], 2)
        for operation in ("checkpoint", "approvals_published", "load_approval")
        if counts.get(operation)
    }


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def now_ms():
    return time.time() * 1000


async def subscriber(url, expected, raw_count):
    """The receiving end, in a process of its own so the load generator's
    threads never delay a timestamp: prints the latencies as JSON once
    `expected` records and `raw_count` raw messages arrived."""
    nc = await nats.connect(url)
    latencies = {"requested": [], "resolved": [], "raw": []}
    done = asyncio.Event()

    def check():
        if len(latencies["raw"]) >= raw_count and (
            len(latencies["requested"]) + len(latencies["resolved"]) >= expected
        ):
            done.set()

    async def on_record(msg):
        arrived = now_ms()
        record = json.loads(msg.data)
        approval = record["approval"]
        made = approval["requested_at"] if record["event"] == "requested" else approval["resolved_at"]
        latencies[record["event"]].append(arrived - made)
        check()

    async def on_raw(msg):
        latencies["raw"].append(now_ms() - float(msg.data))
        check()

    await nc.subscribe("awaken.approvals.>", cb=on_record)
    await nc.subscribe("bench.raw.>", cb=on_raw)
    await nc.flush()
    print("ready", flush=True)
    await asyncio.wait_for(done.wait(), 600)
    print(json.dumps(latencies), flush=True)
    await nc.close()


async def raw_load(nc, count, every):
    """`count` raw JetStream publishes, one every `every` seconds, beside the
    approvals: the physical reference under the same load."""
    js = nc.jetstream()
    await js.add_stream(name="BENCH_RAW", subjects=["bench.raw.>"])
    for n in range(count):
        await js.publish(f"bench.raw.{n % 16}", str(now_ms()).encode())
        await asyncio.sleep(every)


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--awaken", default="target/release/awaken")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--approvals", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()

    workdir = tempfile.mkdtemp(prefix="awaken-feed-bench-")
    port = free_port()
    nats_server = subprocess.Popen(
        ["nats-server", "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", workdir],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    database = f"awaken_feed_{os.getpid()}"
    subprocess.run(["psql", args.postgres, "-qc", f"CREATE DATABASE {database}"], check=True)
    config = os.path.join(workdir, "awaken.toml")
    url = args.postgres.rsplit("/", 1)[0] + "/" + database
    with open(config, "w") as f:
        f.write(
            f'[server]\naddress = "127.0.0.1:0"\n\n[store]\nkind = "postgres"\nurl = "{url}"\n\n'
            f'[cluster]\nnats_url = "nats://127.0.0.1:{port}"\nnode_id = "bench-1"\n'
        )
    node = None
    try:
        time.sleep(0.5)  # the server opens its port (nats-py retries too)
        nc = await nats.connect(f"nats://127.0.0.1:{port}")
        node = subprocess.Popen(
            [args.awaken, "serve", "--config", config], stdout=subprocess.PIPE, text=True
        )
        line = await asyncio.to_thread(node.stdout.readline)
        base = f"http://{json.loads(line)['address']}"

        receiver = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--subscribe",
             f"nats://127.0.0.1:{port}", str(2 * args.approvals), str(args.approvals)],
            stdout=subprocess.PIPE, text=True,
        )
        assert (await asyncio.to_thread(receiver.stdout.readline)).strip() == "ready"

        def one(_):
            run_id, _call = start_waiting(base)
            page = json.loads(get(f"{base}/v1/approvals?status=pending&limit=200"))
            mine = [a for a in page["items"] if a["run_id"] == run_id]
            if mine:
                post(
                    f"{base}/v1/approvals/{mine[0]['approval_id']}/decision",
                    {"action": "resume", "result": {"approved": True}},
                )

        semaphore = asyncio.Semaphore(args.concurrency)

        async def bounded(n):
            async with semaphore:
                await asyncio.to_thread(one, n)

        started = time.perf_counter()
        raw = asyncio.create_task(raw_load(nc, args.approvals, 0.005))
        await asyncio.gather(*(bounded(n) for n in range(args.approvals)))
        elapsed = time.perf_counter() - started
        await raw
        latencies = json.loads(await asyncio.to_thread(receiver.stdout.readline))
        receiver.wait()
        store_ms = store_means(get(f"{base}/metrics"))
        await nc.close()
        print(
            json.dumps(
                {
                    "approvals": args.approvals,
                    "concurrency": args.concurrency,
                    "seconds": round(elapsed, 1),
                    "requested": summary(latencies["requested"]),
                    "resolved": summary(latencies["resolved"]),
                    "raw_jetstream": summary(latencies["raw"]),
                    "store_mean_ms": store_ms,
                }
            )
        )
    finally:
        if node:
            node.terminate()
            node.wait()
        nats_server.terminate()
        nats_server.wait()
        subprocess.run(["psql", args.postgres, "-qc", f"DROP DATABASE {database}"], check=False)
        shutil.rmtree(workdir, ignore_errors=True)


if len(sys.argv) > 1 and sys.argv[1] == "--subscribe":
    asyncio.run(subscriber(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
else:
    asyncio.run(main())
