"""Raft consensus: a sans-I/O core plus the trio peer around it."""
