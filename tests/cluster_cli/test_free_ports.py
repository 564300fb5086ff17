"""Ports for a local cluster are picked together (impl/processes/control.py ``free_ports``):
a port picked and released is free again, so picking one at a time may hand out the same
port twice, and the second master then refused to start ("--masters lists an address
twice", seen once in a fresh clone's CI)."""

from __future__ import annotations

import socket
from typing import ClassVar

import pytest

from revivify.impl.processes import control
from revivify.impl.processes.masters import MasterProcesses


class _ForgetfulKernel:
    """A socket whose bind to port 0 picks the lowest port not bound at this moment: the
    repetition a real kernel may make, made every time."""

    bound: ClassVar[set[int]] = set()  # ports bound now, over every instance

    def __init__(self, *args: object) -> None:
        self.port = 0

    def bind(self, address: tuple[str, int]) -> None:
        self.port = next(p for p in range(40000, 41000) if p not in self.bound)
        self.bound.add(self.port)

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def close(self) -> None:
        self.bound.discard(self.port)

    def __enter__(self) -> _ForgetfulKernel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def test_ports_picked_together_are_distinct_even_when_the_kernel_repeats(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "socket", _ForgetfulKernel)
    assert [control.free_port() for _ in range(3)] == [40000] * 3  # one at a time: repeats
    assert control.free_ports(5) == [40000, 40001, 40002, 40003, 40004]


def test_a_clusters_masters_get_distinct_ports(tmp_path: object,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "socket", _ForgetfulKernel)
    cluster = MasterProcesses(str(tmp_path), masters=3, tservers=1)
    assert sorted(m.port for m in cluster.masters) == [40000, 40001, 40002]


def test_real_ports_are_free_and_distinct() -> None:
    ports = control.free_ports(20)
    assert len(set(ports)) == 20
    for port in ports:  # each can be bound now
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", port))
