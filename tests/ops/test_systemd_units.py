"""deploy/systemd: the unit files are valid for systemd (``systemd-analyze verify``, where it
is installed) and start a server with flags it accepts: every ExecStart is parsed by the real
server parser, with the example flagfiles of deploy/flagfiles standing in for
/etc/revivify/."""

from __future__ import annotations

import configparser
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from revivify.impl.flagfile import apply_flagfiles, read_flagfile
from revivify.impl.servers import master as master_server
from revivify.impl.servers import tserver as tserver_server
from revivify.impl.servers.process import Launch

ROOT = Path(__file__).resolve().parents[2]
UNITS = sorted((ROOT / "deploy" / "systemd").glob("*.service"))
FLAGFILES = sorted((ROOT / "deploy" / "flagfiles").glob("*.flags"))
ETC = "/etc/revivify/"
SERVERS = {"tserver": tserver_server, "master": master_server}


def _unit(path: Path) -> configparser.RawConfigParser:
    # systemd's format is INI-like: repeated keys (After=) are allowed, so strict=False;
    # no interpolation, '%' is systemd's specifier character.
    parser = configparser.RawConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    parser.read(path, encoding="utf-8")
    return parser


def _exec_start(path: Path) -> list[str]:
    return shlex.split(_unit(path)["Service"]["ExecStart"])


def _local(argv: list[str]) -> list[str]:
    """The ExecStart's arguments with /etc/revivify/X.flags read from deploy/flagfiles/X.flags."""
    out = []
    for arg in argv:
        if arg.startswith("--flagfile="):
            name = arg.removeprefix("--flagfile=")
            assert name.startswith(ETC), f"flagfiles live in {ETC}: {arg}"
            arg = f"--flagfile={ROOT / 'deploy' / 'flagfiles' / name.removeprefix(ETC)}"
        out.append(arg)
    return out


def test_there_is_a_unit_for_each_server_kind() -> None:
    kinds = {_exec_start(u)[1] for u in UNITS}
    assert kinds == {"master", "tserver"}, UNITS


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_a_unit_runs_a_server_as_its_own_user_with_limits(unit: Path) -> None:
    service = _unit(unit)["Service"]
    argv = _exec_start(unit)
    assert argv[0].startswith("/") and os.path.basename(argv[0]) == "revivify"
    assert argv[2] == "run" and argv[1] in SERVERS
    assert service["User"] not in ("", "root") and service.get("Group")
    assert service["Restart"] in ("on-failure", "always")
    assert int(service["LimitNOFILE"]) >= 4096
    # Exit 2 (bad flags, an unusable directory) is not cured by restarting.
    assert "2" in service.get("RestartPreventExitStatus", "").split()
    assert service.get("KillSignal", "SIGTERM") == "SIGTERM"


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_the_servers_accept_every_flag_a_unit_and_its_flagfiles_give(unit: Path,
                                                                     tmp_path: Path) -> None:
    """The real parser, flagfiles included, then the server's own checks (addresses, the
    master list naming this master...). --fs-root on the command line wins over the file's
    (/var/lib/revivify/...), so nothing is created outside tmp_path."""
    argv = _exec_start(unit)
    module = SERVERS[argv[1]]
    args = _local(argv[3:])
    parser = module.build_parser()
    expanded = apply_flagfiles(args, parser)
    assert any(a.startswith("--fs-root=") for a in expanded), "a unit's files name the root"
    launch = module.parse([*args, "--fs-root", str(tmp_path / "root")])
    assert isinstance(launch, Launch)
    assert launch.options.fs_root == str(tmp_path / "root")


def test_a_unit_naming_an_unknown_flag_is_caught(tmp_path: Path) -> None:
    """The check above can fail: a unit whose ExecStart has a flag the server does not know."""
    unit = tmp_path / "bad.service"
    text = (ROOT / "deploy" / "systemd" / "revivify-tserver.service").read_text()
    unit.write_text(text.replace("tserver run ", "tserver run --no-such-flag=1 ", 1))
    argv = _exec_start(unit)
    with pytest.raises(SystemExit) as exc:
        tserver_server.parse([*_local(argv[3:]), "--fs-root", str(tmp_path / "r")])
    assert exc.value.code == 2


@pytest.mark.parametrize("flags", FLAGFILES, ids=lambda p: p.name)
def test_every_example_flagfile_parses_for_a_server_that_reads_it(flags: Path) -> None:
    readers = [m for m in SERVERS.values() if _reads(m, flags)]
    assert readers, f"no server accepts every flag of {flags.name}"
    for module in readers:
        assert read_flagfile(str(flags), module.build_parser())


def _reads(module: object, flags: Path) -> bool:
    try:
        read_flagfile(str(flags), module.build_parser())  # type: ignore[attr-defined]
    except Exception:
        return False
    return True


def test_every_flagfile_a_unit_names_exists() -> None:
    named = {a.removeprefix("--flagfile=" + ETC) for u in UNITS for a in _exec_start(u)
             if a.startswith("--flagfile=")}
    assert named and named <= {f.name for f in FLAGFILES}
    assert {f.name for f in FLAGFILES} <= named, "an example flagfile no unit uses"


SYSTEM_UNITS = Path("/usr/lib/systemd/system")
NO_SYSTEMD = shutil.which("systemd-analyze") is None or not SYSTEM_UNITS.is_dir()


def _verify(tmp_path: Path, units: dict[str, str]) -> tuple[int, list[str]]:
    """``systemd-analyze verify`` of `units` (name -> text) under --root: the units, the
    executables they name and systemd's own units (the targets they are ordered after) in a
    scratch tree (verify refuses an ExecStart whose binary does not exist, and a dependency
    it cannot load). Its exit code and the lines of its complaints about our units (it
    reports a bad value as a warning, exit 0: "Failed to parse ..., ignoring")."""
    root = tmp_path / "root"
    shutil.copytree(SYSTEM_UNITS, root / SYSTEM_UNITS.relative_to("/"), symlinks=True)
    where = root / "etc" / "systemd" / "system"
    where.mkdir(parents=True)
    for name, text in units.items():
        (where / name).write_text(text)
        binary = root / _exec_start(where / name)[0].lstrip("/")
        binary.parent.mkdir(parents=True, exist_ok=True)
        binary.write_text("#!/bin/sh\n")
        binary.chmod(0o755)
    done = subprocess.run(["systemd-analyze", "verify", f"--root={root}",
                           *(str(where / name) for name in units)],
                          capture_output=True, text=True, timeout=120)
    return done.returncode, [line for line in done.stderr.splitlines()
                             if any(name in line for name in units)]


@pytest.mark.skipif(NO_SYSTEMD, reason="systemd is not installed")
def test_systemd_analyze_verify(tmp_path: Path) -> None:
    code, complaints = _verify(tmp_path, {u.name: u.read_text() for u in UNITS})
    assert code == 0 and not complaints, complaints


@pytest.mark.skipif(NO_SYSTEMD, reason="systemd is not installed")
def test_systemd_analyze_verify_finds_a_broken_unit(tmp_path: Path) -> None:
    text = (ROOT / "deploy" / "systemd" / "revivify-master.service").read_text()
    broken = text.replace("Restart=on-failure", "Restart=sometimes")
    assert broken != text
    code, complaints = _verify(tmp_path, {"revivify-master.service": broken})
    assert code != 0 or any("sometimes" in line for line in complaints), complaints
