"""docs/operations.md cannot drift from the code: every ``revivify ...`` command in its code
blocks is parsed by the real parser of that command (and for the two servers, checked by
the server's own validation too), every metric it names exists, it names no path of a
developer's machine, and its spark-submit line runs on ``local[2]`` with a wheel built from
this repository."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from revivify.impl.cli.main import main
from revivify.impl.servers import master as master_server
from revivify.impl.servers import tserver as tserver_server

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "operations.md"
ETC = "/etc/revivify/"
FLAGFILES = ROOT / "deploy" / "flagfiles"
SEPARATORS = {";", "|", "||", "&&", "&", ">", ">>", "<", "(", ")", "$(", "`"}
# Words after which a command starts ("sudo useradd ... revivify" names a user, not the command).
LEADERS = {"sudo", "until", "while", "do", "then", "if", "exec", "!", "time"}


def _blocks(text: str) -> Iterator[str]:
    """The shell code blocks (```sh) of a Markdown text."""
    yield from re.findall(r"```sh\n(.*?)```", text, flags=re.S)


def _logical_lines(block: str) -> Iterator[str]:
    """Lines with their backslash continuations joined."""
    pending = ""
    for line in block.splitlines():
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        yield pending + line
        pending = ""
    if pending:
        yield pending


def _variables(text: str) -> dict[str, str]:
    """NAME=value (or export NAME=value) lines of the code blocks, expanded in order."""
    found: dict[str, str] = {}
    for block in _blocks(text):
        for line in _logical_lines(block):
            m = re.fullmatch(r"(?:export )?([A-Z_][A-Z0-9_]*)=(\S+)(?:\s+#.*)?", line.strip())
            if m and not m.group(2).startswith("$("):
                found[m.group(1)] = _expand(m.group(2), found)
    return found


def _expand(text: str, variables: dict[str, str]) -> str:
    return re.sub(r"\$\{?([A-Z_][A-Z0-9_]*)\}?",
                  lambda m: variables.get(m.group(1), m.group(0)), text)


def _commands(text: str) -> list[list[str]]:
    """Every ``revivify ...`` command of the code blocks, as argv after ``revivify``, with
    the blocks' variables expanded and shell punctuation and comments cut off."""
    variables = _variables(text)
    commands = []
    for block in _blocks(text):
        for line in _logical_lines(block):
            lexer = shlex.shlex(_expand(line, variables), posix=True, punctuation_chars=";|&<>()")
            lexer.whitespace_split = True
            lexer.commenters = "#"
            tokens = list(lexer)
            for i, token in enumerate(tokens):
                at_command = i == 0 or tokens[i - 1] in SEPARATORS | LEADERS
                if (token == "revivify" and at_command) or token.endswith("/bin/revivify"):
                    argv = []
                    for t in tokens[i + 1:]:
                        if t in SEPARATORS or set(t) <= set(";|&<>()"):
                            break
                        argv.append(t)
                    commands.append(argv)
    return commands


class Parsed(Exception):
    """Raised right after a command's outermost argparse parse succeeded."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__("parsed")
        self.namespace = args


@pytest.fixture
def parse_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every argparse parse that completes at the outermost level raises Parsed: the command
    stops once its arguments are known, before it calls any server. (Subcommands are parsed
    by nested calls; only the outermost one counts.)"""
    original = argparse.ArgumentParser.parse_known_args
    depth = [0]

    def parse_known_args(self: argparse.ArgumentParser, args: Any = None,
                         namespace: Any = None) -> Any:
        depth[0] += 1
        try:
            result = original(self, args, namespace)
        finally:
            depth[0] -= 1
        if depth[0] == 0 and not result[1]:
            raise Parsed(result[0])
        return result

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", parse_known_args)


def _local_flagfiles(argv: list[str]) -> list[str]:
    return [f"--flagfile={FLAGFILES / a.removeprefix('--flagfile=' + ETC)}"
            if a.startswith("--flagfile=" + ETC) else a for a in argv]


TEXT = DOC.read_text(encoding="utf-8")
COMMANDS = _commands(TEXT)


def test_the_doc_has_the_commands_it_is_about() -> None:
    seen = {" ".join(c[:2]) for c in COMMANDS}
    for needed in ("master run", "tserver run", "master add", "master remove",
                   "tserver retire", "tserver unregister", "master list", "ksck --masters",
                   "trace validate"):
        assert any(s.startswith(needed) for s in seen), needed


@pytest.mark.parametrize("argv", [c for c in COMMANDS if c[1:2] == ["run"]],
                         ids=lambda c: " ".join(c[:2]))
def test_server_commands_pass_the_servers_own_checks(argv: list[str], tmp_path: Path) -> None:
    """Parsed and validated by the server (addresses, the master list naming this master),
    with the flagfiles read from deploy/flagfiles and --fs-root moved under tmp_path (the
    command line wins over the files)."""
    module = {"tserver": tserver_server, "master": master_server}[argv[0]]
    args = [*_local_flagfiles(argv[2:]), "--fs-root", str(tmp_path / "root")]
    launch = module.parse(args)
    assert launch.options.fs_root == str(tmp_path / "root")


@pytest.mark.parametrize("argv", [c for c in COMMANDS if c[1:2] != ["run"]],
                         ids=lambda c: " ".join(c))
def test_client_commands_parse(argv: list[str], parse_only: None,
                               monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    assert not any("$" in a for a in argv), f"an undefined variable in {argv}"
    for name, value in _variables(TEXT).items():
        if name.startswith("REVIVIFY_"):
            monkeypatch.setenv(name, value)
    with pytest.raises(Parsed):
        code = main(argv)
        pytest.fail(f"revivify {' '.join(argv)}: exit {code}: {capsys.readouterr().err}")


def test_the_parse_check_can_fail(parse_only: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["master", "add", "--masters", "m1.example.net:7051"]) == 2  # no HOST:PORT
    assert main(["tserver", "list", "--masters", "no-port"]) == 2
    assert main(["ksck", "--no-such-flag"]) == 2
    with pytest.raises(Parsed):
        main(["ksck", "--masters", "m1.example.net:7051"])


def test_the_doc_commands_are_found() -> None:
    sample = ("```sh\nM=a:1\nuntil revivify ksck --masters $M >/dev/null; do x; done  # c\n"
              "sudo useradd --system revivify\n/opt/r/bin/revivify tserver list \\\n"
              "  --masters $M\n```\n")
    assert _commands(sample) == [["ksck", "--masters", "a:1"],
                                 ["tserver", "list", "--masters", "a:1"]]


