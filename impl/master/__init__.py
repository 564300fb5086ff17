"""Master: catalog, heartbeats, background tasks, placement policies."""
