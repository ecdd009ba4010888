"""tern as an A2A server: the task ``engine``, ``cards``, the bindings (``endpoint``),
``push`` notifications, the task ``store``, and ``runner`` (a task runs a tern agent
through ``runtime.ports.AgentPort``). It never imports the kernel."""