def test_every_metric_named_exists() -> None:
    named = set(re.findall(r"\brevivify_[a-z_]+", TEXT))
    assert len(named) >= 8
    source = "".join(p.read_text(encoding="utf-8") for p in (ROOT / "impl").rglob("*.py"))
    missing = {m for m in named if f'"{m}"' not in source}
    assert not missing, f"metrics named in the guide that no server exports: {missing}"


def test_no_path_of_a_developers_machine() -> None:
    for bad in ("/work/", "/home/", "/root/", ".venv", "/tmp/pytest", "/Users/"):
        assert bad not in TEXT, bad


def test_the_readme_links_the_guide() -> None:
    assert "docs/operations.md" in (ROOT / "README.md").read_text(encoding="utf-8")


# ---------------------------------------------------------------------------- spark-submit


def _spark_submit_line() -> list[str]:
    for block in _blocks(TEXT):
        for line in _logical_lines(block):
            if "bin/spark-submit" in line:
                return shlex.split(line)
    raise AssertionError("no spark-submit line in the guide")


@pytest.mark.spark
def test_the_documented_spark_submit_runs_with_the_wheel(tmp_path: Path) -> None:
    """The guide's spark-submit line on local[2], with the revivify of a wheel built from
    this tree: the driver's Python sees only that wheel's install (``-S``: not the editable
    install of this venv), the executors' Python no revivify at all (the job ships it)."""
    wheels = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", str(ROOT), "-w", str(wheels)],
                   check=True, capture_output=True, timeout=600)
    (wheel,) = wheels.glob("revivify-*.whl")
    installed = tmp_path / "installed"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                    str(installed), str(wheel)], check=True, capture_output=True, timeout=600)
    site = sysconfig.get_paths()["purelib"]
    driver = tmp_path / "driver-python"
    driver.write_text(f'#!/bin/sh\nPYTHONPATH="{installed}:$PYTHONPATH" exec {sys.executable} '
                      f'-S "$@"\n')
    executor = tmp_path / "executor-python"
    executor.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    for script in (driver, executor):
        script.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": site, "PYSPARK_PYTHON": str(executor),
           "PYSPARK_DRIVER_PYTHON": str(driver)}
    # SPARK_MAIN=$(python -c '...'): the guide's way to find the entry point, run by the
    # driver's Python: it must name the wheel's file.
    assignment = next(line for b in _blocks(TEXT) for line in _logical_lines(b)
                      if line.startswith("SPARK_MAIN="))
    code = shlex.split(assignment.split("-c ", 1)[1].rstrip(")"))[0]
    spark_main = subprocess.run([str(driver), "-c", code], capture_output=True, text=True,
                                env=env, check=True).stdout.strip()
    assert spark_main.startswith(str(installed)), spark_main
    argv = _spark_submit_line()
    assert argv[0].endswith("/bin/spark-submit")
    replace = {"yarn": "local[2]", "$SPARK_MAIN": spark_main,
               "/shared/traces": str(ROOT / "traces" / "bad" / "vote-twice-after-restart"),
               "/shared/report": str(tmp_path / "report")}
    argv = [str(Path(sys.executable).parent / "spark-submit"),
            *(replace.get(a, a) for a in argv[1:]), "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert "DoubleVote" in {f["kind"] for f in report["findings"]}
    assert (tmp_path / "report" / "report.json").exists()
