#!/usr/bin/env python3
"""Workload W for a long time against `awaken serve` held to a memory limit.

The node runs inside a memory cgroup this script creates (cgroup v1's `memory`
controller, or a v2 child group), so the kernel enforces the limit and the node
reads its budget from it, as in a pod. First `--waiting` runs of the
`bench-hitl` agent are started and left waiting for approval; then
`awaken bench http --url` drives workload W (every run on a new thread) for
`--duration` seconds while the node's resident memory, its cgroup's usage and
the `/metrics` memory gauges are sampled; then every waiting run is approved
and must end `natural_end`. Before all that, the same binary's fresh-node
throughput is measured (`awaken bench http`, its own child, no limit) for the
comparison the goal asks for.

Prints one JSON report on stdout (samples go to `--samples` as JSON lines):
runs and runs/s, errors, the fresh node's runs/s, resident memory at the end of
the warm-up and at the end, the growth over the rest, the cgroup's OOM kills
and whether the node is still alive, the waiting runs finished, and the memory
each waiting run held (resident growth while they were started).

Run as root on Linux (creating cgroups needs it):

    python3 scripts/bench_memory.py --awaken target/release/awaken \\
        --duration 1800 --warm-up 600 --limit 1073741824 --waiting 10000
"""

import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

MEMORY_LINE = re.compile(r'^awaken_memory_(bytes|limit_bytes|evictions_total)\{cache="(\w+)"\} (\S+)$')
PLAIN_LINE = re.compile(r"^(awaken_[a-z_]+) (\S+)$")


def make_cgroup(name, limit):
    """A memory cgroup with `limit` bytes; returns (dir, version)."""
    v1 = "/sys/fs/cgroup/memory"
    if os.path.isdir(v1):
        path = os.path.join(v1, name)
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "memory.limit_in_bytes"), "w") as f:
            f.write(str(limit))
        return path, 1
    own = ""
    with open("/proc/self/cgroup") as f:
        for line in f:
            if line.startswith("0::"):
                own = line.strip()[3:]
    path = os.path.join("/sys/fs/cgroup" + own, name)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "memory.max"), "w") as f:
        f.write(str(limit))
    return path, 2


def read(path, default=""):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default


def oom_kills(cgroup, version):
    text = read(os.path.join(cgroup, "memory.oom_control" if version == 1 else "memory.events"))
    match = re.search(r"^oom_kill (\d+)$", text, re.M)
    return int(match.group(1)) if match else 0


def cgroup_usage(cgroup, version):
    name = "memory.usage_in_bytes" if version == 1 else "memory.current"
    return int(read(os.path.join(cgroup, name), "0").strip() or 0)


def rss_bytes(pid):
    match = re.search(r"^VmRSS:\s+(\d+) kB$", read(f"/proc/{pid}/status"), re.M)
    return int(match.group(1)) * 1024 if match else 0


def get(url, timeout=30):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode()


def post(url, body, timeout=120):
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.status, response.read().decode()


def metrics(base):
    caches, plain = {}, {}
    for line in get(f"{base}/metrics").splitlines():
        memory = MEMORY_LINE.match(line)
        if memory:
            caches.setdefault(memory.group(2), {})[memory.group(1)] = float(memory.group(3))
            continue
        other = PLAIN_LINE.match(line)
        if other:
            plain[other.group(1)] = float(other.group(2))
    return caches, plain


def start_waiting(base):
    """One bench-hitl run read to its suspension: (run id, call id)."""
    status, text = post(
        f"{base}/v1/runs",
        {"agentId": "bench-hitl", "messages": [{"role": "user", "content": "go"}]},
    )
    run_id = call_id = finish = None
    for line in text.splitlines():
        if not line.startswith("data: "):
            continue
        event = json.loads(line[6:])
        kind = event.get("event_type")
        if kind == "run_start":
            run_id = event["run_id"]
        elif kind == "tool_call_done" and event.get("result", {}).get("suspension"):
            call_id = event["id"]
        elif kind == "run_finish":
            finish = event["termination"]["type"]
    if status != 200 or finish != "suspended" or not (run_id and call_id):
        raise RuntimeError(f"a waiting run did not suspend: {status} {text[-300:]}")
    return run_id, call_id


def approve(base, run_id, call_id):
    """Approves the waiting run; whether it then ended natural_end."""
    status, body = post(
        f"{base}/v1/runs/{run_id}/decision",
        {"call_id": call_id, "decision_id": f"d-{run_id}", "action": "resume", "result": {"approved": True}},
    )
    if status != 200:
        return False
    record = json.loads(get(f"{base}/v1/runs/{run_id}"))
    return record.get("status") == "done" and (record.get("termination") or {}).get("type") == "natural_end"


