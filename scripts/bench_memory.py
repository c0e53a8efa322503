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
throughput is measured (the same nodes, started anew without a limit, for
`--fresh-seconds`) for the comparison the goal asks for. The nodes keep their
threads in PostgreSQL (`--store postgres`, a database made for the run on
`--postgres`), as deployed: the embedded in-memory store holds every thread
for good, so it grows with the load whatever the caches do.

With `--nodes N` above one the nodes form a cluster, each in a cgroup of its
own: a `nats-server -js` this script starts on a free port, the database,
one `awaken bench http` per node at `--concurrency / N` (a run is accepted by
the node it is sent to and executed by its thread's owner), the waiting runs
spread over the nodes.

Prints one JSON report on stdout (samples go to `--samples` as JSON lines):
runs and runs/s, errors, the fresh node's runs/s (on fresh and on grown
state), the run rate in consecutive `--window`s, resident memory at the end of
the warm-up and at the end, the growth over the rest, the cgroup's OOM kills
and whether the node is still alive, the waiting runs finished, and the memory
each waiting run held (resident growth while they were started).

`--per-item` measures instead, on one fresh node without a limit, what an
active run adds to the node's resident memory: `--items` (at most 250: one
client address may hold 256 connections) runs of the `slow` agent at once (its
tool sleeps 1.5 s; each with its open HTTP stream), beside what the admitted
meter estimates for them.

Run as root on Linux (creating cgroups needs it):

    python3 scripts/bench_memory.py --awaken target/release/awaken \\
        --duration 1800 --warm-up 600 --limit 1073741824 --waiting 10000
