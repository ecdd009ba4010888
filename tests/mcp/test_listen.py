"""``subscriptions/listen`` (2026-07-28) held open by ``McpClient.listen``: against the
test server's modern mode, a stream that ends is opened again after a backoff, each
acknowledgement and list_changed reaches the notification handler, and a server that
refuses the method is not asked again. The supervisor's use of it (a tool added at run
time reaching the tool list) is tested against the official SDK server in
test_real_peers_http.py."""

from __future__ import annotations

import time

import trio

from runtime.mcp.client.client import McpClient


async def test_a_listen_stream_that_ends_is_opened_again_with_backoff(fake_entry, nursery):
    heard: list[str] = []
    client = await McpClient.connect(fake_entry("--modern-listen", "3"), nursery,
                                     on_notification=lambda method, params: heard.append(method))
    assert client.info.era == "modern" and client.listens() == {"toolsListChanged": True}
    started = time.monotonic()
    nursery.start_soon(lambda: client.listen(backoff_secs=0.05, backoff_max_secs=0.2))
    with trio.fail_after(10):
        while heard.count("notifications/subscriptions/acknowledged") < 4:
            await trio.sleep(0.01)
    # three ended streams: waits of 0.05, 0.1 and 0.2 s before the 2nd, 3rd and 4th listen
    assert time.monotonic() - started >= 0.3
    await trio.sleep(0.5)
    assert (await client.call_tool("listens")).text() == "4"  # the fourth stays open: no more
    await client.call_tool("grow")
    with trio.fail_after(5):
        while "notifications/tools/list_changed" not in heard:
            await trio.sleep(0.01)
    await client.aclose()


async def test_a_server_that_refuses_listen_is_not_asked_again(fake_entry, nursery):
    client = await McpClient.connect(fake_entry("--modern-listen", "0", "--no-listen"), nursery)
    with trio.fail_after(5):
        await client.listen(backoff_secs=0.01)  # returns: -32601 means there is nothing to listen to
    assert (await client.call_tool("listens")).text() == "1"
    await client.aclose()


async def test_a_handshake_era_server_needs_no_listen(fake_entry, nursery):
    client = await McpClient.connect(fake_entry(), nursery)
    assert client.info.era == "handshake" and client.listens() == {}
    with trio.fail_after(1):
        await client.listen()
    await client.aclose()
