"""A minimal newline-JSON MCP echo server (the bench's peer). --sleep-ms N answers each
tools/call after N ms, in its own thread, so calls can overlap."""
import json
import sys
import threading
import time

sleep = float(sys.argv[sys.argv.index("--sleep-ms") + 1]) / 1000 if "--sleep-ms" in sys.argv else 0
lock = threading.Lock()


def send(msg):
    with lock:
        sys.stdout.write(json.dumps(msg) + "\n")
        sys.stdout.flush()


def answer(mid, args):
    time.sleep(sleep)
    send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": args.get("message", "")}]}})


for line in sys.stdin:
    m = json.loads(line)
    mid = m.get("id")
    p = m.get("params") or {}
    if m.get("method") == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": p["protocolVersion"],
                                                      "capabilities": {"tools": {}},
                                                      "serverInfo": {"name": "echo", "version": "1"}}})
    elif m.get("method") == "ping":
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
    elif m.get("method") == "tools/call":
        if sleep:
            threading.Thread(target=answer, args=(mid, p.get("arguments", {}))).start()
        else:
            answer(mid, p.get("arguments", {}))
