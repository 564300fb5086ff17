"""Client library used by the CLI and workloads."""
