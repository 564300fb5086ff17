"""revivify.impl: the real system (storage, RPC, consensus, tablet servers, masters, CLI).

Never imports revivify.spec: the implementation and the spec meet only in the trace
contract (traces/schema.json), so that replaying traces checks one against the other.
"""
