"""The kernel's ``ContentPort``: workspace files through the file tools' safe open, in a
worker thread, and requests to connected MCP servers through the supervisor."""

from __future__ import annotations

from typing import Any

import trio

from runtime.kernel.tools_files import list_paths, read_bytes, stamp

__all__ = ["KernelContent"]


class KernelContent:
    def __init__(self, supervisor: Any) -> None:
        self.supervisor = supervisor

    async def read_file(self, workspace: str, path: str, max_bytes: int) -> bytes:
        return await trio.to_thread.run_sync(read_bytes, workspace, path, max_bytes, abandon_on_cancel=True)

    async def list_files(self, workspace: str, limit: int) -> list[str]:
        return await trio.to_thread.run_sync(list_paths, workspace, limit, abandon_on_cancel=True)

    async def file_stamp(self, workspace: str, path: str) -> Any:
        return await trio.to_thread.run_sync(stamp, workspace, path, abandon_on_cancel=True)

    async def upstream_settled(self) -> None:
        await self.supervisor.wait_settled()

    def upstream_capabilities(self, server: str) -> dict[str, Any] | None:
        return self.supervisor.capabilities(server)

    async def upstream_request(self, server: str, method: str, params: dict[str, Any] | None = None) -> Any:
        return await self.supervisor.request(server, method, params)
