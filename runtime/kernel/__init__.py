"""The kernel: agents, the tool registry and the one tool pipeline every caller goes
through, the built-in tools, the audit log, conversations and the event bus.

It imports the protocol clients (its tool sources) and is seen by the protocol servers
only through ``runtime.ports``; ``runtime.host`` wires the two.
"""
