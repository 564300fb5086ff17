"""``trace check --state FILE``: a check that goes on where the last one stopped.

What is saved. The follower (checker/follow.py) between two polls: per file its offset
(the bytes of whole lines replayed; a torn tail is read again next time) and where it is in
its node's order; per node its replay (``_NodeReplay``: every key's ``KeyState``, the
incarnations that ended cleanly, the masters' catalog state) and the ``FileOrder`` of the
file being read (at most ``REORDER_WINDOW`` held lines); the global tables
(``GlobalChecks``: every fact merged so far, which the global checks can only judge at
the end, since a later file may add a vote, a commit or a crash that changes them); the
findings so far and the counts. Not saved: the replayer's memo tables and interned states
(caches: a key's state is saved as its canonical tuple and interned afresh), and nothing
about lines already replayed beyond what the state above summarises.

Why a resumed run gives the verdict of one run over everything. The snapshot is taken
after reading and *before* ``Follower.finish`` (which flushes every key and ends every
file, steps that must happen once, at the real end): the next run restores exactly the
objects a single long run would hold at that moment, and reads on from the offsets. The
verdict printed by each run is ``finish`` on its own objects, after the snapshot was
taken: the verdict on the files as they were then (tests/trace/test_follow.py splits the
corpus into 2 to 5 batches at random points and compares with one check of the whole).

The file. One header line ``revivify-trace-state FORMAT CODE`` (``CODE``: a digest of
the checker's, the spec's and the contract's source, since any change to them may change
what the saved objects mean), one line with the SHA-256 of the rest, then the
zlib-compressed pickle. A state of another format or code, or whose digest does not match
(a truncated or damaged file), is refused (``StateError``: one line, exit 2); so is one
saved with another ``--max-frontier``. The state is the checker's own output, read back
by the checker: like any pickle it must not come from someone you do not trust.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import pickle
import tempfile
import zlib
from pathlib import Path
from typing import Any, Final

import attrs

from revivify.checker.follow import Follower, _Counting
from revivify.checker.replay import Replayer
from revivify.checker.traces import Interner

FORMAT: Final = 1
MAGIC: Final = b"revivify-trace-state"


class StateError(Exception):
    """A state file that cannot be resumed from (the message is one line)."""


@functools.cache
def code_version() -> str:
    """A digest of the source the saved objects' meaning depends on: the checker, the
    spec and the trace contract (every ``.py`` under them, by relative path)."""
    import revivify.checker
    import revivify.contract
    import revivify.spec

    h = hashlib.sha256()
    for pkg in (revivify.checker, revivify.spec, revivify.contract):
        root = Path(next(iter(pkg.__path__)))
        for f in sorted(root.rglob("*.py")):
            h.update(str(f.relative_to(root.parent)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


@attrs.define
class _Saved:
    """What is pickled: the follower without its replayer and callbacks, what the
    replayer must carry on with (its counters and the node UUIDs' numbering), and every
    live key's state as its canonical tuple (``KeyState.state`` indexes ``states``)."""

    fol: Follower
    max_frontier: int
    interner: Interner
    events: int
    coverage: dict[tuple[str, str], int]
    frontiers: dict[int, int]
    states: list[Any]


def dumps(fol: Follower) -> bytes:
    """The state file's bytes for ``fol`` (between two polls; before ``finish``)."""
    r = fol.replayer
    keys = list(fol._live_keys())
    for k in keys:
        r.concretize(k)  # a key in shape mode is its concrete state moved (neutral)
    sids = [k.state for k in keys]
    states: list[Any] = []
    for k in keys:
        if k.state >= 0:
            states.append(r.states.tuples[k.state])
            k.state = len(states) - 1
    detached = _detach(fol)
    try:
        saved = _Saved(fol, fol.max_frontier, r.interner, r.events, dict(r.coverage),
                       dict(r.frontiers), states)
        body = zlib.compress(pickle.dumps(saved, protocol=pickle.HIGHEST_PROTOCOL), 3)
    finally:
        _attach(fol, *detached)
        for k, sid in zip(keys, sids, strict=True):
            k.state = sid
    return wrap(body)


def pack(obj: object) -> bytes:
    """A state file's bytes holding ``obj`` (``unwrap`` reads it back)."""
    return wrap(zlib.compress(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), 3))


def wrap(body: bytes) -> bytes:
    """A state file's bytes around ``body``: the header and the checksum."""
    head = b"%s %d %s\n" % (MAGIC, FORMAT, code_version().encode())
    return head + hashlib.sha256(body).hexdigest().encode() + b"\n" + body


