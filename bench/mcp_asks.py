"""What a 2026-07-28 ask round costs the server without I/O: each leg checks the
client's answers, opens (HMAC-verifies, spends) the previous ``requestState`` and seals
the next (``runtime/mcp/server/ask_call.py``). A two-round form ask, three legs per call.

    .venv/bin/python bench/mcp_asks.py [--calls 20000]
"""

from __future__ import annotations

import argparse
import time

from runtime.config import McpAsk, McpAskQuestion
from runtime.mcp.server.ask_call import AskStates, ask_modern
from runtime.mcp.server.asks import Ask
from runtime.mcp.server.mrtr import Mrtr

FORM = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
CAPABILITIES = {"elicitation": {}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20000)
    calls = parser.parse_args().calls
    ask = Ask(McpAsk(name="t", questions=[
        McpAskQuestion(key="a", kind="form", message="Name?", schema=FORM),
        McpAskQuestion(key="b", kind="form", round=2, message="And yours, {a.name}?", schema=FORM)]))
    states = AskStates(Mrtr(60))
    started = time.perf_counter()
    for _ in range(calls):
        first = ask_modern(ask, states, {}, {}, CAPABILITIES, "c")["result"]
        second = ask_modern(ask, states, {}, {"inputResponses": {"a": {"action": "accept", "content": {"name": "x"}}},
                                              "requestState": first["requestState"]}, CAPABILITIES, "c")["result"]
        done = ask_modern(ask, states, {}, {"inputResponses": {"b": {"action": "accept", "content": {"name": "y"}}},
                                            "requestState": second["requestState"]}, CAPABILITIES, "c")
        assert "answers" in done
    elapsed = time.perf_counter() - started
    print(f"{calls} asks of three legs: {elapsed:.2f} s, {elapsed / calls / 3 * 1e6:.1f} us per leg "
          f"(a state is {len(second['requestState'])} characters)")


if __name__ == "__main__":
    main()
