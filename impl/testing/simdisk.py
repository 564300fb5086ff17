"""A simulated disk whose crashes keep exactly what POSIX allows, ALICE-style.

Model. The disk holds inodes (files and directories) and, for each, two images: the *live*
image every read sees, and the *durable* image a crash falls back to. Every mutation is
applied to the live image at once and recorded as a pending operation:

* data operations (pwrite, truncate, fallocate), pending per file, in issue order; a file's
  `fsync()` or `fdatasync()` makes all of its pending data operations durable;
* namespace operations (create, mkdir, rename, unlink, rmdir), kept in one issue-ordered
  list, each touching one directory (two for a rename across directories);
  `fsync_dir(d)` makes durable every pending operation that touches d, together with every
  earlier operation it is ordered after (see below).

What a crash may keep (the "allowed subsets", the rules of the ALICE and BOB studies for an
ordered-metadata journaling file system such as ext4 data=ordered, made conservative):

1. Per file, any *prefix* of its pending data operations (writes persist in order; with
   `torn_write_size` set, a write is split into aligned pieces first, so a prefix can end in
   the middle of a write: a torn write).
2. Namespace operations persist in order per directory: the kept set is closed under
   "earlier operation touching a common directory". A rename is atomic: both of its
   directory effects are kept or neither is.
3. Data and names are independent: a file's name can persist without its data (the classic
   rename-before-fsync bug shows up as an empty target) and its data without its name
   (a created-but-not-dir-synced file simply vanishes).

`crash()` is the harshest outcome: nothing unsynced survives. `crash_states(limit, seed)`
enumerates every allowed combination when there are at most `limit`; beyond that it returns
`limit` of them: the two extremes (nothing kept, everything kept), then each single-file and
namespace-only variation, then seeded uniform samples (a random prefix per file and a random
closed namespace set). Reproducible for a given seed.

Crash injection. `crash_after(n)` lets n more mutating operations happen; the next one raises
`SimulatedCrash` without taking effect, and from then on every operation raises too (the
process is dead: cleanup code cannot write). `explore_crashes` drives an operation through
every such crash point and checks every allowed outcome of each.
"""

from __future__ import annotations

import collections
import itertools
import posixpath
import random
import threading
from collections.abc import Callable, Iterator
from typing import Literal

import attrs


class SimulatedCrash(Exception):
    """The simulated machine lost power at this operation."""

    def __init__(self, op_index: int, op: str) -> None:
        super().__init__(f"simulated crash at operation #{op_index} ({op})")
        self.op_index = op_index
        self.op = op


Kind = Literal["file", "dir"]
ROOT = 0


@attrs.frozen
class Write:
    offset: int
    data: bytes


@attrs.frozen
class Resize:
    size: int


DataOp = Write | Resize


@attrs.frozen
class Link:
    """A new name in `directory` for `inode` (create, mkdir)."""

    directory: int
    name: str
    inode: int

    @property
    def dirs(self) -> tuple[int, ...]:
        return (self.directory,)


@attrs.frozen
class Unlink:
    directory: int
    name: str

    @property
    def dirs(self) -> tuple[int, ...]:
        return (self.directory,)


@attrs.frozen
class Rename:
    src_dir: int
    src_name: str
    dst_dir: int
    dst_name: str
    inode: int

    @property
    def dirs(self) -> tuple[int, ...]:
        return (self.src_dir,) if self.src_dir == self.dst_dir else (self.src_dir, self.dst_dir)


NsOp = Link | Unlink | Rename


def _apply_data(content: bytearray, op: DataOp) -> None:
    if isinstance(op, Write):
        end = op.offset + len(op.data)
        if len(content) < op.offset:
            content.extend(bytes(op.offset - len(content)))
        content[op.offset : end] = op.data
    elif op.size < len(content):
        del content[op.size :]
    else:
        content.extend(bytes(op.size - len(content)))


