"""A2A (Agent2Agent), both directions: one task model, three wire dialects (0.1/OpenFang,
0.3, 1.0), converted in sans-IO modules at this level (``model``, ``dialects``).

- ``client/``: discover external agents, send tasks, stream and poll results; they
  become ``a2a_*`` tools and ``remote`` agents. Below the kernel.
- ``server/``: cards, the task engine, the bindings, push notifications and the task
  store. Above the kernel, which it sees only through ``runtime.ports``.
"""
