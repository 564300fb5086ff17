"""Benchmark: the trace checker against the raw parse rate, and Spark against the checker.

    python bench/checker.py [--events 10000000] [--dir /tmp/revivify-bench] [--no-spark]
                            [--rounds 3] [--no-dataframe]
    python bench/checker.py --real [--events 1000000] [--writes 3000] ...
    python bench/checker.py --resume [--events 1000000]
    python bench/checker.py --follow [--events 1000000]

``--follow``: peak memory of ``trace follow --until-idle`` (with and without ``--web``)
against ``trace check`` on the same generated corpus, each a fresh process, and on a
corpus with the same keys and 5x fewer events: the follower's memory must stay within the
batch check's peak and follow the live state (keys, frontier), not the history
(``follow_main``).

``--resume``: whether ``trace check --state`` costs O(new lines): a run over all but a
share of each file, then the rest appended and a resumed run, timed against one check of
the whole, for 1%, 5%, 20% and 50% new (``resume_main``).

``--real``: real server traces. An in-process cluster (impl/testing/cluster.py: three
tablet servers on SimDisk, MemoryNetwork and trio's MockClock, the servers' own code)
hosts three tablets; concurrent clients write to all three while one server is crashed and
restarted and a leader steps down; every server stops cleanly (``generate_real``). The
cluster is slow to run (every step goes through the real RPC, Raft, WAL and trace writer),
so a run of ``--writes`` writes is made once and then replicated until the corpus reaches
``--events``: copy c renames every node UUID (file names, envelopes, args, states) and every
tablet id, so the copies are distinct (node, tablet) keys of distinct tablets (nothing the
checker memoised for one copy matches another: states and args name other UUIDs, so each
copy pays its own memo misses, as a fresh cluster would). Then, in rounds: the raw parse,
``trace check`` and Spark ``local[2]`` (files plan) on the same corpus, side by side, with
the checker's peak memory; the median ratios (targets: check >= 0.4x raw, Spark >= 1.5x
check); then peak memory on a fifth of the corpus (memory follows the keys, not the events)
and the checker without shape mode (checker/logshape.py) on that fifth, for comparison
(``--before-every-round``: the interpreted spec alone too).

Without ``--real``: a corpus of valid version-3 traces (3-replica tablets on a pool of nodes:
create, an election, then L entries appended, with their terms, and committed on every
replica), then prints, in one run:
the raw parse rate of the same files (msgspec, lines/s), ``trace check`` events/s (target:
>= 40% of the raw rate and >= 200,000/s on one core), Spark ``local[2]`` events/s (target
1.5x the checker, as the median of rounds that each run both side by side; the JVM's and the
Python workers' start reported apart; the dataframe plan once), and the
local checker's peak memory on two corpora with the same keys and 5x fewer events (it must
follow the keys, not the events). The machine's load average is printed too: the rates are
wall-clock rates, and other work on the machine lowers them (Spark's most).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import msgspec

NODES = 30


def _uuid(i: int) -> str:
    return f"{i:08x}" + "5f0c3a2b9d7e4c1f8a6b2d4e"


def _state(term: int, vote: str | None, last: tuple[int, int]) -> str:
    v = "null" if vote is None else f'"{vote}"'
    return ('{"superblock":{"data_state":"READY","last_opid":[0,0],"qdir":false},'
            f'"cmeta":{{"term":{term},"voted_for":{v},"config_index":0}},'
            f'"wal":{{"location":"LIVE","last_opid":[{last[0]},{last[1]}]}},'
            '"blocks":"PRESENT","quarantine":null}')


def generate(root: str, events: int, entries: int) -> tuple[int, int]:
    """Write the corpus; return (events written, keys)."""
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    per_tablet = 3 + 1 + 2 + 1 + entries * 6
    tablets = max(1, events // per_tablet)
    files = {n: open(os.path.join(root, f"{_uuid(n)}.0001.jsonl"), "w")  # noqa: SIM115
             for n in range(NODES)}
    seq = [0] * NODES
    total = 0
    clock = 0  # one Lamport counter for all nodes: every effect comes after its cause

    def line(n: int, tablet: str, event: str, args: str, state: str | None) -> None:
        nonlocal total, clock
        s = seq[n]
        seq[n] += 1
        total += 1
        clock += 1
        files[n].write(
            f'{{"v":3,"node":"{_uuid(n)}","inc":1,"seq":{s},"lamport":{clock},'
            f'"wall_ns":{1_700_000_000_000_000_000 + s},'
            f'"tablet":{"null" if tablet == "" else chr(34) + tablet + chr(34)},'
            f'"event":"{event}","args":{args},"state":{state or "null"}}}\n')

    for n in range(NODES):
        line(n, "", "server_format", "{}", None)
        line(n, "", "server_start", "{}", None)
    for t in range(tablets):
        tab = f"t{t:07d}"
        reps = [(t + j * 7) % NODES for j in range(3)]
        leader, followers = reps[0], reps[1:]
        lu = _uuid(leader)
        voters = ",".join(f'"{_uuid(n)}"' for n in reps)
        for n in reps:
            line(n, tab, "create_tablet", f'{{"config_index":0,"voters":[{voters}]}}',
                 _state(0, None, (0, 0)))
        line(leader, tab, "start_election", f'{{"me":"{lu}"}}', _state(1, lu, (0, 0)))
        for n in followers:
            line(n, tab, "vote_granted",
                 f'{{"candidate":"{lu}","t":1,"cand_last_term":0,"cand_last_index":0}}',
                 _state(1, lu, (0, 0)))
        line(leader, tab, "become_leader", f'{{"me":"{lu}","t":1}}', _state(1, lu, (0, 0)))
        for i in range(1, entries + 1):
            st = _state(1, lu, (1, i))
            for n in reps:
                # Version 3: the batch's terms, so Log Matching and Leader Completeness
                # run on every append (the facts the checker rebuilds each log from).
                line(n, tab, "log_append",
                     f'{{"first_index":{i},"prev_term":{1 if i > 1 else 0},'
                     f'"terms":[[1,1]],"op_term":1,"op_index":{i}}}', st)
            for n in reps:
                line(n, tab, "commit", f'{{"index":{i},"op_term":1}}', st)
    for f in files.values():
        f.close()
    return total, tablets * 3


REAL_TABLETS = ("t-a", "t-b", "t-c")


def generate_real(root: str, writes: int, seed: int = 7) -> int:
    """One in-process cluster run (see the module doc); returns the events written."""
    import trio
    import trio.testing

    from revivify.impl.rpc import RpcError
    from revivify.impl.tablet.ops import RowOp
    from revivify.impl.testing.cluster import Cluster, open_cluster
    from revivify.impl.tserver import api

    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    clients_per_tablet = 4
    per_client = max(1, writes // (clients_per_tablet * len(REAL_TABLETS)))
    retry = (api.NotLeader, api.OperationAborted, api.TabletNotRunning, RpcError)

    async def client(cluster: Cluster, tablet: str, cid: str) -> None:
        lead = 0
        for seq in range(per_client):
            req = api.Write(tablet, cid, seq, [RowOp("put", b"k%d" % (seq % 4), b"v")])
            for _ in range(2000):
                if cluster.servers[lead].server is not None:
                    try:
                        with trio.move_on_after(2):
                            await cluster.call(lead, api.DATA_WRITE, req, api.Written)
                            break
                    except retry:
                        pass
                lead = (lead + 1) % 3
                await trio.sleep(0.02)

    async def faults(cluster: Cluster) -> None:
        await trio.sleep(1.0)
        await cluster.crash(2)  # a machine crash: unsynced writes gone, no server_stop
        await trio.sleep(1.0)
        await cluster.start(2)
        await trio.sleep(1.0)
        lead = await cluster.wait_for_leader(REAL_TABLETS[0])
        await cluster.call(lead, api.ADMIN_STEP_DOWN, api.StepDown(REAL_TABLETS[0]), api.Ack)

    async def main() -> None:
        async with open_cluster(root, 3, seed=seed) as cluster:
            await cluster.start_all()
            for t in REAL_TABLETS:
                await cluster.create_tablet(t)
                await cluster.wait_for_leader(t)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(faults, cluster)
                for t in REAL_TABLETS:
                    for c in range(clients_per_tablet):
                        nursery.start_soon(client, cluster, t, f"{t}-c{c}")
            await trio.sleep(1.0)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return sum(_count_lines(os.path.join(root, n)) for n in os.listdir(root))


def _count_lines(path: str) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def replicate(base: str, root: str, events: int) -> tuple[int, int]:
    """Copies of the run in ``base`` under fresh node UUIDs and tablet ids until ``root``
    holds at least ``events`` events; returns (events, copies)."""
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    files = {}
    for name in sorted(os.listdir(base)):
        with open(os.path.join(base, name), "rb") as f:
            files[name] = f.read()
    uuids = sorted({name.split(".")[0] for name in files})
    per_copy = sum(data.count(b"\n") for data in files.values())
    copies = max(1, -(-events // per_copy))
    for c in range(copies):
        renames = [(u.encode(), f"{c:06x}{u[6:]}".encode()) for u in uuids]
        tablets = [(f'"tablet":"{t}"'.encode(), f'"tablet":"{t}.{c:05d}"'.encode())
                   for t in REAL_TABLETS]
        for name, data in files.items():
            for old, new in renames + tablets:
                data = data.replace(old, new)
            node = name.split(".")[0]
            out = f"{c:06x}{node[6:]}" + name[len(node):]
            with open(os.path.join(root, out), "wb") as f:
                f.write(data)
    return per_copy * copies, copies


def raw_parse_rate(root: str) -> float:
    dec = msgspec.json.Decoder()
    n = 0
    t = time.perf_counter()
    for name in os.listdir(root):
        with open(os.path.join(root, name), "rb") as f:
            for raw in f:
                dec.decode(raw)
                n += 1
    return n / (time.perf_counter() - t)


_CHILD = """
import json, resource, sys, time
from revivify.checker.local import check_paths
if sys.argv[2:] == ["before"]:
    # The interpreted spec alone: nothing compiled (what every memo miss ran before
    # checker/compiled.py).
    import revivify.checker.replay as replay
    replay.cached_action = lambda *a, **k: None
    replay.invariants_hold = lambda *a, **k: None
    replay.steps_hold = lambda *a, **k: None
