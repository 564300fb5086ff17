"""After a kernel-made partition heals, Raft peers find each other again at once (issue 32).

Three tablet-server processes on 127.0.0.1 host one tablet; nftables rules
(kernel_partition.py) drop every loopback packet to or from their three RPC ports, so
every server is cut from every other and from the test's client, and no majority exists
anywhere. The cut is held for HOLD seconds: longer than TCP's retransmission back-off takes
to grow past 20 s (0.2 s doubling: 25 s after the first loss the next retransmission is
25 s away). Then the rules are removed and the test measures, from that moment:

* how long until a replica is LEADER in a term above the one before the cut (a new
  election: the old leader stepped down for want of a quorum). Target: two election
  timeouts, ELECTION_MAX each (the timeout is randomised up to twice the minimum);
* how long until the first put of a client that was connected to all three servers
  before the cut succeeds. Target: three election timeouts.

Before the fix, a Raft peer link was one long-lived connection nothing watched: after the
heal nothing flowed on it until the kernel's next retransmission (here about 20 s later),
and the test failed on the first bound (the report of issue 32 gives the figures).
"""

from __future__ import annotations

import pytest
import trio
from integration.helpers import assert_traces_clean, create_tablet, leader, state
from kernel_partition import cut, unavailable

from revivify.impl.client import ClientOptions, open_tablet_client
from revivify.impl.processes.tservers import ProcessCluster
from revivify.impl.rpc import Backoff, RpcError, open_rpc_client
from revivify.impl.rpc.address import parse_address
from revivify.impl.tserver import api

pytestmark = pytest.mark.timeout(300)

TABLET = "t-heal"
HOLD = 30.0  # seconds the partition lasts
TICK, ELECTION_TICKS = 0.05, 10  # the servers' defaults (impl/tserver/main.py)
ELECTION_MAX = 2 * ELECTION_TICKS * TICK  # the randomised timeout's upper end: 1 s
LEADER_BOUND = 2 * ELECTION_MAX
CLIENT_BOUND = 3 * ELECTION_MAX
# The client of the nemesis's workload: a call timeout of about an election timeout and a
# short backoff (the library's defaults are sized for real clusters: README, "Nemesis").
CLIENT = ClientOptions(max_attempts=1000, deadline=60.0, call_timeout=1.0,
                       backoff=Backoff(initial=0.05, max=0.25))


async def _role(address: str, uuid: str) -> api.ReplicaInfo | None:
    """One server's view of the tablet over a fresh connection, or None within 0.3 s."""
    host, port = parse_address(address)
    with trio.move_on_after(0.3):
        try:
            async with open_rpc_client(host, port, uuid, "heal-probe",
                                       app_errors=api.APP_ERRORS) as rpc:
                return await rpc.call(api.ADMIN_CONSENSUS_STATE, api.TabletRef(TABLET),
                                      api.ReplicaInfo)
        except RpcError:
            return None
    return None


def test_a_healed_partition_elects_and_serves_within_the_bounds(
        tmp_path: pytest.TempPathFactory) -> None:
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    with ProcessCluster(str(tmp_path), 3) as cluster:
        cluster.start_all()
        create_tablet(cluster, TABLET)
        leader(cluster, TABLET)
        term_before = max(state(cluster, i, TABLET).term for i in range(3))
        servers = [(s.address, s.uuid) for s in cluster.servers]
        ports = [s.port for s in cluster.servers]

        async def scenario() -> tuple[float, float]:
            async with open_tablet_client(cluster.addresses, TABLET, options=CLIENT) as client:
                await client.put(b"before", b"1")
                with cut(ports) as partition:
                    await trio.sleep(HOLD)
                    partition.heal()
                    healed = trio.current_time()
                leader_after = client_after = float("inf")

                async def find_leader() -> None:
                    nonlocal leader_after
                    while True:
                        for address, uuid in servers:
                            info = await _role(address, uuid)
                            if info is not None and info.role == "LEADER" \
                                    and info.term > term_before:
                                leader_after = trio.current_time() - healed
                                return
                        await trio.sleep(0.02)

                async def put() -> None:
                    nonlocal client_after
                    await client.put(b"after", b"2")
                    client_after = trio.current_time() - healed

                with trio.move_on_after(60):
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(find_leader)
                        nursery.start_soon(put)
                return leader_after, client_after

        leader_after, client_after = trio.run(scenario)
        print(f"\npartition of {HOLD:g}s healed: a leader after {leader_after:.2f}s "
              f"(bound {LEADER_BOUND:g}s), the client's first put after {client_after:.2f}s "
              f"(bound {CLIENT_BOUND:g}s)")
        assert leader_after <= LEADER_BOUND
        assert client_after <= CLIENT_BOUND
        for i in range(3):
            assert cluster.stop(i) == 0
        assert_traces_clean(cluster)