def loads(data: bytes, paths: list[str], max_frontier: int, what: str = "state") -> Follower:
    """The follower a state file saved, ready to poll ``paths`` (the new run's)."""
    saved = unwrap(data, what)
    if not isinstance(saved, _Saved):
        raise StateError(f"{what}: not a trace state")
    if saved.max_frontier != max_frontier:
        raise StateError(f"{what}: saved with --max-frontier {saved.max_frontier}, not "
                         f"{max_frontier}")
    return _revive(saved, paths)


def unwrap(data: bytes, what: str) -> Any:
    """What ``pack`` packed, after the header and checksum checks."""
    head, _, rest = data.partition(b"\n")
    digest, _, body = rest.partition(b"\n")
    parts = head.split(b" ")
    if len(parts) != 3 or parts[0] != MAGIC:
        raise StateError(f"{what}: not a trace state file (no '{MAGIC.decode()}' header)")
    if parts[1] != b"%d" % FORMAT or parts[2] != code_version().encode():
        raise StateError(f"{what}: written by another version of the checker (format "
                         f"{parts[1].decode(errors='replace')}, code "
                         f"{parts[2].decode(errors='replace')}; this one: {FORMAT}, "
                         f"{code_version()}); check from the start without it")
    if hashlib.sha256(body).hexdigest().encode() != digest:
        raise StateError(f"{what}: corrupt or truncated (its checksum does not match)")
    try:
        return pickle.loads(zlib.decompress(body))
    except Exception as exc:  # a checksum collision is not expected; say what it was
        raise StateError(f"{what}: unreadable ({type(exc).__name__})") from exc


def _revive(saved: _Saved, paths: list[str]) -> Follower:
    fol = saved.fol
    r = Replayer(max_frontier=saved.max_frontier, interner=saved.interner)
    r.events = saved.events
    r.coverage.update(saved.coverage)
    r.frontiers.update(saved.frontiers)
    fol.paths = list(paths)
    fol.replayer = r
    fol.on_finding = None
    for g in fol.groups.values():
        nr = g.replay
        nr.r, nr.sink, nr.add, nr.catalog = r, _Counting(fol), fol._add, fol.catalog
        nr.live_keys = fol._live_keys
        if nr.masters is not None:
            nr.masters.sink, nr.masters.add, nr.masters.spec = nr.sink, fol._add, fol.catalog
        for k in nr.keys.values():
            if k.state >= 0:
                k.state = r.states.intern(saved.states[k.state])
    return fol


def _detach(fol: Follower) -> tuple[Any, ...]:
    """Take out what is not data (the replayer, callbacks): ``_attach`` puts it back."""
    held = (fol.replayer, fol.on_finding, [
        (g.replay.r, g.replay.sink, g.replay.add, g.replay.live_keys,
         None if g.replay.masters is None else (g.replay.masters.sink,
                                                g.replay.masters.add))
        for g in fol.groups.values()])
    fol.replayer = None  # type: ignore[assignment]
    fol.on_finding = None
    for g in fol.groups.values():
        g.replay.r = g.replay.sink = g.replay.add = None  # type: ignore[assignment]
        g.replay.live_keys = None
        if g.replay.masters is not None:
            g.replay.masters.sink = g.replay.masters.add = None  # type: ignore[assignment]
    return held


def _attach(fol: Follower, replayer: Any, on_finding: Any, per_group: list[Any]) -> None:
    fol.replayer, fol.on_finding = replayer, on_finding
    for g, (r, sink, add, live, masters) in zip(fol.groups.values(), per_group, strict=True):
        g.replay.r, g.replay.sink, g.replay.add, g.replay.live_keys = r, sink, add, live
        if masters is not None:
            g.replay.masters.sink, g.replay.masters.add = masters  # type: ignore[union-attr]


def read_state(path: str, paths: list[str], max_frontier: int) -> Follower | None:
    """The follower saved at ``path``; None when there is no such file (a first run)."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StateError(f"{path}: {exc.strerror or exc}") from exc
    return loads(data, paths, max_frontier, what=path)


def write_state(path: str, data: bytes) -> None:
    """Replace ``path`` atomically (a crash leaves the old state or the new one)."""
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".state-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def check_resumed(paths: list[str], state: str, max_frontier: int) -> Follower:
    """The follower of a resumable check: restored from ``state`` (or new), every file
    read to its current end. The caller saves it (``dumps``) and then ``finish``-es it."""
    fol = read_state(state, paths, max_frontier) or Follower(paths, max_frontier=max_frontier)
    fol.global_every = float("inf")  # no provisional judgements: one verdict at the end
    fol.poll()
    return fol


__all__ = ["StateError", "check_resumed", "dumps", "loads", "read_state", "write_state"]