elif sys.argv[2:] == ["noshapes"]:
    # No shape mode (checker/logshape.py): every append and commit a memo miss, as before.
    import revivify.checker.replay as replay
    replay.Replayer._to_shape = lambda *a, **k: None
t = time.perf_counter()
c = time.process_time()
r = check_paths([sys.argv[1]])
dt = time.perf_counter() - t
print(json.dumps({"events": r.events + r.server_events, "keys": r.keys, "seconds": dt,
                  "cpu_s": time.process_time() - c,
                  "findings": len(r.findings),
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def local_check(root: str, mode: str = "") -> dict[str, float]:
    """``trace check`` in a fresh process; ``mode``: "" (as shipped), "noshapes" (shape
    mode off) or "before" (the interpreted spec alone)."""
    out = subprocess.run([sys.executable, "-c", _CHILD, root, *([mode] if mode else [])],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)  # type: ignore[no-any-return]


class SparkRunner:
    """One Spark session for the whole bench: the JVM's start and the Python workers' start
    are timed apart (both are paid once per session, like the JVM the issue reports apart)."""

    def __init__(self) -> None:
        from revivify.checker.spark import spark_session

        t = time.perf_counter()
        self.spark = spark_session("local[2]", shuffle_partitions=8)
        self.spark.range(1).collect()
        self.jvm_start_s = time.perf_counter() - t
        # PySpark's Python workers (daemon + one worker per core) start with the first
        # Python job, whatever it does.
        t = time.perf_counter()
        self.spark.sparkContext.parallelize(range(2), 2).mapPartitions(lambda it: [0]).collect()
        self.workers_start_s = time.perf_counter() - t

    def run(self, root: str, plan: str) -> dict[str, float]:
        from revivify.checker.spark import validate_spark

        t = time.perf_counter()
        r = validate_spark([root], spark=self.spark, plan=plan)
        dt = time.perf_counter() - t
        return {"seconds": dt, "events": r.events + r.server_events,
                "findings": len(r.findings),
                **{k: float(v) for k, v in r.timings.items()}}

    def stop(self) -> None:
        self.spark.stop()


def spark_rounds(big: str, first_local: dict[str, float], rounds: int,
                 dataframe: bool) -> None:
    """Spark against the local checker, side by side: each round runs the local checker
    (a fresh process) and then the Spark files plan on the same corpus, and the ratio is
    taken within the round; the median ratio is the figure (this machine's speed swings by
    tens of percent from minute to minute: a lone pair of runs measures the swing)."""
    sr = SparkRunner()
    print(f"spark local[2]: JVM start {sr.jvm_start_s:.1f}s, Python workers' start "
          f"{sr.workers_start_s:.1f}s (start-up, paid once per session; not in the rates)")
    print("| round | local events/s | spark files plan events/s | ratio | "
          "ratio with workers' start | tasks: CPU s / span s |")
    print("|---:|---:|---:|---:|---:|---:|")
    ratios: list[float] = []
    for i in range(rounds):
        loc = first_local if i == 0 else local_check(big)
        lrate = loc["events"] / loc["seconds"]
        sp = sr.run(big, "files")
        srate = sp["events"] / sp["seconds"]
        wrate = sp["events"] / (sp["seconds"] + sr.workers_start_s)
        ratios.append(srate / lrate)
        print(f"| {i + 1} | {lrate:,.0f} | {srate:,.0f} | {srate / lrate:.2f}x | "
              f"{wrate / lrate:.2f}x | {sp['task_cpu_s']:.1f} / {sp['task_span_s']:.1f} |",
              flush=True)
    med = statistics.median(ratios)
    print(f"spark local[2], files plan: median {med:.2f}x the local checker over {rounds} "
          f"rounds (target 1.5x: {'met' if med >= 1.5 else 'NOT met'}); "
          f"findings={sp['findings']:.0f}")
    if dataframe:
        df = sr.run(big, "dataframe")
        drate = df["events"] / df["seconds"]
        print(f"spark local[2], dataframe plan: {drate:,.0f} events/s = "
              f"{drate / lrate:.2f}x the last local run (Spark reads and shuffles every line; "
              f"until the first task {df['first_task_start_s']:.1f}s; tasks "
              f"{df['task_cpu_s']:.1f}s CPU over {df['task_span_s']:.1f}s); "
              f"findings={df['findings']:.0f}")
    sr.stop()


def _load(avg: tuple[float, float, float]) -> str:
    return "/".join(f"{x:.1f}" for x in avg)


def real_main(a: argparse.Namespace) -> int:
    """Real server traces (``--real``): see the module doc."""
    load0 = os.getloadavg()
    base = os.path.join(a.dir, "real-run")
    t = time.perf_counter()
    n_base = generate_real(base, a.writes)
    print(f"cluster run: {n_base:,} events, {a.writes:,} writes to {len(REAL_TABLETS)} "
          f"tablets on 3 servers, a crash and restart, a step-down "
          f"(generated in {time.perf_counter() - t:.1f}s)")
    big = os.path.join(a.dir, "real")
    n_events, copies = replicate(base, big, a.events)
    print(f"corpus: {n_events:,} events = {copies} relabelled copies of the run "
          f"({copies * 3 * len(REAL_TABLETS)} keys on {copies * 3} nodes)")
    small = os.path.join(a.dir, "real-fifth")
    replicate(base, small, max(1, a.events // 5))
    # Each round: the raw parse, ``trace check`` and Spark local[2] (files plan) on the
    # same corpus, one after the other; the ratios are taken within the round.
    sr = None if a.no_spark else SparkRunner()
    if sr is not None:
        print(f"spark local[2]: JVM start {sr.jvm_start_s:.1f}s, Python workers' start "
              f"{sr.workers_start_s:.1f}s (start-up, paid once per session; not in the "
              "rates)")
    print("| round | raw parse lines/s | trace check events/s | check / raw | "
          "spark local[2] events/s | spark / check | check peak RSS MB |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    ratios: list[float] = []
    sratios: list[float] = []
    loc: dict[str, float] = {}
    sp: dict[str, float] = {}
    for i in range(a.rounds):
        raw = raw_parse_rate(big)
        loc = local_check(big)
        rate = loc["events"] / loc["seconds"]
        ratios.append(rate / raw)
        srate = 0.0
        if sr is not None:
            sp = sr.run(big, "files")
            srate = sp["events"] / sp["seconds"]
            sratios.append(srate / rate)
        print(f"| {i + 1} | {raw:,.0f} | {rate:,.0f} | {rate / raw:.3f}x | "
              + (f"{srate:,.0f} | {srate / rate:.2f}x" if sr is not None else "- | -")
              + f" | {loc['peak_rss_mb']:.0f} |", flush=True)
    med = statistics.median(ratios)
    print(f"trace check on real traces: median {med:.3f}x raw parse over {a.rounds} rounds "
          f"(target 0.4x: {'met' if med >= 0.4 else 'NOT met'}); findings={loc['findings']:.0f}")
    if sr is not None:
        smed = statistics.median(sratios)
        print(f"spark local[2], files plan: median {smed:.2f}x the local checker (target "
              f"1.5x: {'met' if smed >= 1.5 else 'NOT met'}); findings={sp['findings']:.0f}")
        sr.stop()
    # Memory follows the keys, not the events; and what shape mode buys (on a fifth).
    loc2 = local_check(small)
    old = local_check(small, "noshapes")
    print("| corpus | events | keys | peak RSS MB | events/s |")
    print("|---|---:|---:|---:|---:|")
    for name, r in (("all", loc), ("a fifth", loc2), ("a fifth, no shape mode", old)):
        print(f"| {name} | {r['events']:,.0f} | {r['keys']:,.0f} | {r['peak_rss_mb']:.0f} | "
              f"{r['events'] / r['seconds']:,.0f} |")
    if a.before_every_round:
        bef = local_check(small, "before")
        print(f"interpreted spec alone (a fifth): {bef['events'] / bef['seconds']:,.0f} "
              "events/s")
    print(f"load average (others' work on this machine): {_load(load0)} -> "
          f"{_load(os.getloadavg())}")
    return 0


def _split(src: str, dest: str, share: float) -> int:
    """``dest``: each file of ``src`` cut to its first ``share`` of lines; returns the
    lines left out (what a later run will find new)."""
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    left = 0
    for name in sorted(os.listdir(src)):
        with open(os.path.join(src, name), "rb") as fh:
            lines = fh.readlines()
        keep = int(len(lines) * share)
        left += len(lines) - keep
        with open(os.path.join(dest, name), "wb") as out:
            out.writelines(lines[:keep])
    return left


def _append_rest(src: str, dest: str) -> None:
    """Grow each file of ``dest`` to its whole in ``src`` (the servers wrote on)."""
    for name in sorted(os.listdir(src)):
        have = os.path.getsize(os.path.join(dest, name))
        with open(os.path.join(src, name), "rb") as fh, \
                open(os.path.join(dest, name), "ab") as out:
            fh.seek(have)
            out.write(fh.read())


def _resumed_run(paths: list[str], state: str) -> tuple[float, int, str]:
    """One ``trace check --state`` (restore, read, save, judge): CPU seconds (the
    machine is shared: wall time would measure the others), findings, and the CPU
    seconds of each phase."""
    from revivify.checker.follow import Follower
    from revivify.checker.resume import dumps, read_state, write_state

    marks = [time.process_time()]
    fol = read_state(state, paths, 1) or Follower(paths)
    fol.global_every = float("inf")
    marks.append(time.process_time())
    fol.poll()
    marks.append(time.process_time())
    data = dumps(fol)
    write_state(state, data)
    marks.append(time.process_time())
    report = fol.finish()
    marks.append(time.process_time())
    phases = ", ".join(f"{name} {b - a:.2f}" for name, a, b in
                       zip(("restore", "read", "save", "judge"), marks, marks[1:],
                           strict=False))
    return marks[-1] - marks[0], len(report.findings), phases


def resume_main(a: argparse.Namespace) -> int:
    """``--resume``: does a resumed check cost O(new lines)? One corpus; a first run with
    --state over all but a share of each file's lines, then the rest appended and a second
    run resuming; its time against one check of the whole, for several shares. The
    second run's time should follow the new lines (plus the live state: keys and global
    tables, which the corpus keeps fixed), not the lines already checked."""
    from revivify.checker.local import check_paths

    big = os.path.join(a.dir, "resume-whole")
    n_events, keys = generate(big, a.events, a.entries)
    t = time.process_time()
    whole = check_paths([big])
    t_whole = time.process_time() - t
    print(f"corpus: {n_events:,} events, {keys:,} keys; one check of the whole: "
          f"{t_whole:.2f} s of CPU ({n_events / t_whole:,.0f} events/s), "
          f"{len(whole.findings)} findings")
    for new_share in (0.01, 0.05, 0.2, 0.5):
        part = os.path.join(a.dir, "resume-part")
        state = os.path.join(a.dir, "resume.state")
        if os.path.exists(state):
            os.unlink(state)
        new = _split(big, part, 1 - new_share)
        t_first, _, _ = _resumed_run([part], state)
        size = os.path.getsize(state)
        _append_rest(big, part)
        t_second, found, phases = _resumed_run([part], state)
        assert found == len(whole.findings), (found, len(whole.findings))
        print(f"  {new_share:>4.0%} new ({new:,} lines): first run {t_first:.2f} s CPU, "
              f"resumed run {t_second:.2f} s = {t_second / t_whole:.2f}x the whole check "
              f"({new / max(t_second, 1e-9):,.0f} new lines/s), state {size / 1e6:.1f} MB"
              f"\n        resumed run by phase (s): {phases}")
    return 0


# A CLI command in this child, then its own peak RSS (ru_maxrss of the process alone: a
# child's, not the bench's) and CPU seconds as the last stderr line.
_CLI_CHILD = """
import json, resource, sys, time
from revivify.impl.cli.main import main
t = time.process_time()
try:
    code = main(sys.argv[1:])
except SystemExit as e:
    code = e.code
r = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"code": code, "peak_rss_mb": r.ru_maxrss / 1024,
                  "cpu_s": time.process_time() - t}), file=sys.stderr)
"""


def _cli_peak(*argv: str) -> dict[str, float]:
    """``revivify ARGV`` in a fresh process: exit code, peak RSS (MB), CPU and wall s."""
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", _CLI_CHILD, *argv], capture_output=True,
                         text=True, check=False, stdin=subprocess.DEVNULL)
    doc: dict[str, float] = json.loads(out.stderr.strip().splitlines()[-1])
    doc["wall_s"] = time.perf_counter() - t
    return doc


def follow_main(a: argparse.Namespace) -> int:
    """``--follow``: peak RSS of the follower against the batch check (module doc)."""
    rows: list[tuple[str, int, int, dict[str, float]]] = []
    for name, events, entries in (("whole", a.events, a.entries),
                                  ("same keys, 5x fewer events", a.events // 5,
                                   max(1, (a.entries - 9) // 5))):
        root = os.path.join(a.dir, f"follow-{len(rows)}")
        n_events, keys = generate(root, events, entries)
        for what, argv in (
                ("trace check", ("trace", "check", root, "--quiet")),
                ("trace follow --until-idle 2", ("trace", "follow", root, "--quiet",
                                                 "--until-idle", "2")),
                ("  ... --web 127.0.0.1:0", ("trace", "follow", root, "--quiet",
                                             "--until-idle", "2", "--web", "127.0.0.1:0"))):
            got = _cli_peak(*argv)
            assert got["code"] == 0, (what, got)
            rows.append((f"{what} ({name})", n_events, keys, got))
    print(f"{'run':<58} {'events':>10} {'keys':>7} {'peak RSS MB':>12} {'CPU s':>7} "
          f"{'wall s':>7}")
    for what, n_events, keys, got in rows:
        print(f"{what:<58} {n_events:>10,} {keys:>7,} {got['peak_rss_mb']:>12.0f} "
              f"{got['cpu_s']:>7.1f} {got['wall_s']:>7.1f}")
    check, follow, web = (rows[i][3]["peak_rss_mb"] for i in range(3))
    print(f"follower / batch peak RSS: {follow / check:.2f}x (with --web {web / check:.2f}x:"
          " the web stack's modules); the follower's wall time includes --until-idle's 2 s")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--follow", action="store_true",
                    help="peak RSS of trace follow --until-idle against trace check")
    ap.add_argument("--resume", action="store_true",
                    help="whether a resumed check (trace check --state) costs O(new lines)")
    ap.add_argument("--real", action="store_true",
                    help="real server traces from the in-process cluster (module doc)")
    ap.add_argument("--writes", type=int, default=3000,
                    help="--real: client writes in the cluster run that is replicated")
    ap.add_argument("--before-every-round", action="store_true",
                    help="--real: also time the interpreted spec alone (on a fifth)")
    ap.add_argument("--events", type=int, default=None,
                    help="events in the corpus (default 10,000,000; --real 1,000,000)")
    ap.add_argument("--entries", type=int, default=50)
    ap.add_argument("--dir", default="/tmp/revivify-bench")
    ap.add_argument("--no-spark", action="store_true")
    ap.add_argument("--rounds", type=int, default=3,
                    help="local/Spark pairs measured side by side (median ratio)")
    ap.add_argument("--no-dataframe", action="store_true",
                    help="skip the dataframe plan (Spark shuffles every line: slow here)")
    a = ap.parse_args()
    if a.follow:
        a.events = a.events or 1_000_000
        return follow_main(a)
    if a.resume:
        a.events = a.events or 1_000_000
        return resume_main(a)
    if a.real:
        a.events = a.events or 1_000_000
        return real_main(a)
    a.events = a.events or 10_000_000
    load0 = os.getloadavg()
    big = os.path.join(a.dir, "big")
    t = time.perf_counter()
    n_events, keys = generate(big, a.events, a.entries)
    print(f"corpus: {n_events:,} events, {keys:,} keys, {NODES} nodes "
          f"(generated in {time.perf_counter() - t:.1f}s)")
    raw = raw_parse_rate(big)
    print(f"raw parse (msgspec -> dict, one core): {raw:,.0f} lines/s")
    loc = local_check(big)
    rate = loc["events"] / loc["seconds"]
    print(f"trace check (local, one core):        {rate:,.0f} events/s  "
          f"= {rate / raw:.0%} of raw parse (target 40%, floor 200,000/s)  "
          f"findings={loc['findings']}")
    print(f"  peak RSS {loc['peak_rss_mb']:.0f} MB with {loc['keys']:,} keys, "
          f"{loc['events']:,} events")
    small = os.path.join(a.dir, "same-keys-fewer-events")
    generate(small, a.events // 5, max(1, (a.entries - 9) // 5))
    loc2 = local_check(small)
    print(f"  peak RSS {loc2['peak_rss_mb']:.0f} MB with {loc2['keys']:,} keys, "
          f"{loc2['events']:,} events (memory follows keys, not events)")
    if not a.no_spark:
        spark_rounds(big, loc, a.rounds, not a.no_dataframe)
    print(f"load average (others' work on this machine): {_load(load0)} -> "
          f"{_load(os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
