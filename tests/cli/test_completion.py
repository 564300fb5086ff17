"""``revivify completion bash|zsh`` (impl/cli/completion.py): the script is generated from
the command table and the commands' parsers, and a shell with it loaded completes a noun,
a verb and a flag (bash always; zsh, through its bash emulation, where it is installed)."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from revivify.impl.cli import completion
from revivify.impl.cli.main import COMMAND_TABLE, Noun, Verb, _function

# (the words typed, the last one being completed) -> what the shell offers
CASES = [
    (["ta"], ["table", "tablet"]),                                 # a noun
    (["local-replica", "pu"], ["purge-quarantine"]),              # a verb
    (["table", "list", "--fr"], ["--freshness"]),                 # a verb's flag
    (["master", "run", "--rpc-b"], ["--rpc-bind"]),               # a server's flag
    (["ksck", "--ro"], ["--root"]),                               # a noun without verbs
    (["tserver", "status", "--tserver", "127.0.0.1:7051", "--js"], ["--json"]),
]


def generate(shell: str) -> str:
    done = subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", "completion",
                           shell], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("completion")
    written = {}
    for shell in completion.SHELLS:
        written[shell] = directory / f"revivify.{shell}"
        written[shell].write_text(generate(shell))
    return written


def offered(shell: str, script: Path, typed: list[list[str]]) -> list[list[str]]:
    """What `shell`, with `script` loaded, offers for each line of CASES' kind."""
    lines = []
    for words in typed:
        quoted = " ".join(f"'{w}'" for w in ["revivify", *words])
        lines.append(f"complete_line {quoted}")
    if shell == "bash":
        program = f"""source '{script}'
complete_line() {{ COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); _revivify
                  echo "${{COMPREPLY[*]}}"; }}
""" + "\n".join(lines)
        argv = ["bash", "--norc", "--noprofile", "-c", program]
    else:
        # What zsh's _bash_complete does before it calls the function (bashcompinit); zsh
        # then filters the words by the prefix typed (compadd), as the helper does here.
        program = f"""autoload -U +X compinit && compinit -u -d '{script}.zcompdump'
source '{script}'
complete_line() {{ words=("$@"); CURRENT=$#; COMP_WORDS=("${{words[@]}}")
                  COMP_CWORD=$((CURRENT - 1))
                  local -a all=(${{(f)"$(compgen -F _revivify -- x)"}})
                  print -r -- ${{(M)all:#${{words[CURRENT]}}*}}; }}
""" + "\n".join(lines)
        argv = ["zsh", "-f", "-c", program]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return [line.split() for line in done.stdout.splitlines()]


@pytest.mark.parametrize("shell", completion.SHELLS)
def test_a_shell_completes_nouns_verbs_and_flags(scripts: dict[str, Path], shell: str) -> None:
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed")
    got = offered(shell, scripts[shell], [typed for typed, _ in CASES])
    assert got == [want for _, want in CASES]


def test_the_script_holds_every_noun_verb_and_flag_of_the_commands(
        scripts: dict[str, Path]) -> None:
    """Every noun and verb of the table is offered, and every command's flags are read
    from its parser (this venv has every extra, so none is left out)."""
    text = scripts["bash"].read_text()
    flags = completion.flags_of(COMMAND_TABLE, _function)
    for noun in COMMAND_TABLE:
        assert noun.name in text
        for verb in noun.verbs:
            assert verb.name in text
            if noun.name != "completion":
                assert "--help" in flags[noun.name, verb.name], (noun.name, verb.name)
        if not noun.verbs:
            assert (noun.name, "") in flags, noun.name
    assert "--freshness" in flags["table", "list"]
    assert "--election-ticks" in flags["tserver", "run"]


def test_flags_come_from_the_parser_a_command_builds() -> None:
    """A command's flags are whatever its parser holds when it parses: a flag added to a
    command is completed without a list to update. Nothing runs, and argparse parses
    again afterwards."""
    ran: list[list[str]] = []

    def command(argv: list[str]) -> int:
        parser = argparse.ArgumentParser(prog="x")
        parser.add_argument("--brand-new-flag")
        parser.parse_args(argv)
        ran.append(argv)
        return 0

    table = [Noun("thing", "", "thing:main"), Noun("other", "", "other", (Verb("go", "", "go"),))]
    found = completion.flags_of(table, lambda module, function: command)
    assert found == {("thing", ""): ["-h", "--help", "--brand-new-flag"],
                     ("other", "go"): ["-h", "--help", "--brand-new-flag"]}
    assert ran == []
    assert command(["--brand-new-flag", "1"]) == 0 and ran == [["--brand-new-flag", "1"]]


@pytest.mark.parametrize("argv", [["completion"], ["completion", "fish"],
                                  ["completion", "bash", "zsh"]])
def test_a_shell_it_does_not_know_is_bad_usage(argv: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", *argv],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("revivify completion: ") and "bash" in done.stderr
    assert len(done.stderr.splitlines()) == 1
