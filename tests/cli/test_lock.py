"""requirements.lock is what the venv holds, and it honours pyproject.toml's ranges.

The package's metadata (``pyproject.toml``) keeps compatible ranges, for people who install
revivify into an environment of their own; ``make`` installs the exact versions of
``requirements.lock``, so a fresh clone tests what was tested. These checks fail when the two
drift apart: a range narrowed or a dependency added without ``make lock``, a lock edited by
hand without hashes, or a venv that no longer matches its lock.
"""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

from lock_diff import read_lock
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
def wanted() -> list[Requirement]:
    """Every requirement of the package, its extras and its build system."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    texts = list(project["project"]["dependencies"])
    for extra in project["project"]["optional-dependencies"].values():
        texts += extra
    texts += project["build-system"]["requires"]
    return [Requirement(t) for t in texts]


def test_every_requirement_is_pinned_within_its_range_with_hashes() -> None:
    """Each direct requirement (base, every extra, the build) has a pin in the lock that
    its range allows, and every pin carries at least one sha256 (pip --require-hashes)."""
    pins = read_lock(ROOT / "requirements.lock")
    assert len(pins) > 30, "the lock holds the transitive closure, not the direct list only"
    for name, versions in pins.items():
        assert all(hashes >= 1 for _, _, hashes in versions), f"{name} has no hash"
    for req in wanted():
        name = canonicalize_name(req.name)
        assert name in pins, f"{req} is not in requirements.lock: run `make lock`"
        for version, _, _ in pins[name]:
            assert req.specifier.contains(version, prereleases=True), (
                f"requirements.lock pins {name}=={version}, outside pyproject.toml's {req}: "
                "run `make lock`")


def test_the_venv_holds_the_lock() -> None:
    """What this test runs on is the lock: every pin whose marker applies here is installed
    at exactly that version (the venv was made by `make venv`, not by hand)."""
    pins = read_lock(ROOT / "requirements.lock")
    checked = 0
    for name, versions in pins.items():
        for version, marker, _ in versions:
            if marker is not None and not Marker(marker).evaluate():
                continue
            installed = Version(importlib.metadata.version(name))
            assert installed == version, (
                f"{name} {installed} is installed, requirements.lock says {version}: "
                "run `make venv` (or `rm -r .venv && make venv`)")
            checked += 1
    assert checked > 30


def test_the_lock_reader_refuses_what_it_must() -> None:
    """The reader sees a pin without hashes and a pin outside a range (so the two checks
    above can fail)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lock"
        path.write_text("msgspec==0.17.0 \\\n    --hash=sha256:ab\n"
                        "numpy==2.4.6 ; python_full_version < '3.12' \\\n"
                        "    --hash=sha256:cd \\\n    --hash=sha256:ef\n"
                        "    # via pandas\n"
                        "trio==0.35.0\n")
        pins = read_lock(path)
    assert pins["msgspec"] == [(Version("0.17.0"), None, 1)]
    assert pins["numpy"] == [(Version("2.4.6"), "python_full_version < '3.12'", 2)]
    assert pins["trio"] == [(Version("0.35.0"), None, 0)]
    assert not Requirement("msgspec>=0.18").specifier.contains(pins["msgspec"][0][0])


def test_the_build_lock_is_the_locks_own_setuptools() -> None:
    """requirements-build.lock (installed first, so that source releases build with it)
    pins setuptools and wheel at the versions of requirements.lock, with hashes."""
    build = read_lock(ROOT / "requirements-build.lock")
    full = read_lock(ROOT / "requirements.lock")
    assert {"setuptools", "wheel"} <= set(build)
    for name, versions in build.items():
        assert all(h >= 1 for _, _, h in versions), name
        assert [v for v, _, _ in versions] == [v for v, _, _ in full[name]], name


def test_the_bench_peer_is_locked_too() -> None:
    """The benchmark's peer (PySyncObj) installs from its own lock, with a hash."""
    pins = read_lock(ROOT / "bench" / "requirements.lock")
    assert [(str(v), h >= 1) for v, _, h in pins["pysyncobj"]] == [("0.3.17", True)]