def _apply_ns(entries: dict[int, dict[str, int]], op: NsOp) -> None:
    if isinstance(op, Link):
        entries.setdefault(op.directory, {})[op.name] = op.inode
    elif isinstance(op, Unlink):
        entries.setdefault(op.directory, {}).pop(op.name, None)
    else:
        source = entries.setdefault(op.src_dir, {})
        if source.get(op.src_name) == op.inode:
            del source[op.src_name]
        entries.setdefault(op.dst_dir, {})[op.dst_name] = op.inode


class SimFile:
    """A handle on a simulated inode (stays valid after its name is unlinked, like POSIX)."""

    def __init__(self, disk: SimDisk, inode: int, path: str) -> None:
        self._disk = disk
        self._inode = inode
        self._path = path
        self._closed = False

    @property
    def path(self) -> str:
        return self._path

    def _check(self) -> None:
        if self._closed:
            raise ValueError(f"{self._path}: I/O on closed file")

    def pwrite(self, offset: int, data: bytes) -> None:
        self._check()
        self._disk._file_write(self._inode, offset, bytes(data))

    def pread(self, offset: int, length: int) -> bytes:
        self._check()
        return self._disk._file_read(self._inode, offset, length)

    def size(self) -> int:
        self._check()
        return self._disk._file_size(self._inode)

    def truncate(self, size: int) -> None:
        self._check()
        self._disk._file_resize(self._inode, size, "truncate", shrink_ok=True)

    def fallocate(self, offset: int, length: int) -> None:
        self._check()
        self._disk._file_resize(self._inode, offset + length, "fallocate", shrink_ok=False)

    def fsync(self) -> None:
        self._check()
        self._disk._file_sync(self._inode, "fsync")

    def fdatasync(self) -> None:
        self._check()
        self._disk._file_sync(self._inode, "fdatasync")

    def close(self) -> None:
        self._closed = True


