"""RPC: length-prefixed frames over TCP, codec, typed errors."""
