"""A dead tablet server can be forgotten (issue 31; Kudu's ``kudu tserver unregister``):
ksck calls a dead server that hosts nothing a warning, not a failure of the cluster, and
``tserver unregister`` removes it from every master; a live server, or a dead one that
still hosts replicas, is refused with the reason."""

from __future__ import annotations

import json
from pathlib import Path

from integration.helpers import wait_for

from revivify.impl.processes.masters import MasterProcesses

from .test_master_processes import assert_traces_clean, cli, ready_leader, wait_live


def _tservers(masters: str) -> dict[str, bool]:
    doc = json.loads(cli("tserver", "list", "--masters", masters, "--json").stdout)
    return {t["uuid"]: t["live"] for t in doc["tservers"]}


def test_a_dead_server_hosting_nothing_is_a_warning_and_can_be_unregistered(
        tmp_path: Path) -> None:
    # No healing: the dead server that hosts replicas keeps them, so its refusal shows.
    with MasterProcesses(str(tmp_path), masters=3, tservers=4,
                         master_args=["--no-heal"]) as cluster:
        cluster.start_all()
        masters = cluster.master_list
        ready_leader(cluster)
        wait_live(cluster, 4)
        made = cli("table", "create", "t", "--masters", masters, "--tablets", "1",
                   "--replicas", "3", "--json", "--deadline", "60")
        assert made.returncode == 0, made.stderr
        hosts = {r["uuid"] for t in json.loads(cli(
            "table", "describe", "t", "--masters", masters, "--json").stdout)["tablets"]
            for r in t["replicas"]}
        idle = next(s for s in cluster.tservers.servers if s.uuid not in hosts)
        busy = next(s for s in cluster.tservers.servers if s.uuid in hosts)

        live = cli("tserver", "unregister", idle.uuid, "--masters", masters)
        assert live.returncode == 1 and "is live" in live.stderr, live.stderr

        cluster.tservers.kill(idle.index)
        cluster.tservers.kill(busy.index)
        wait_for(lambda: not any(_tservers(masters)[s.uuid] for s in (idle, busy)), 30,
                 "both killed servers dead to the masters")

        # The busy server is a problem (its tablet is under-replicated); the idle one is a
        # warning naming the way out.
        report = cli("ksck", "--masters", masters, "--json")
        doc = json.loads(report.stdout)
        assert report.returncode == 1
        assert any(busy.uuid in p and "is dead" in p for p in doc["problems"])
        assert not any(idle.uuid in p for p in doc["problems"]), doc["problems"]
        assert any(idle.uuid in w and "unregister" in w for w in doc["warnings"])

        refused = cli("tserver", "unregister", busy.uuid, "--masters", masters)
        assert refused.returncode == 1 and "still hosts 1 replica" in refused.stderr

        done = cli("tserver", "unregister", idle.uuid, "--masters", masters, "--json")
        assert done.returncode == 0, done.stderr
        told = json.loads(done.stdout)["masters"]
        assert len(told) == 3 and all(told.values())  # every master forgot it
        assert idle.uuid not in _tservers(masters)
        again = cli("tserver", "unregister", idle.uuid, "--masters", masters)
        assert again.returncode == 1 and "no master knew" in again.stderr

        # Back from the dead: it heartbeats, registers again and is listed live.
        cluster.tservers.start(idle.index)
        wait_for(lambda: _tservers(masters).get(idle.uuid), 30, "the server registered again")
        cluster.tservers.start(busy.index)
        cluster.stop_all()
        assert_traces_clean(cluster)
