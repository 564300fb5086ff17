"""A tablet server, the client and the CLI install and run without the optional extras.

pyproject.toml's base dependencies are what servers, client and CLI need; z3 and Hypothesis
are the ``check`` extra, PySpark, pyarrow and pandas the ``spark`` extra. These tests run a
fresh interpreter (``-c``) so that what the test process already imported does not count:

* without blocking anything, importing the server, the client and the CLI and asking for
  help loads none of the extras' modules (they are imported lazily, by the commands that
  need them);
* with the extras' modules made uninstallable (``sys.modules[name] = None``: ``import``
  fails with ModuleNotFoundError and ``importlib.util.find_spec`` returns None, exactly as
  when the package is not installed), the same still works, and a command that needs an
  extra exits 2 with one line naming the extra to install.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from revivify.impl.cli.main import MissingExtra, _extras, _wants_spark

ROOT = Path(__file__).resolve().parents[2]
CHECK = ("z3", "hypothesis")
SPARK = ("pyspark", "pyarrow", "pandas")
EXTRAS = CHECK + SPARK

# Runs in the child: optionally block some modules, import what a server host runs, call
# the CLI with each argv in ARGVS (stdout and stderr captured), print one JSON document.
CHILD = r"""
import contextlib, io, json, sys
BLOCKED, ARGVS, EXTRAS = {blocked!r}, {argvs!r}, {extras!r}
for name in BLOCKED:
    sys.modules[name] = None  # "not installed": import fails, find_spec returns None
import revivify.impl.tserver.server
import revivify.impl.client
import revivify.impl.cli.main
runs = []
for argv in ARGVS:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = revivify.impl.cli.main.main(argv)
    runs.append({{"argv": argv, "code": code, "stdout": out.getvalue(),
                 "stderr": err.getvalue()}})
loaded = sorted(m for m in sys.modules if sys.modules[m] is not None
                and m.split(".")[0] in EXTRAS)
