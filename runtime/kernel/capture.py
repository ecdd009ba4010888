"""Reading a child's pipe to its end with a bound on what is kept: the first bytes
(``Head``: a program's answer) or the last ones (``Tail``: where its error is). The rest
is counted and the text says how much was cut, so a flood costs nothing but the count.
``shell_exec`` and ``script_run`` read their programs' output through these."""

from __future__ import annotations

from typing import Any

__all__ = ["Head", "Tail"]

READ_BYTES = 65536


class Head:
    """A pipe read to its end, keeping its first ``cap`` bytes."""

    def __init__(self, cap: int, *, note: str = "cut at") -> None:
        self.cap, self.note = cap, note
        self.kept, self.total = bytearray(), 0

    async def drain(self, stream: Any) -> None:
        while chunk := await stream.receive_some(READ_BYTES):
            self.total += len(chunk)
            room = self.cap - len(self.kept)
            if room > 0:
                self.kept += chunk[:room]

    def text(self) -> str:
        text = self.kept.decode("utf-8", errors="replace")
        if self.total > len(self.kept):
            text += f"\n[{self.note} {self.cap} bytes of {self.total}]"
        return text


class Tail(Head):
    """A pipe read to its end, keeping its last ``cap`` bytes."""

    async def drain(self, stream: Any) -> None:
        while chunk := await stream.receive_some(READ_BYTES):
            self.total += len(chunk)
            self.kept += chunk
            if len(self.kept) > self.cap:
                del self.kept[: len(self.kept) - self.cap]

    def text(self) -> str:
        text = self.kept.decode("utf-8", errors="replace")
        return f"[{self.total - len(self.kept)} earlier bytes cut]\n{text}" if self.total > len(self.kept) else text
