"""The kernel: agents, the tool registry and (later) the tool pipeline."""