checker = sorted(m for m in sys.modules if m.startswith(("revivify.checker", "revivify.spec")))
print(json.dumps({{"loaded": loaded, "checker": checker, "runs": runs}}))
"""

HELP_ARGVS = [
    ["--help"],
    ["tserver", "run", "--help"],
    ["tserver", "status", "--help"],
    ["tserver", "wipe", "--help"],
    ["tablet", "--help"],
    ["row", "put", "--help"],
    ["replica", "--help"],
    ["copy", "--help"],
    ["local-replica", "--help"],
]


def run_child(blocked: tuple[str, ...], argvs: list[list[str]]) -> dict[str, Any]:
    script = CHILD.format(blocked=list(blocked), argvs=argvs, extras=list(EXTRAS))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_server_client_and_cli_help_load_no_extra() -> None:
    """Nothing is blocked: the extras are installed here, and still none gets imported."""
    result = run_child((), HELP_ARGVS)
    assert result["loaded"] == []
    assert result["checker"] == []
    for run in result["runs"]:
        assert run["code"] == 0, run
        assert "usage" in run["stdout"].lower(), run


def test_server_client_and_cli_work_without_the_extras() -> None:
    """Every extra uninstallable: importing and every help still work (and the history
    checker, which runs in the checker but needs no extra)."""
    result = run_child(EXTRAS, [*HELP_ARGVS, ["history", "check", "--help"]])
    assert result["loaded"] == []
    for run in result["runs"]:
        assert run["code"] == 0, run
        assert "Traceback" not in run["stderr"], run


@pytest.mark.parametrize("argv, blocked, extra", [
    (["prove"], EXTRAS, "check"),
    (["explore", "--help"], EXTRAS, "check"),
    (["trace", "check", "nowhere"], EXTRAS, "check"),
    (["trace", "validate", "nowhere"], CHECK, "check"),
    # z3 installed, Spark not: the Spark engine names the spark extra ...
    (["trace", "validate", "nowhere", "--engine", "spark"], SPARK, "spark"),
    (["trace", "validate", "nowhere", "--engine=spark"], ("pyarrow",), "spark"),
])
def test_a_command_whose_extra_is_missing_names_it(argv: list[str], blocked: tuple[str, ...],
                                                     extra: str) -> None:
    result = run_child(blocked, [argv])
    (run,) = result["runs"]
    assert run["code"] == 2, run
    assert run["stdout"] == ""
    lines = run["stderr"].splitlines()
    assert len(lines) == 1, run
    assert lines[0].startswith(f"revivify {argv[0]}: needs the '{extra}' extra"), lines
    assert lines[0].endswith(f"pip install 'revivify[{extra}]'"), lines


def test_the_local_trace_engine_needs_no_spark() -> None:
    """``trace check`` with Spark uninstallable runs (exit 2: no such path, in one line)."""
    result = run_child(SPARK, [["trace", "check", "/nonexistent/traces", "--quiet"]])
    (run,) = result["runs"]
    assert run["code"] == 2, run
    assert run["stdout"] == "", run
    assert "/nonexistent/traces: no such file or directory" in run["stderr"], run
    assert "extra" not in run["stderr"], run
    assert not [m for m in result["loaded"]
                if m.split(".")[0] in SPARK]


def test_an_extra_missing_deeper_in_the_checker_is_named_too() -> None:
    """A module of an extra that only the checker's own imports reach (not in the command's
    list) is reported the same way; any other missing module is a real bug and propagates."""
    with pytest.raises(MissingExtra) as caught, _extras("trace"):
        raise ModuleNotFoundError("No module named 'pyspark.sql'", name="pyspark.sql")
    assert (caught.value.module, caught.value.extra) == ("pyspark", "spark")
    assert str(caught.value) == ("revivify trace: needs the 'spark' extra (pyspark is not "
                                 "installed): pip install 'revivify[spark]'")
    with pytest.raises(ModuleNotFoundError), _extras("trace"):
        raise ModuleNotFoundError("No module named 'nosuch'", name="nosuch")


@pytest.mark.parametrize("argv, wanted", [
    (["validate", "p", "--engine", "spark"], True),
    (["validate", "p", "--engine=spark"], True),
    (["validate", "p", "--eng", "spark"], True),
    (["validate", "--engine", "local", "p"], False),
    (["validate", "p"], False),
    (["validate", "p", "--engine"], False),
    (["check", "p", "--engine", "spark"], False),  # check has no engine: argparse says so
    ([], False),
])
def test_wants_spark(argv: list[str], wanted: bool) -> None:
    assert _wants_spark(argv) is wanted


def test_pyproject_keeps_heavy_packages_in_extras() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def names(requirements: list[str]) -> set[str]:
        return {r.split(";")[0].split("[")[0].split("<")[0].split(">")[0].split("=")[0]
                .split("!")[0].split("~")[0].strip().lower() for r in requirements}

    base = names(project["dependencies"])
    extras = project["optional-dependencies"]
    assert {"attrs", "trio", "msgspec"} <= base
    assert not base & {"z3-solver", "hypothesis", "pyspark", "pyarrow", "pandas"}
    assert names(extras["check"]) == {"z3-solver", "hypothesis"}
    assert names(extras["spark"]) == {"pyspark", "pyarrow", "pandas"}
    assert any(r.replace(" ", "").startswith("pandas>=2.0,<3") for r in extras["spark"])
    assert "pytest" in names(extras["dev"])
    # `make` installs every extra: the venv is requirements.lock, compiled with all of them.
    makefile = (ROOT / "Makefile").read_text()
    assert "--require-hashes --no-deps --no-build-isolation -r $(LOCK)" in makefile
    assert "--all-extras" in makefile


def test_the_demo_names_every_missing_extra_before_it_starts(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "sys.modules['pyspark'] = None; sys.modules['z3'] = None\n"
        "from revivify.impl.cli.demo import main\n"
        "raise SystemExit(main())\n"
    )
    out = tmp_path / "demo-out"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "REVIVIFY_DEMO_OUT": str(out)})
    assert done.returncode == 2, done.stderr
    assert done.stderr == ("demo: needs the 'check' and 'spark' extras: pip install "
                           "'revivify[check,spark]'\n")
    assert not out.exists()  # refused before doing anything


def test_every_package_folder_is_installed() -> None:
    """pyproject.toml lists the packages by hand (a package-dir mapping puts revivify.impl
    in impl/, which automatic discovery cannot express): every folder with an __init__.py
    must be there, or a wheel lacks it while an editable install hides the gap."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    on_disk = set()
    for import_name, folder in setuptools["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT / folder).parts
            on_disk.add(".".join((import_name, *parts)))
    assert sorted(on_disk - listed) == [], "add these to [tool.setuptools] packages"
    assert sorted(listed - on_disk) == [], "listed packages without an __init__.py"