def bench_http(awaken, extra):
    out = subprocess.run([awaken, "bench", "http", "--quiet", *extra], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--awaken", default="target/release/awaken")
    parser.add_argument("--duration", type=int, default=1800, help="seconds of load")
    parser.add_argument("--warm-up", type=int, default=600, help="seconds before growth is measured")
    parser.add_argument("--limit", type=int, default=1 << 30, help="the cgroup's memory limit, bytes")
    parser.add_argument("--waiting", type=int, default=10000, help="runs left waiting for approval")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--fresh-runs", type=int, default=20000, help="runs of the fresh-node reference")
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--samples", default="/tmp/bench-memory-samples.jsonl")
    args = parser.parse_args()

    fresh = bench_http(args.awaken, ["--runs", str(args.fresh_runs), "--concurrency", str(args.concurrency)])

    cgroup, version = make_cgroup(f"awaken-bench-{os.getpid()}", args.limit)
    node = subprocess.Popen(
        ["sh", "-c", f'echo $$ > {cgroup}/cgroup.procs && exec "$0" serve --address 127.0.0.1:0', args.awaken],
        stdout=subprocess.PIPE,
        stderr=open("/tmp/bench-memory-node.log", "w"),
        text=True,
    )
    try:
        listening = json.loads(node.stdout.readline())
        base = f"http://{listening['address']}"
        _, plain = metrics(base)
        budget = plain.get("awaken_memory_budget_bytes", 0)

        rss_before = rss_bytes(node.pid)
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            waiting = list(pool.map(lambda _: start_waiting(base), range(args.waiting)))
        rss_waiting = rss_bytes(node.pid)

        samples, stop = [], threading.Event()

        def sample():
            started = time.monotonic()
            with open(args.samples, "w") as out:
                while not stop.wait(args.interval):
                    if node.poll() is not None:
                        break
                    caches, plain = metrics(base)
                    row = {
                        "t": round(time.monotonic() - started, 1),
                        "rss": rss_bytes(node.pid),
                        "cgroup": cgroup_usage(cgroup, version),
                        "caches": caches,
                        "warm_threads": plain.get("awaken_threads_warm"),
                        "claims_deferred": plain.get("awaken_mailbox_claims_deferred_total"),
                    }
                    samples.append(row)
                    out.write(json.dumps(row) + "\n")
                    out.flush()

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        load = bench_http(
            args.awaken,
            ["--url", base, "--runs", "1000000000", "--timeout-s", str(args.duration),
             "--concurrency", str(args.concurrency), "--run-timeout-s", "60"],
        )
        stop.set()
        sampler.join()

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            finished = sum(pool.map(lambda w: approve(base, *w), waiting))

        after = [s for s in samples if s["t"] >= args.warm_up]
        rss_warm = after[0]["rss"] if after else 0
        report = {
            "scenario": "memory",
            "limit_bytes": args.limit,
            "budget_bytes": budget,
            "cgroup_version": version,
            "duration_s": args.duration,
            "runs": load.get("runs"),
            "runs_per_s": load.get("runs_per_s"),
            "errors": load.get("errors"),
            "first_error": load.get("first_error"),
            "p99_us": load.get("p99_us"),
            "fresh_runs_per_s": fresh.get("runs_per_s"),
            "throughput_vs_fresh": round(load.get("runs_per_s", 0) / max(fresh.get("runs_per_s", 1), 1e-9), 3),
            "rss_after_warm_up_mb": round(rss_warm / 2**20, 1),
            "rss_end_mb": round(samples[-1]["rss"] / 2**20, 1) if samples else 0,
            "rss_max_after_warm_up_mb": round(max((s["rss"] for s in after), default=0) / 2**20, 1),
            "growth_after_warm_up_pct": round(
                100 * (max((s["rss"] for s in after), default=0) - rss_warm) / max(rss_warm, 1), 2
            ),
            "alive": node.poll() is None,
            "oom_kills": oom_kills(cgroup, version),
            "waiting": args.waiting,
            "waiting_finished": finished,
            "bytes_per_waiting_run": (rss_waiting - rss_before) // max(args.waiting, 1),
            "last_sample": samples[-1] if samples else None,
        }
        print(json.dumps(report))
        return 0 if report["alive"] and finished == args.waiting and not report["oom_kills"] else 1
    finally:
        node.kill()
        node.wait()
        try:
            os.rmdir(cgroup)
        except OSError:
            pass


if __name__ == "__main__":
    sys.exit(main())
