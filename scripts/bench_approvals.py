#!/usr/bin/env python3
"""The approvals inbox with many approvals waiting, on PostgreSQL.

Starts one `awaken serve` on a database made for the run (`--postgres`), leaves
`--waiting` runs of the `bench-hitl` agent waiting for approval (each one
approval), then times the inbox's requests, one at a time, `--requests` of each:

- `first_page`: `GET /v1/approvals?status=pending` (50 oldest pending);
- `filtered_page`: `GET /v1/approvals?status=pending&agent_id=bench-hitl&tool=…`
  after the cursor half-way through the waiting ones (a filtered, later page);
- `one`: `GET /v1/approvals/{id}` of a random waiting approval.

Checks on the way that paging with the cursor lists every waiting approval once.
Prints one JSON report: p50/p99/max in milliseconds per request kind, the
resident memory each waiting approval added to the node, and how many were
listed.

    python3 scripts/bench_approvals.py --awaken target/release/awaken --waiting 10000
"""

import argparse
import concurrent.futures
import json
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_memory import get, rss_bytes, start_waiting  # noqa: E402


def percentile(samples, fraction):
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def timed(url, count):
    """`count` GETs of `url` (a function of the attempt), in ms."""
    samples = []
    for n in range(count):
        started = time.perf_counter()
        get(url(n))
        samples.append((time.perf_counter() - started) * 1000)
    return {
        "p50_ms": round(percentile(samples, 0.5), 2),
        "p99_ms": round(percentile(samples, 0.99), 2),
        "max_ms": round(max(samples), 2),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--awaken", default="target/release/awaken")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--waiting", type=int, default=10000)
    parser.add_argument("--requests", type=int, default=500)
    args = parser.parse_args()

    database = f"awaken_approvals_{os.getpid()}"
    subprocess.run(["psql", args.postgres, "-qc", f"CREATE DATABASE {database}"], check=True)
    config = f"/tmp/{database}.toml"
    with open(config, "w") as f:
        url = args.postgres.rsplit("/", 1)[0] + "/" + database
        f.write(f'[server]\naddress = "127.0.0.1:0"\n\n[store]\nkind = "postgres"\nurl = "{url}"\n')
    node = subprocess.Popen([args.awaken, "serve", "--config", config], stdout=subprocess.PIPE, text=True)
    try:
        base = f"http://{json.loads(node.stdout.readline())['address']}"
        rss_before = rss_bytes(node.pid)
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda _: start_waiting(base), range(args.waiting)))
        rss_after = rss_bytes(node.pid)

        ids, cursors, after, tool = [], [], "", None
        while True:
            page = json.loads(get(f"{base}/v1/approvals?status=pending&limit=200{after}"))
            ids.extend(item["approval_id"] for item in page["items"])
            tool = tool or page["items"][0]["tool_name"]
            if "next_cursor" not in page:
                break
            cursors.append(page["next_cursor"])
            after = f"&after={page['next_cursor']}"
        if len(ids) != args.waiting or len(set(ids)) != len(ids):
            raise RuntimeError(f"{len(ids)} listed ({len(set(ids))} distinct) of {args.waiting}")
        cursor = cursors[len(cursors) // 2] if cursors else ""

        report = {
            "scenario": "approvals-inbox",
            "waiting": args.waiting,
            "listed": len(ids),
            "bytes_per_waiting_approval": (rss_after - rss_before) // max(args.waiting, 1),
            "first_page": timed(lambda _: f"{base}/v1/approvals?status=pending", args.requests),
            "filtered_page": timed(
                lambda _: f"{base}/v1/approvals?status=pending&agent_id=bench-hitl&tool={tool}&after={cursor}",
                args.requests,
            ),
            "one": timed(lambda _: f"{base}/v1/approvals/{random.choice(ids)}", args.requests),
        }
        print(json.dumps(report))
        return 0
    finally:
        node.kill()
        node.wait()
        subprocess.run(["psql", args.postgres, "-qc", f"DROP DATABASE IF EXISTS {database} WITH (FORCE)"])
        os.remove(config)


if __name__ == "__main__":
    sys.exit(main())
