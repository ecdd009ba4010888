"""Masking known secret values in text: one implementation for log records and tool results.

A ``Redactor`` replaces every occurrence of each secret, case-sensitively, also in its
JSON-escaped forms (as it appears inside a JSON string, with and without non-ASCII
escaped), so a secret inside a JSON log line or tool result is caught too. Overlapping
and adjacent occurrences are merged into one mask, so no part of either secret survives.
Secrets shorter than ``min_len`` are ignored: masking ``"1234"`` or ``"true"``
everywhere would mangle text while protecting nothing.

Callers choose the mask and the minimum: the tool pipeline writes ``[redacted]`` for
secrets of 6 characters or more, the log ``********`` for 4 or more.
"""

from __future__ import annotations

import json
import re
from typing import Any
from collections.abc import Iterable

__all__ = ["MIN_SECRET_LEN", "REDACTED", "Redactor"]

MIN_SECRET_LEN = 6
REDACTED = "[redacted]"


class Redactor:
    """Replaces the given secrets with ``mask`` in text and in JSON-like data."""

    def __init__(self, secrets: Iterable[str], *, mask: str = REDACTED, min_len: int = MIN_SECRET_LEN) -> None:
        forms: set[str] = set()
        for secret in secrets:
            if isinstance(secret, str) and len(secret) >= min_len:
                forms.add(secret)
                forms.add(json.dumps(secret)[1:-1])  # as it appears inside a JSON string
                forms.add(json.dumps(secret, ensure_ascii=False)[1:-1])
        ordered = sorted(forms, key=lambda s: (-len(s), s))  # longest first
        self.mask = mask
        self.count = len(ordered)
        alternation = "|".join(map(re.escape, ordered))
        self._search = re.compile(alternation).search if ordered else None
        self._every = re.compile(f"(?=({alternation}))").finditer if ordered else None

    def redact(self, text: str) -> str:
        """``text`` with every occurrence of every secret replaced."""
        if self._search is None or self._search(text) is None:
            return text
        spans: list[list[int]] = []
        for match in self._every(text):  # type: ignore[misc]  # every start, overlaps too
            start, end = match.start(), match.start() + len(match.group(1))
            if spans and start <= spans[-1][1]:
                spans[-1][1] = max(spans[-1][1], end)
            else:
                spans.append([start, end])
        parts, last = [], 0
        for start, end in spans:
            parts.append(text[last:start])
            parts.append(self.mask)
            last = end
        parts.append(text[last:])
        return "".join(parts)

    def redact_obj(self, obj: Any) -> Any:
        """A copy of ``obj`` with secrets redacted in every string, dict keys included."""
        if self._search is None:
            return obj
        if isinstance(obj, str):
            return self.redact(obj)
        if isinstance(obj, dict):
            return {self.redact_obj(k): self.redact_obj(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return type(obj)(self.redact_obj(v) for v in obj)
        return obj
