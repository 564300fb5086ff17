"""Durable storage: disk seam (real and crash-simulating), server layout, metadata, WAL, blocks."""
