"""The tablet commands find a tablet's servers through the masters (issue 31): ``tablet
status | step-down | change-config`` take ``--masters`` or ``--root DIR`` (or
``$REVIVIFY_MASTERS``) like every other command, not only ``--tservers``. Real processes: a
local cluster (1 master, 3 tablet servers) started by ``cluster start``; every command a new
process, as an operator runs it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from clusterproc import (
    COMMAND_TIMEOUT,
    as_json,
    assert_traces_clean,
    cleaned_up,
    eventually,
    ok,
    revivify,
)

PATIENT = ("--deadline", "60")  # a bound for a loaded machine, not a measurement


def _with_env(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    """``revivify ARGV`` in a process of its own whose environment is `env` on top of a
    copy of this one's without REVIVIFY_MASTERS."""
    base = {k: v for k, v in os.environ.items() if k != "REVIVIFY_MASTERS"}
    return subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", *argv],
                          capture_output=True, text=True, timeout=COMMAND_TIMEOUT,
                          check=False, stdin=subprocess.DEVNULL, env={**base, **env})


def test_tablet_commands_find_the_servers_through_the_masters(tmp_path: Path) -> None:
    root = str(tmp_path / "c")
    with cleaned_up(root):
        started = as_json(ok("cluster", "start", "--root", root, "--num-masters", "1",
                             "--num-tservers", "3", "--json"))
        master = started["masters"][0]["address"]
        ok("table", "create", "t", "--root", root, "--tablets", "1", "--replicas", "3",
           *PATIENT)
        described = as_json(ok("table", "describe", "t", "--root", root, "--json"))
        tablet = described["tablets"][0]["tablet_id"]

        def three_answer() -> bool:
            out = revivify("tablet", "status", "--root", root, "--tablet", tablet, "--json")
            return out.returncode == 0 and [r["answer"] for r in as_json(out)["replicas"]] \
                == ["ok"] * 3 and as_json(out)["leader"] is not None

        # --root: the masters of the local cluster find the tablet's three servers.
        eventually("tablet status --root sees three replicas and a leader", three_answer)
        status = as_json(ok("tablet", "status", "--root", root, "--tablet", tablet, "--json"))
        hosts = sorted(r["address"] for r in status["replicas"])
        assert hosts == sorted(t["address"] for t in started["tservers"])

        # --masters, and $REVIVIFY_MASTERS with no flag at all: the same servers.
        by_flag = as_json(ok("tablet", "status", "--masters", master, "--tablet", tablet,
                             "--json"))
        assert sorted(r["address"] for r in by_flag["replicas"]) == hosts
        by_env = _with_env({"REVIVIFY_MASTERS": master}, "tablet", "status", "--tablet",
                           tablet, "--json")
        assert by_env.returncode == 0, by_env.stderr
        assert sorted(r["address"] for r in as_json(by_env)["replicas"]) == hosts

        # step-down and change-config act through the servers the masters named.
        down = ok("tablet", "step-down", "--root", root, "--tablet", tablet, "--json",
                  *PATIENT)
        assert as_json(down)["stepped_down"] == status["leader"]
        refused = revivify("tablet", "change-config", "--root", root, "--tablet", tablet,
                           "promote", started["tservers"][0]["uuid"], *PATIENT)
        assert refused.returncode == 1, (refused.stdout, refused.stderr)  # already a VOTER
        assert "Traceback" not in refused.stderr and refused.stderr.count("\n") == 1

        # A tablet the catalog does not hold: a definite no (exit 1), in one line.
        unknown = revivify("tablet", "status", "--root", root, "--tablet", "nosuch")
        assert unknown.returncode == 1, (unknown.stdout, unknown.stderr)
        assert "the masters know no tablet nosuch" in unknown.stderr
        assert unknown.stderr.count("\n") == 1 and "Traceback" not in unknown.stderr

        # Where the servers are must be said, once: neither, or two ways at once, is usage.
        neither = _with_env({}, "tablet", "status", "--tablet", tablet)
        assert neither.returncode == 2
        assert "one of --tservers, --masters or --root is required" in neither.stderr
        both = revivify("tablet", "step-down", "--tservers", hosts[0], "--root", root,
                        "--tablet", tablet)
        assert both.returncode == 2 and "not allowed with argument" in both.stderr
        missing = revivify("tablet", "change-config", "--root", str(tmp_path / "none"),
                           "--tablet", tablet, "remove", "x")
        assert missing.returncode == 2 and missing.stderr.count("\n") == 1
        assert "cluster.json" in missing.stderr and "Traceback" not in missing.stderr

        ok("cluster", "stop", "--root", root)
        assert_traces_clean(root)
