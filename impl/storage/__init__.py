"""Durable storage: the disk seam and the real disk, server layout, metadata, WAL, blocks.

The crash-simulating disk (SimDisk) is a test double and lives in revivify.impl.testing.
"""
