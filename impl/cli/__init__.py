"""The revivify command line (trio-based)."""