"""

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

MEMORY_LINE = re.compile(r'^awaken_memory_(bytes|limit_bytes|evictions_total)\{cache="(\w+)"\} (\S+)$')
PLAIN_LINE = re.compile(r"^(awaken_[a-z_]+) (\S+)$")
FINISHED_LINE = re.compile(r"^awaken_runs_finished_total\{[^}]*\} (\S+)$")


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
        finished = FINISHED_LINE.match(line)
        if finished:
            plain["runs_finished"] = plain.get("runs_finished", 0) + float(finished.group(1))
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


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for_port(port, seconds=10):
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class Cluster:
    """N nodes of `awaken serve`, each in its own memory cgroup; on NATS and
    PostgreSQL when there are several."""

    def __init__(self, args, name, limited):
        self.args, self.nodes, self.cgroups, self.extra = args, [], [], []
        self.workdir = self.database = None
        try:
            self.start(name, limited)
        except BaseException:
            self.close()
            raise

    def start(self, name, limited):
        args = self.args
        self.configs = []
        if args.store == "postgres":
            self.workdir = f"/tmp/{name}"
            os.makedirs(self.workdir, exist_ok=True)
            self.database = name.replace("-", "_")
            subprocess.run(["psql", args.postgres, "-qc", f"CREATE DATABASE {self.database}"], check=True)
            url = args.postgres.rsplit("/", 1)[0] + "/" + self.database
            cluster = ""
            if args.nodes > 1:
                port = free_port()
                self.extra.append(subprocess.Popen(
                    ["nats-server", "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", f"{self.workdir}/js"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                ))
                wait_for_port(port)
                cluster = f'\n[cluster]\nnats_url = "nats://127.0.0.1:{port}"\n'
            for n in range(args.nodes):
                path = f"{self.workdir}/node-{n}.toml"
                with open(path, "w") as f:
                    f.write(f'[server]\naddress = "127.0.0.1:0"\n\n[store]\nkind = "postgres"\nurl = "{url}"\n')
                    if cluster:
                        f.write(cluster + f'node_id = "node-{n}"\n')
                self.configs.append(path)
        else:
            self.configs.append(None)
        self.start_nodes(name, limited)

    def start_nodes(self, name, limited):
        """The node processes, on the store (and NATS) `start` made."""
        for n, config in enumerate(self.configs):
            command = f'exec "$0" serve' + (f" --config {config}" if config else " --address 127.0.0.1:0")
            if limited:
                cgroup, version = make_cgroup(f"{name}-{n}", self.args.limit)
                self.cgroups.append((cgroup, version))
                command = f"echo $$ > {cgroup}/cgroup.procs && " + command
            node = subprocess.Popen(
                ["sh", "-c", command, self.args.awaken],
                stdout=subprocess.PIPE,
                stderr=open(f"/tmp/{name}-node-{n}.log", "a"),
                text=True,
            )
            self.nodes.append(node)
        self.bases = [f"http://{json.loads(node.stdout.readline())['address']}" for node in self.nodes]
        for node in self.nodes:
            # Whatever else a node prints must not fill its pipe and stall it.
            threading.Thread(target=node.stdout.read, daemon=True).start()

    def restart_fresh(self, name):
        """New node processes without a limit on the same database and NATS: a
        fresh node on the state the load left, measured once every node is
        ready and the cluster's shards are owned again (the killed nodes'
        leases run out first)."""
        self.stop_nodes()
        self.start_nodes(name, limited=False)
        deadline = time.monotonic() + 180
        while not self.settled():
            if time.monotonic() > deadline:
                raise RuntimeError("the restarted nodes did not take every shard within 180 s")
            time.sleep(0.5)

    def settled(self):
        """Every node ready, and (in a cluster) every shard owned by one."""
        owned = count = 0
        for base in self.bases:
            try:
                get(f"{base}/health/ready", timeout=5)
                _, plain = metrics(base)
            except (urllib.error.URLError, OSError):
                return False
            owned += plain.get("awaken_shards_owned", 0)
            count = plain.get("awaken_shard_count", 0)
        return owned == count

    def stop_nodes(self):
        for process in self.nodes:
            process.kill()
            process.wait()
        self.nodes = []
        for cgroup, _ in self.cgroups:
            try:
                os.rmdir(cgroup)
            except OSError:
                pass
        self.cgroups = []

    def rss(self):
        return [rss_bytes(node.pid) for node in self.nodes]

    def alive(self):
        return all(node.poll() is None for node in self.nodes)

    def oom_kills(self):
        return sum(oom_kills(cgroup, version) for cgroup, version in self.cgroups)

    def close(self):
        self.stop_nodes()
        for process in self.extra:
            process.kill()
            process.wait()
        if self.database:
            subprocess.run(["psql", self.args.postgres, "-qc", f"DROP DATABASE IF EXISTS {self.database} WITH (FORCE)"])
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


def load(awaken, bases, seconds, concurrency):
    """One `awaken bench http --url` per node, together; their reports."""
    each = max(1, concurrency // len(bases))
    runs = [
        subprocess.Popen(
            [awaken, "bench", "http", "--quiet", "--url", base, "--runs", "1000000000",
             "--timeout-s", str(seconds), "--concurrency", str(each), "--run-timeout-s", "60"],
            stdout=subprocess.PIPE, text=True,
        )
        for base in bases
    ]
    reports = []
    for run in runs:
        out, _ = run.communicate()
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return {
        "runs": sum(r["runs"] for r in reports),
        "runs_per_s": round(sum(r["runs_per_s"] for r in reports), 1),
        "errors": sum(r["errors"] for r in reports),
        "first_error": next((r["first_error"] for r in reports if r.get("first_error")), None),
        "p99_us": max(r["p99_us"] for r in reports),
    }


def windows(samples, seconds):
    """Runs finished per second in consecutive windows of `seconds`, from the
    nodes' `awaken_runs_finished_total` (the waiting runs' ends come later)."""
    points = [(s["t"], sum(n["runs_finished"] for n in s["nodes"])) for s in samples]
    rates, start = [], points[0] if points else None
    for t, finished in points:
        if t - start[0] >= seconds:
            rates.append(round((finished - start[1]) / (t - start[0]), 1))
            start = (t, finished)
    return rates


def per_item(args):
    """Resident bytes per active run on a fresh node."""
    node = subprocess.Popen(
        [args.awaken, "serve", "--address", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        base = f"http://{json.loads(node.stdout.readline())['address']}"
        threading.Thread(target=node.stdout.read, daemon=True).start()
        for _ in range(200):  # allocator and caches warm
            post(f"{base}/v1/runs", {"agentId": "bench", "messages": [{"role": "user", "content": "w"}]})
        items = args.items

        def gauge(name):
            return metrics(base)[1].get(name, 0)

        def admitted():
            return metrics(base)[0].get("admitted", {}).get("bytes", 0)

        before, admitted_before = rss_bytes(node.pid), admitted()
        with concurrent.futures.ThreadPoolExecutor(items) as pool:
            slow = [pool.submit(post, f"{base}/v1/runs",
                                {"agentId": "slow", "messages": [{"role": "user", "content": "s"}]})
                    for _ in range(items)]
            deadline = time.monotonic() + 60
            while gauge("awaken_threads_live") < items and time.monotonic() < deadline:
                time.sleep(0.01)
            active_rss, active_estimate = rss_bytes(node.pid) - before, admitted() - admitted_before
            for run in slow:
                run.result()

        return {
            "scenario": "memory-per-item",
            "items": items,
            "bytes_per_active_run": active_rss // items,
            "estimated_bytes_per_active_run": int(active_estimate // items),
        }
    finally:
        node.kill()
        node.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--awaken", default="target/release/awaken")
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--store", choices=["postgres", "memory"], default="postgres",
                        help="the nodes' store: postgres as deployed (a database made for the run), or the "
                             "embedded in-memory one, which keeps every thread and so grows with the load")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test",
                        help="where the benchmark makes its database")
    parser.add_argument("--duration", type=int, default=1800, help="seconds of load")
    parser.add_argument("--warm-up", type=int, default=600, help="seconds before growth is measured")
    parser.add_argument("--limit", type=int, default=1 << 30, help="each node's memory limit, bytes")
    parser.add_argument("--waiting", type=int, default=10000, help="runs left waiting for approval")
    parser.add_argument("--concurrency", type=int, default=64, help="clients, over all nodes")
    parser.add_argument("--fresh-seconds", type=int, default=60, help="seconds of the fresh nodes' reference")
    parser.add_argument("--no-fresh-after", dest="fresh_after", action="store_false",
                        help="skip the reference of fresh nodes on the database (and NATS) the load left")
    parser.add_argument("--window", type=int, default=300, help="seconds per window of the run rate over time")
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--samples", default="/tmp/bench-memory-samples.jsonl")
    parser.add_argument("--per-item", action="store_true", help="measure memory per active run")
    parser.add_argument("--items", type=int, default=200, help="active runs for --per-item")
    args = parser.parse_args()
    if args.per_item:
        print(json.dumps(per_item(args)))
        return 0
    name = f"awaken-bench-{os.getpid()}"

    if args.nodes > 1 and args.store != "postgres":
        parser.error("a cluster needs --store postgres (its nodes share the store)")
    reference = Cluster(args, f"{name}-fresh", limited=False)
    try:
        fresh = load(args.awaken, reference.bases, args.fresh_seconds, args.concurrency)
    finally:
        reference.close()

    cluster = Cluster(args, name, limited=True)
    try:
        bases = cluster.bases
        _, plain = metrics(bases[0])
        budget = plain.get("awaken_memory_budget_bytes", 0)

        rss_before = sum(cluster.rss())
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            waiting = list(pool.map(lambda n: start_waiting(bases[n % len(bases)]), range(args.waiting)))
        rss_waiting = sum(cluster.rss())

        samples, stop = [], threading.Event()

        def sample():
            started = time.monotonic()
            with open(args.samples, "w") as out:
                while not stop.wait(args.interval):
                    if not cluster.alive():
                        break
                    rows = []
                    for base, rss in zip(bases, cluster.rss()):
                        caches, plain = metrics(base)
                        rows.append({
                            "rss": rss,
                            "caches": caches,
                            "warm_threads": plain.get("awaken_threads_warm"),
                            "claims_deferred": plain.get("awaken_mailbox_claims_deferred_total"),
                            "runs_finished": plain.get("runs_finished", 0),
                        })
                    row = {"t": round(time.monotonic() - started, 1), "nodes": rows}
                    samples.append(row)
                    out.write(json.dumps(row) + "\n")
                    out.flush()

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        driven = load(args.awaken, bases, args.duration, args.concurrency)
        stop.set()
        sampler.join()

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            finished = sum(pool.map(lambda n: approve(bases[n % len(bases)], *waiting[n]), range(len(waiting))))

        alive, killed = cluster.alive(), cluster.oom_kills()
        fresh_after = None
        if args.fresh_after:
            cluster.restart_fresh(f"{name}-after")
            fresh_after = load(args.awaken, cluster.bases, args.fresh_seconds, args.concurrency)

        after = [s for s in samples if s["t"] >= args.warm_up]
        growth = []
        for node in range(len(bases)):
            series = [s["nodes"][node]["rss"] for s in after]
            first = series[0] if series else 0
            growth.append({
                "rss_after_warm_up_mb": round(first / 2**20, 1),
                "rss_max_after_warm_up_mb": round(max(series, default=0) / 2**20, 1),
                "rss_end_mb": round(series[-1] / 2**20, 1) if series else 0,
                "growth_after_warm_up_pct": round(100 * (max(series, default=0) - first) / max(first, 1), 2),
            })
        report = {
            "scenario": "memory",
            "nodes": args.nodes,
            "limit_bytes": args.limit,
            "budget_bytes": budget,
            "duration_s": args.duration,
            **driven,
            "fresh_runs_per_s": fresh.get("runs_per_s"),
            "throughput_vs_fresh": round(driven["runs_per_s"] / max(fresh.get("runs_per_s", 1), 1e-9), 3),
            "fresh_on_grown_state_runs_per_s": fresh_after and fresh_after.get("runs_per_s"),
            "runs_per_s_by_window": windows(samples, args.window),
            "per_node": growth,
            "alive": alive,
            "oom_kills": killed,
            "waiting": args.waiting,
            "waiting_finished": finished,
            "bytes_per_waiting_run": (rss_waiting - rss_before) // max(args.waiting, 1),
            "last_sample": samples[-1] if samples else None,
        }
        print(json.dumps(report))
        return 0 if report["alive"] and finished == args.waiting and not report["oom_kills"] else 1
    finally:
        cluster.close()


if __name__ == "__main__":
    sys.exit(main())
