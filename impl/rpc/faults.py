"""Test-only partitions in the RPC layer (off unless ``REVIVIFY_FAULT_FILE`` is set: see
impl/faultfile.py, which also says how the file looks).

A cut between servers A and B (their UUIDs) makes both ends drop every frame between them,
in both directions, on connections old and new: the client side never sends a call or a
cast addressed to the other end and drops a response from it; the server side drops a
request from the other end unread and unanswered, and a response to it. A call across a cut
therefore hangs until its caller's cancel scope ends it, as on a network that lost the
packets; no error says "partition". Connections still open (TCP to 127.0.0.1 is never cut),
so a lifted cut is noticed on the next frame. Clients whose UUID is in no cut (the
workload's) are unaffected.

``dropped(local, remote)`` is the only question the shells ask, and only behind an
``ACTIVE is not None`` test, so production (no fault file) pays one attribute test per
frame.
"""

from __future__ import annotations

from revivify.impl import faultfile


def dropped(local: str, remote: str) -> bool:
    """Whether a frame between servers `local` and `remote` is lost to an injected cut."""
    active = faultfile.ACTIVE
    return active is not None and active.current().cut(local, remote)


__all__ = ["dropped"]