class SimDisk:
    """In-memory Disk with crash semantics; thread-safe (one lock around every operation)."""

    def __init__(self, *, torn_write_size: int | None = None) -> None:
        self.torn_write_size = torn_write_size
        self._lock = threading.RLock()
        self._kinds: dict[int, Kind] = {ROOT: "dir"}
        self._data: dict[int, bytearray] = {}
        self._entries: dict[int, dict[str, int]] = {ROOT: {}}
        self._durable_data: dict[int, bytes] = {}
        self._durable_entries: dict[int, dict[str, int]] = {ROOT: {}}
        self._pending_data: dict[int, list[DataOp]] = {}
        self._pending_ns: list[NsOp] = []
        self._next_inode = 1
        self._budget: int | None = None
        self._crashed = False
        self.op_count = 0
        self.sync_count = 0
        self.calls: collections.Counter[str] = collections.Counter()  # op name -> times
        self.crash_description = "fresh"

    # ------------------------------------------------------------------ crash control

    @property
    def crashed(self) -> bool:
        return self._crashed

    def crash_after(self, operations: int | None) -> None:
        """Allow `operations` more mutating operations, then crash (None: never)."""
        self._budget = operations

    def _mutate(self, op: str) -> None:
        """Gate every mutating operation: count it, or crash before it takes effect."""
        if self._crashed:
            raise SimulatedCrash(self.op_count, f"{op} after crash")
        if self._budget is not None:
            if self._budget <= 0:
                self._crashed = True
                raise SimulatedCrash(self.op_count, op)
            self._budget -= 1
        self.op_count += 1
        self.calls[op.split(" ", 1)[0]] += 1

    def _alive(self) -> None:
        if self._crashed:
            raise SimulatedCrash(self.op_count, "operation after crash")

    # ------------------------------------------------------------------ paths

    @staticmethod
    def _parts(path: str) -> list[str]:
        if not path.startswith("/"):
            raise ValueError(f"SimDisk paths are absolute: {path!r}")
        norm = posixpath.normpath(path)
        return [p for p in norm.split("/") if p]

    def _lookup(self, path: str) -> int | None:
        inode = ROOT
        for part in self._parts(path):
            if self._kinds[inode] != "dir":
                raise NotADirectoryError(path)
            child = self._entries[inode].get(part)
            if child is None:
                return None
            inode = child
        return inode

    def _require(self, path: str) -> int:
        inode = self._lookup(path)
        if inode is None:
            raise FileNotFoundError(path)
        return inode

    def _parent(self, path: str) -> tuple[int, str]:
        parts = self._parts(path)
        if not parts:
            raise PermissionError("cannot modify the root directory entry")
        parent = self._require("/" + "/".join(parts[:-1]))
        if self._kinds[parent] != "dir":
            raise NotADirectoryError(path)
        return parent, parts[-1]

    def _new_inode(self, kind: Kind) -> int:
        inode = self._next_inode
        self._next_inode += 1
        self._kinds[inode] = kind
        if kind == "file":
            self._data[inode] = bytearray()
            self._durable_data[inode] = b""
            self._pending_data[inode] = []
        else:
            self._entries[inode] = {}
            self._durable_entries[inode] = {}
        return inode

    def _record_ns(self, op: NsOp) -> None:
        _apply_ns(self._entries, op)
        self._pending_ns.append(op)

    # ------------------------------------------------------------------ Disk protocol

    def open(self, path: str, *, create: bool = False, exclusive: bool = False) -> SimFile:
        with self._lock:
            self._alive()
            inode = self._lookup(path)
            if inode is not None:
                if exclusive:
                    raise FileExistsError(path)
                if self._kinds[inode] != "file":
                    raise IsADirectoryError(path)
                return SimFile(self, inode, path)
            if not (create or exclusive):
                raise FileNotFoundError(path)
            parent, name = self._parent(path)
            self._mutate(f"create {path}")
            inode = self._new_inode("file")
            self._record_ns(Link(parent, name, inode))
            return SimFile(self, inode, path)

    def read_file(self, path: str) -> bytes:
        with self._lock:
            self._alive()
            inode = self._require(path)
            if self._kinds[inode] != "file":
                raise IsADirectoryError(path)
            return bytes(self._data[inode])

    def map_file(self, path: str) -> bytes:
        return self.read_file(path)

    def file_size(self, path: str) -> int:
        with self._lock:
            self._alive()
            inode = self._require(path)
            if self._kinds[inode] != "file":
                raise IsADirectoryError(path)
            return len(self._data[inode])

    def exists(self, path: str) -> bool:
        with self._lock:
            self._alive()
            try:
                return self._lookup(path) is not None
            except NotADirectoryError:
                return False

    def is_dir(self, path: str) -> bool:
        with self._lock:
            self._alive()
            try:
                inode = self._lookup(path)
            except NotADirectoryError:
                return False
            return inode is not None and self._kinds[inode] == "dir"

    def listdir(self, path: str) -> list[str]:
        with self._lock:
            self._alive()
            inode = self._require(path)
            if self._kinds[inode] != "dir":
                raise NotADirectoryError(path)
            return sorted(self._entries[inode])

    def mkdir(self, path: str) -> None:
        with self._lock:
            self._alive()
            parent, name = self._parent(path)
            if name in self._entries[parent]:
                raise FileExistsError(path)
            self._mutate(f"mkdir {path}")
            inode = self._new_inode("dir")
            self._record_ns(Link(parent, name, inode))

    def rmdir(self, path: str) -> None:
        with self._lock:
            self._alive()
            inode = self._require(path)
            if self._kinds[inode] != "dir":
                raise NotADirectoryError(path)
            if self._entries[inode]:
                raise OSError(39, "Directory not empty", path)
            parent, name = self._parent(path)
            self._mutate(f"rmdir {path}")
            self._record_ns(Unlink(parent, name))

    def unlink(self, path: str) -> None:
        with self._lock:
            self._alive()
            inode = self._require(path)
            if self._kinds[inode] != "file":
                raise IsADirectoryError(path)
            parent, name = self._parent(path)
            self._mutate(f"unlink {path}")
            self._record_ns(Unlink(parent, name))

    def rename(self, src: str, dst: str) -> None:
        with self._lock:
            self._alive()
            inode = self._require(src)
            src_parent, src_name = self._parent(src)
            dst_parent, dst_name = self._parent(dst)
            existing = self._entries[dst_parent].get(dst_name)
            if existing is not None and existing != inode:
                if self._kinds[existing] != self._kinds[inode]:
                    raise (
                        IsADirectoryError(dst)
                        if self._kinds[existing] == "dir"
                        else (NotADirectoryError(dst))
                    )
                if self._kinds[existing] == "dir" and self._entries[existing]:
                    raise OSError(39, "Directory not empty", dst)
            if self._kinds[inode] == "dir" and (dst + "/").startswith(src.rstrip("/") + "/"):
                raise OSError(22, "Invalid argument: rename into itself", dst)
            self._mutate(f"rename {src} -> {dst}")
            self._record_ns(Rename(src_parent, src_name, dst_parent, dst_name, inode))

    def fsync_dir(self, path: str) -> None:
        with self._lock:
            self._alive()
            directory = self._require(path)
            if self._kinds[directory] != "dir":
                raise NotADirectoryError(path)
            self._mutate(f"fsync_dir {path}")
            self.sync_count += 1
            # Reverse scan: an op is made durable if it touches a directory that must be
            # complete up to this point (d itself, or a directory of a later durable op).
            needed = {directory}
            chosen: list[bool] = [False] * len(self._pending_ns)
            for position in range(len(self._pending_ns) - 1, -1, -1):
                op = self._pending_ns[position]
                if needed.intersection(op.dirs):
                    chosen[position] = True
                    needed.update(op.dirs)
            keep: list[NsOp] = []
            for op, durable in zip(self._pending_ns, chosen, strict=True):
                if durable:
                    _apply_ns(self._durable_entries, op)
                else:
                    keep.append(op)
            self._pending_ns = keep

    # ------------------------------------------------------------------ file internals

    def _file_write(self, inode: int, offset: int, data: bytes) -> None:
        with self._lock:
            self._alive()
            self._mutate(f"pwrite inode {inode} @{offset}+{len(data)}")
            _apply_data(self._data[inode], Write(offset, data))
            self._pending_data[inode].extend(self._pieces(offset, data))

    def _pieces(self, offset: int, data: bytes) -> list[DataOp]:
        size = self.torn_write_size
        if size is None or len(data) <= size:
            return [Write(offset, data)]
        pieces: list[DataOp] = []
        start = 0
        while start < len(data):
            boundary = ((offset + start) // size + 1) * size
            end = min(len(data), boundary - offset)
            pieces.append(Write(offset + start, data[start:end]))
            start = end
        return pieces

    def _file_read(self, inode: int, offset: int, length: int) -> bytes:
        with self._lock:
            self._alive()
            return bytes(self._data[inode][offset : offset + length])

    def _file_size(self, inode: int) -> int:
        with self._lock:
            self._alive()
            return len(self._data[inode])

    def _file_resize(self, inode: int, size: int, op: str, *, shrink_ok: bool) -> None:
        with self._lock:
            self._alive()
            if not shrink_ok and size <= len(self._data[inode]):
                return
            self._mutate(f"{op} inode {inode} to {size}")
            _apply_data(self._data[inode], Resize(size))
            self._pending_data[inode].append(Resize(size))

    def _file_sync(self, inode: int, op: str) -> None:
        with self._lock:
            self._alive()
            self._mutate(f"{op} inode {inode}")
            self.sync_count += 1
            self._durable_data[inode] = bytes(self._data[inode])
            self._pending_data[inode] = []

    # ------------------------------------------------------------------ crash outcomes

    def pending_summary(self) -> str:
        with self._lock:
            files = {i: len(ops) for i, ops in self._pending_data.items() if ops}
            return (
                f"pending data ops per inode {files}, pending namespace ops {len(self._pending_ns)}"
            )

    def _relevant_files(self) -> list[int]:
        """Inodes with pending data that some crash outcome could still name."""
        referenced: set[int] = set()
        for op in self._pending_ns:
            if isinstance(op, Link | Rename):
                referenced.add(op.inode)
        referenced.update(self._reachable(self._durable_entries))
        return sorted(i for i, ops in self._pending_data.items() if ops and i in referenced)

    def _reachable(self, entries: dict[int, dict[str, int]]) -> set[int]:
        seen = {ROOT}
        stack = [ROOT]
        while stack:
            for child in entries.get(stack.pop(), {}).values():
                if child not in seen:
                    seen.add(child)
                    if self._kinds.get(child) == "dir":
                        stack.append(child)
        return seen

    def _ns_downsets(self) -> Iterator[tuple[bool, ...]]:
        """Every per-directory-prefix-closed subset of the pending namespace ops."""
        ops = self._pending_ns

        def walk(position: int, blocked: frozenset[int]) -> Iterator[tuple[bool, ...]]:
            if position == len(ops):
                yield ()
                return
            op = ops[position]
            if not blocked.intersection(op.dirs):
                for rest in walk(position + 1, blocked):
                    yield (True, *rest)
            for rest in walk(position + 1, blocked | frozenset(op.dirs)):
                yield (False, *rest)

        return walk(0, frozenset())

    def _random_downset(self, rng: random.Random) -> tuple[bool, ...]:
        blocked: set[int] = set()
        out: list[bool] = []
        for op in self._pending_ns:
            keep = not blocked.intersection(op.dirs) and rng.random() < 0.5
            if not keep:
                blocked.update(op.dirs)
            out.append(keep)
        return tuple(out)

    def _outcome(self, prefixes: dict[int, int], ns_keep: tuple[bool, ...], label: str) -> SimDisk:
        entries = {d: dict(names) for d, names in self._durable_entries.items()}
        for op, keep in zip(self._pending_ns, ns_keep, strict=True):
            if keep:
                _apply_ns(entries, op)
        reachable = self._reachable(entries)
        disk = SimDisk(torn_write_size=self.torn_write_size)
        disk._next_inode = self._next_inode
        disk._kinds = {i: k for i, k in self._kinds.items() if i in reachable}
        disk._entries = {i: dict(entries.get(i, {})) for i, k in disk._kinds.items() if k == "dir"}
        disk._durable_entries = {i: dict(names) for i, names in disk._entries.items()}
        for inode, kind in disk._kinds.items():
            if kind != "file":
                continue
            content = bytearray(self._durable_data[inode])
            for data_op in self._pending_data[inode][: prefixes.get(inode, 0)]:
                _apply_data(content, data_op)
            disk._data[inode] = content
            disk._durable_data[inode] = bytes(content)
            disk._pending_data[inode] = []
        disk.crash_description = label
        return disk

    def crash(self) -> SimDisk:
        """The disk after a crash that kept nothing unsynced."""
        with self._lock:
            return self._outcome({}, (False,) * len(self._pending_ns), "nothing unsynced kept")

    def crash_states(self, limit: int = 256, seed: int = 0) -> list[SimDisk]:
        """Allowed crash outcomes: all of them if at most `limit`, else `limit` sampled ones."""
        with self._lock:
            files = self._relevant_files()
            sizes = [len(self._pending_data[i]) + 1 for i in files]
            downsets = list(itertools.islice(self._ns_downsets(), limit + 1))
            total = len(downsets)
            for size in sizes:
                total *= size
            if total <= limit:
                return [
                    self._outcome(
                        dict(zip(files, lengths, strict=True)),
                        ns,
                        f"prefixes {dict(zip(files, lengths, strict=True))} ns {ns}",
                    )
                    for ns in downsets
                    for lengths in itertools.product(*(range(s) for s in sizes))
                ]
            return self._sampled_states(files, sizes, limit, seed)

    def _sampled_states(
        self, files: list[int], sizes: list[int], limit: int, seed: int
    ) -> list[SimDisk]:
        rng = random.Random(seed)
        none = (False,) * len(self._pending_ns)
        every = (True,) * len(self._pending_ns)
        full = [s - 1 for s in sizes]
        choices: list[tuple[tuple[int, ...], tuple[bool, ...]]] = [
            (tuple(0 for _ in sizes), none),
            (tuple(full), every),
            (tuple(full), none),
            (tuple(0 for _ in sizes), every),
        ]
        for position, size in enumerate(sizes):  # one file torn at every point, rest kept
            for length in range(size):
                lengths = list(full)
                lengths[position] = length
                choices.append((tuple(lengths), every))
        seen: set[tuple[tuple[int, ...], tuple[bool, ...]]] = set()
        out: list[SimDisk] = []
        attempts = 0
        candidates = iter(choices)
        while len(out) < limit and attempts < limit * 20:
            attempts += 1
            choice = next(candidates, None)
            if choice is None:
                choice = (tuple(rng.randrange(s) for s in sizes), self._random_downset(rng))
            if choice in seen:
                continue
            seen.add(choice)
            prefixes = dict(zip(files, choice[0], strict=True))
            out.append(
                self._outcome(prefixes, choice[1], f"sampled prefixes {prefixes} ns {choice[1]}")
            )
        return out

    def clone(self) -> SimDisk:
        """An independent copy with the same live, durable and pending state."""
        with self._lock:
            other = SimDisk(torn_write_size=self.torn_write_size)
            other._kinds = dict(self._kinds)
            other._data = {i: bytearray(c) for i, c in self._data.items()}
            other._entries = {i: dict(e) for i, e in self._entries.items()}
            other._durable_data = dict(self._durable_data)
            other._durable_entries = {i: dict(e) for i, e in self._durable_entries.items()}
            other._pending_data = {i: list(ops) for i, ops in self._pending_data.items()}
            other._pending_ns = list(self._pending_ns)
            other._next_inode = self._next_inode
            other.crash_description = self.crash_description
            return other

    def tree(self, path: str = "/") -> dict[str, bytes | None]:
        """Every path under `path` -> file contents (None for directories); for assertions."""
        out: dict[str, bytes | None] = {}
        with self._lock:
            start = self._require(path)
            stack = [(path.rstrip("/") or "/", start)]
            while stack:
                prefix, inode = stack.pop()
                for name, child in self._entries[inode].items():
                    child_path = posixpath.join(prefix, name)
                    if self._kinds[child] == "dir":
                        out[child_path] = None
                        stack.append((child_path, child))
                    else:
                        out[child_path] = bytes(self._data[child])
        return out


# ---------------------------------------------------------------------- crash exploration


@attrs.frozen
class ExplorationReport:
    crash_points: int
    states_checked: int
    completed_ops: int


def explore_crashes(
    make_disk: Callable[[], SimDisk],
    operation: Callable[[SimDisk], object],
    check: Callable[[SimDisk, int], None],
    *,
    states_per_point: int = 64,
    seed: int = 0,
    max_points: int = 100_000,
) -> ExplorationReport:
    """Crash `operation` before each of its mutating disk operations in turn, and after it
    completes; call `check(outcome_disk, crash_point)` on every allowed outcome of each.

    `make_disk()` must return a fresh disk in the starting state each time (clone a
    prepared one). Exceptions from `operation` are expected only once the disk has crashed
    (they may be a SimulatedCrash, an exception group holding one, or an error wrapping
    one); an exception from an uncrashed disk is a real failure and propagates.
    """
    states = 0
    point = 0
    while point < max_points:
        disk = make_disk()
        disk.crash_after(point)
        try:
            operation(disk)
        except BaseException:
            if not disk.crashed:
                raise
        for outcome in disk.crash_states(states_per_point, seed + point):
            check(outcome, point)
            states += 1
        if not disk.crashed:
            return ExplorationReport(point + 1, states, point)
        point += 1
    raise RuntimeError(f"operation did not complete within {max_points} crash points")
