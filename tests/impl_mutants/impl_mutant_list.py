"""Seeded bugs in the implementation (issue 20, "Mutants of the implementation").

The product has no mutant switches: each mutant here is a small patch over one function or
method of ``revivify.impl``, applied from outside, either in-process (``apply(patcher)``,
undone by ``patcher.undo()``) or, for a real process, by ``sitecustomize.py`` in this
directory (on ``PYTHONPATH`` with ``REVIVIFY_IMPL_MUTANT`` naming the mutant). Each one
changes one line of behaviour, the way a plausible bug would, and names the check that is
expected to catch it (``expected``); ``impl_mutant_run.py`` records which check does.

Groups:
    deletion    the six deletion steps (seed 001) and the tombstone they leave
    startup     classification of what startup finds on disk
    copy        StartTabletCopy and the follower's download (cmeta merge)
    storage     the WAL and the metadata files (fsync, torn tails)
    raft        the Raft core and its shell (votes, commit, reads), run inside real servers
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from typing import Any

import attrs


class Patcher:
    """setattr with undo (pytest's MonkeyPatch without pytest: sitecustomize runs in every
    process, where importing pytest would be out of place)."""

    def __init__(self) -> None:
        self._undo: list[tuple[Any, str, Any]] = []

    def setattr(self, target: Any, name: str, value: Any) -> None:
        self._undo.append((target, name, getattr(target, name)))
        setattr(target, name, value)

    def undo(self) -> None:
        while self._undo:
            target, name, old = self._undo.pop()
            setattr(target, name, old)


@attrs.frozen
class Mutant:
    name: str
    doc: str  # the bug, in one line
    expected: str  # the claim or check expected to catch it
    apply: Callable[[Patcher], None]


# ------------------------------------------------------------------------------ deletion


def _write_without_fsync(disk: Any, path: str, data: bytes) -> None:
    """Temp file and rename, but no fsync of the file nor of its directory."""
    temp = path + ".tmp-mutant"
    f = disk.open(temp, create=True)
    try:
        f.truncate(0)
        f.pwrite(0, data)
    finally:
        f.close()
    disk.rename(temp, path)


def deleted_superblock_not_fsynced(p: Patcher) -> None:
    from revivify.impl.storage import metadata
    from revivify.impl.storage.metafile import encode_superblock
    from revivify.impl.storage.values import DataState

    orig = metadata.MetadataStore.write_superblock

    def write_superblock(self: Any, superblock: Any) -> None:
        if superblock.data_state is DataState.DELETED:  # BUG: the commit point not synced
            path = self.layout.superblock_path(superblock.tablet_id)
            _write_without_fsync(self.disk, path, encode_superblock(superblock))
            return
        orig(self, superblock)
    p.setattr(metadata.MetadataStore, "write_superblock", write_superblock)


def _wrap_persist(p: Patcher, wrapper: Callable[[Any, Any, str, Any], None]) -> None:
    from revivify.impl.tserver.manager import shell

    orig = shell.TabletManager._persist

    def _persist(self: Any, tablet_id: str, effect: Any) -> None:
        wrapper(orig, self, tablet_id, effect)
    p.setattr(shell.TabletManager, "_persist", _persist)


def wal_moved_before_superblock(p: Patcher) -> None:
    from revivify.impl.storage.layout import QDIR_WAL
    from revivify.impl.tserver.manager.core import Op

    def wrapper(orig: Any, self: Any, tablet_id: str, effect: Any) -> None:
        orig(self, tablet_id, effect)
        if effect.op is Op.COPY_SUPERBLOCK:
            # BUG: the WAL goes into the quarantine before the superblock says DELETED.
            layout = self.host.layout
            wal_dir = layout.wal_dir(tablet_id)
            if layout.disk.is_dir(wal_dir):
                qdir = layout.quarantine_dirs(tablet_id)[-1]
                layout.move_dir_durably(wal_dir, posixpath.join(qdir, QDIR_WAL))
    _wrap_persist(p, wrapper)


def cmeta_moved_not_copied(p: Patcher) -> None:
    from revivify.impl.tserver.manager.core import Op

    def wrapper(orig: Any, self: Any, tablet_id: str, effect: Any) -> None:
        orig(self, tablet_id, effect)
        if effect.op is Op.COPY_CMETA:
            # BUG: the cmeta is moved into the quarantine, not copied: the tombstone
            # forgets its term and vote.
            disk, path = self.host.disk, self.host.layout.cmeta_path(tablet_id)
            if disk.exists(path):
                disk.unlink(path)
                disk.fsync_dir(posixpath.dirname(path))
    _wrap_persist(p, wrapper)


def tombstone_forgets_last_opid(p: Patcher) -> None:
    from revivify.impl.tserver.durable import NO_OPID
    from revivify.impl.tserver.manager.core import Op

    def wrapper(orig: Any, self: Any, tablet_id: str, effect: Any) -> None:
        if effect.op is Op.MARK_DELETED:  # BUG: the DELETED superblock keeps no last OpId
            effect = attrs.evolve(effect, tombstone_last=NO_OPID)
        orig(self, tablet_id, effect)
    _wrap_persist(p, wrapper)


# ------------------------------------------------------------------------------ startup


def _wrap_classify(p: Patcher, change: Callable[[Any, Any], Any]) -> None:
    from revivify.impl.tserver.manager import shell

    orig = shell.TabletManager.classify

    def classify(self: Any, tablet_id: str) -> Any:
        return change(self, orig(self, tablet_id))
    p.setattr(shell.TabletManager, "classify", classify)


def startup_opens_copying(p: Patcher) -> None:
    from revivify.impl.tserver.durable import running
    from revivify.impl.tserver.manager.core import Case, Classified

    def change(self: Any, found: Any) -> Any:
        if found.case is Case.COPYING_TO_DELETED and found.durable.cmeta is not None:
            # BUG: an interrupted copy is opened as a replica.
            return Classified(Case.READY, running(found.durable.cmeta, (0, 0), None))
        return found
    _wrap_classify(p, change)


def startup_skips_roll_forward(p: Patcher) -> None:
    from revivify.impl.tserver.manager.core import Case, Classified

    def change(self: Any, found: Any) -> Any:
        if found.case is Case.ROLL_FORWARD:  # BUG: an interrupted deletion left as it is
            return Classified(Case.TOMBSTONE, found.durable)
        return found
    _wrap_classify(p, change)


# ------------------------------------------------------------------------------ copy


def merge_adopts_remote_vote(p: Patcher) -> None:
    from revivify.impl.storage.values import ConsensusMeta
    from revivify.impl.tserver.copy import download

    orig = download.merge_cmeta  # type: ignore[attr-defined]

    def merge_cmeta(local: Any, remote: Any) -> Any:
        merged = orig(local, remote)
        if merged.current_term == remote.current_term:  # BUG: the source's vote is ours
            return ConsensusMeta(merged.tablet_id, merged.current_term, remote.voted_for,
                                 merged.committed_config)
        return merged
    p.setattr(download, "merge_cmeta", merge_cmeta)


def stc_ignores_caller_term(p: Patcher) -> None:
    import msgspec

    from revivify.impl.tserver import api
    from revivify.impl.tserver.manager import core

    orig = core.LifecycleCore._start_copy

    def _start_copy(self: Any, slot: Any, ev: Any) -> Any:
        batch = orig(self, slot, ev)
        if not (isinstance(batch.refusal, api.CopyRefused)
                and batch.refusal.reason == "STALE_TERM"):
            return batch
        # BUG: the STALE_TERM check is skipped (the traced fact keeps the real term).
        batch = orig(self, slot, attrs.evolve(ev, caller_term=1 << 40))
        effects = tuple(
            attrs.evolve(e, fact=attrs.evolve(e.fact, args=msgspec.structs.replace(
                e.fact.args, caller_term=ev.caller_term)))
            if isinstance(e, core.LifecycleTrace) and e.fact.event in ("stc_accept", "stc_reject")
            else e for e in batch.effects)
        return attrs.evolve(batch, effects=effects)
    p.setattr(core.LifecycleCore, "_start_copy", _start_copy)


def tombstone_votes_without_last_opid(p: Patcher) -> None:
    from revivify.impl.consensus.log import RaftLog
    from revivify.impl.tserver.manager import voter

    orig = voter.TombstoneVoter.__init__

    def __init__(self: Any, manager: Any, tablet_id: str, durable: Any) -> None:
        orig(self, manager, tablet_id, durable)
        self.core.log = RaftLog(base_term=0, base_index=0)  # BUG: votes as an empty log
    p.setattr(voter.TombstoneVoter, "__init__", __init__)


# ------------------------------------------------------------------------------ storage


def wal_append_not_fsynced(p: Patcher) -> None:
    from revivify.impl.storage import wal

    def _write_and_sync(self: Any, active: Any, offset: int, data: bytes) -> None:
        active.file.pwrite(offset, data)  # BUG: acknowledged without fsync
    p.setattr(wal.Log, "_write_and_sync", _write_and_sync)


def cmeta_not_fsynced(p: Patcher) -> None:
    from revivify.impl.storage import metadata
    from revivify.impl.storage.metafile import encode_cmeta

    def write_cmeta(self: Any, cmeta: Any) -> None:
        path = self.layout.cmeta_path(cmeta.tablet_id)
        _write_without_fsync(self.disk, path, encode_cmeta(cmeta))  # BUG: no fsync
    p.setattr(metadata.MetadataStore, "write_cmeta", write_cmeta)


def torn_tail_is_corruption(p: Patcher) -> None:
    from revivify.impl.storage import wal
    from revivify.impl.storage.errors import WalCorrupt

    orig = wal._verify_log

    def _verify_log(disk: Any, wal_dir: str, tablet_id: str) -> Any:
        verified = orig(disk, wal_dir, tablet_id)
        last = verified.last
        if last is not None and last.footer is None and last.problem is not None \
                and not last.tail_is_zeros:
            # BUG: a torn last batch (a crash mid-write) is taken for corruption.
            raise WalCorrupt(last.path, last.data_end, f"torn batch: {last.problem.reason}")
        return verified
    p.setattr(wal, "_verify_log", _verify_log)


def late_master_create_obeyed(p: Patcher) -> None:
    from revivify.impl.tserver.manager import shell

    orig = shell.TabletManager.create

    async def create(self: Any, tablet_id: str, cmeta: Any, voters: list[str],
                     from_master: bool = False) -> None:
        # BUG: a master's create is taken for an operator's (the deleted ids not consulted).
        await orig(self, tablet_id, cmeta, voters, False)
    p.setattr(shell.TabletManager, "create", create)


def tombstone_answers_lost(p: Patcher) -> None:
    from revivify.impl.tserver import server

    def _heard_from(self: Any, uuid: str, address: str) -> None:
        return None  # BUG: where a Raft sender listens is not kept
    p.setattr(server.TabletServer, "_heard_from", _heard_from)


# ------------------------------------------------------------------------------ raft


def vote_reply_before_persist(p: Patcher) -> None:
    from revivify.impl.consensus import plan
    from revivify.impl.consensus.messages import VoteResponse

    orig = plan.send_points

    def send_points(rd: Any) -> tuple[int, ...]:
        points = orig(rd)
        # BUG: a vote's answer leaves before the vote is durable (and traced).
        return tuple(0 if isinstance(m, VoteResponse) and not m.pre_vote else q
                     for m, q in zip(rd.messages, points, strict=True))
    p.setattr(plan, "send_points", send_points)


def vote_not_persisted(p: Patcher) -> None:
    from revivify.contract.events import VoteArgs
    from revivify.impl.consensus import core

    def _vote_fact(self: Any, m: Any, *, granted: bool) -> None:
        fact = self._fact("vote_granted" if granted else "vote_denied", VoteArgs(
            candidate=m.src, t=m.term, cand_last_term=m.last_term,
            cand_last_index=m.last_index))
        self._emit(core.Step(fact))  # BUG: no cmeta write: the vote is not durable
    p.setattr(core.RaftCore, "_vote_fact", _vote_fact)


def commit_counts_old_terms(p: Patcher) -> None:
    from revivify.impl.consensus import core, quorum

    def _maybe_commit(self: Any) -> None:
        match = {u: pr.match for u, pr in self.progress.items()}
        match[self.me] = self.durable_index
        candidate = quorum.committed_index(self.voters(), match)
        if candidate > self.commit_index:  # BUG: no "of the leader's own term" (figure 8)
            self._advance_commit(candidate)
            if self._read_queue:
                self._start_read_rounds()
    p.setattr(core.RaftCore, "_maybe_commit", _maybe_commit)


def read_without_leadership_check(p: Patcher) -> None:
    from revivify.impl.consensus import core

    def _start_read_rounds(self: Any) -> None:
        if self.role is not core.Role.LEADER or not self._read_queue:
            return
        if not self.committed_in_term():
            return
        # BUG: answered at once, no heartbeat round confirms this node still leads.
        self._read_states.extend(core.ReadState(r, self.commit_index)
                                 for r in self._read_queue)
        self._read_queue.clear()
    p.setattr(core.RaftCore, "_start_read_rounds", _start_read_rounds)


def stale_leader_accepted(p: Patcher) -> None:
    from revivify.impl.consensus import core
    from revivify.impl.consensus.messages import AppendRequest

    orig = core.RaftCore._term_gate

    def _term_gate(self: Any, m: Any) -> bool:
        if isinstance(m, AppendRequest) and m.term < self.term \
                and self.role is core.Role.FOLLOWER:
            return True  # BUG: an old leader's entries are taken
        return bool(orig(self, m))
    p.setattr(core.RaftCore, "_term_gate", _term_gate)


def write_acked_before_commit(p: Patcher) -> None:
    from revivify.impl.tserver import replica

    orig = replica.Replica._after_batch

    def _after_batch(self: Any) -> None:
        orig(self)
        # BUG: a write is acknowledged once the leader's own WAL holds it (not a majority).
        durable = self.core.durable_index
        for index, (term, w) in list(self._writes.items()):
            if index <= durable and self.core.log.term_at(index) == term:
                del self._writes[index]
                w.set(_FakeApplied(index))
    p.setattr(replica.Replica, "_after_batch", _after_batch)


@attrs.frozen
class _FakeApplied:
    index: int
    ops_applied: int = 1
    duplicate: bool = False
    rejected: bool = False
    stale: bool = False
    error: str | None = None


MUTANTS: tuple[Mutant, ...] = (
    Mutant("deleted_superblock_not_fsynced",
           "deletion step 4 writes the DELETED superblock without fsync",
           "trace checker (startup after a crash contradicts delete_mark_deleted)",
           deleted_superblock_not_fsynced),
    Mutant("wal_moved_before_superblock",
           "the WAL is moved into the quarantine before the superblock is DELETED",
           "trace checker (startup finds a READY replica without its WAL)",
           wal_moved_before_superblock),
    Mutant("cmeta_moved_not_copied",
           "deletion step 5 moves the cmeta instead of copying it (tombstone amnesia)",
           "trace checker (a tombstone keeps its cmeta; term regression)",
           cmeta_moved_not_copied),
    Mutant("tombstone_forgets_last_opid",
           "the DELETED superblock records no last OpId",
           "trace checker (a tombstone keeps its last OpId)",
           tombstone_forgets_last_opid),
    Mutant("startup_opens_copying",
           "startup opens a COPYING replica instead of tombstoning it",
           "trace checker (startup case for a COPYING superblock)",
           startup_opens_copying),
    Mutant("startup_skips_roll_forward",
           "startup leaves an interrupted deletion's live WAL in place",
           "trace checker (startup ROLL_FORWARD required)",
           startup_skips_roll_forward),
    Mutant("merge_adopts_remote_vote",
           "the cmeta merge adopts the source's vote",
           "trace checker (copy_merge_cmeta result against the spec's merge)",
           merge_adopts_remote_vote),
    Mutant("stc_ignores_caller_term",
           "StartTabletCopy accepts a caller whose term is below the last logged term",
           "trace checker / lifecycle tests (STALE_TERM)",
           stc_ignores_caller_term),
    Mutant("tombstone_votes_without_last_opid",
           "a tombstone votes as if its log were empty",
           "trace checker (vote against the tombstone's last OpId) / lost write",
           tombstone_votes_without_last_opid),
    Mutant("wal_append_not_fsynced",
           "WAL appends are acknowledged without fsync",
           "trace checker / lost write after a machine crash",
           wal_append_not_fsynced),
    Mutant("cmeta_not_fsynced",
           "the cmeta (term, vote) is replaced without fsync",
           "trace checker (term regression after a machine crash)",
           cmeta_not_fsynced),
    Mutant("late_master_create_obeyed",
           "a master's CreateTablet of a tablet deleted here for good re-creates it",
           "trace checker (term regression after the late create)",
           late_master_create_obeyed),
    Mutant("tombstone_answers_lost",
           "a server keeps no address of a Raft sender its configs do not name",
           "the tombstone added back as a NON_VOTER is never copied back (NotHealed)",
           tombstone_answers_lost),
    Mutant("torn_tail_is_corruption",
           "WAL recovery takes a torn last batch for corruption",
           "storage crash tests / replica FAILED after a crash",
           torn_tail_is_corruption),
    Mutant("vote_reply_before_persist",
           "a vote's answer is sent before the vote is durable and traced",
           "trace checker (causality: the vote after the election it won)",
           vote_reply_before_persist),
    Mutant("vote_not_persisted",
           "a granted vote is never written to the cmeta",
           "trace checker (state after vote_granted) / double vote after a crash",
           vote_not_persisted),
    Mutant("commit_counts_old_terms",
           "the leader commits by counting replicas of an older term's entry (figure 8)",
           "Raft scenario tests / trace checker (commit term)",
           commit_counts_old_terms),
    Mutant("read_without_leadership_check",
           "a read is served without a heartbeat round confirming leadership",
           "stale-read check / Raft scenario tests",
           read_without_leadership_check),
    Mutant("stale_leader_accepted",
           "a follower takes AppendRequests from a lower term",
           "trace checker (append from a deposed leader) / Raft tests",
           stale_leader_accepted),
    Mutant("write_acked_before_commit",
           "a write is acknowledged once the leader's WAL holds it, before it commits",
           "lost write after the leader crashes",
           write_acked_before_commit),
)

BY_NAME: dict[str, Mutant] = {m.name: m for m in MUTANTS}
ENV = "REVIVIFY_IMPL_MUTANT"

__all__ = ["BY_NAME", "ENV", "MUTANTS", "Mutant", "Patcher"]
