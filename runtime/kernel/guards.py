"""The pure guards of the tool pipeline: truncation, redaction, loop guard, taint.

All are sans-IO and cheap on the hot path; the pipeline wires them around a call.

Truncation
    ``truncate`` keeps at most ``limit`` characters, cut at the last newline if one is
    in the last 20% of the window (else a hard cut), and appends
    ``\\n[truncated N characters]`` where N counts every character removed. The result
    can exceed ``limit`` by the length of that note only.

Redaction
    ``Redactor`` (``runtime/redact.py``, shared with the log) replaces every occurrence
    of a configured secret with ``[redacted]``, case-sensitively, also in its
    JSON-escaped form. Secrets shorter than 6 characters are ignored. Which values
    count as secrets is decided here: ``secret_env_values`` picks them from the
    environment by name.

Loop guard
    ``LoopGuard`` sees each call before it runs. A call is keyed by tool name and the
    canonical JSON of its arguments (sorted keys, compact), so key order does not
    matter. Identical calls: warn at the 3rd, block at the 5th. Ping-pong: warn when
    the last four calls are A,B,A,B (A != B), block when the last six are A,B,A,B,A,B.
    A run may make at most ``max_calls`` calls; the next ones are blocked, with
    ``cap_reason`` when the cap is an agent's own budget (``kernel.budgets``), which
    ``on_cap`` hears of. A blocked call is not counted and not remembered, so the
    counts reflect what actually ran.

Taint
    ``TaintTracker`` records the text of untrusted results (network-facing tools: MCP
    tools, ``web_fetch``, A2A replies) and says whether a later call's arguments
    *contain* any of it. Precisely:

    normalise(s)
        remove U+200B..U+200D, U+2060, U+FEFF, U+00AD and NUL; then ``str.casefold``;
        then replace every run of whitespace (``\\s+``) with one space.
    contain
        the arguments contain an untrusted result R when some string in the arguments
        (any value or dict key, at any depth) has a substring of at least ``min_len``
        (default 16) characters that is also a substring of R, both compared after
        normalising. Lengths are counted in normalised characters, so a verbatim copy
        counts unless normalising shrinks it below ``min_len`` (a copy padded with
        runs of whitespace or invisible characters).

    Known limits, by design (this tracks verbatim data flow, it is not a semantic
    filter): paraphrase, translation, re-encoding (base64, URL or HTML escapes,
    homoglyphs) and content split into pieces shorter than ``min_len``, or across two
    argument strings, are not detected. Numbers are not strings and are not checked.
    Memory is bounded: at most ``max_chars`` (default 1,000,000) normalised characters
    of untrusted text are kept per run, about 25 MB with the index in the worst case
    (random text; natural text repeats and costs less); when more arrives the oldest
    results are dropped whole (down to 3/4 of the bound), so content seen long ago in
    a very chatty run may stop counting as untrusted.

    How: every ``k = min_len // 2``-th position of the untrusted text is indexed by
    the ``w = min_len - k + 1`` characters that start there. Any common substring of
    ``min_len`` characters covers one such anchor window entirely, so scanning every
    window of ``w`` characters of an argument finds it; each hit is then confirmed by
    extending the match left and right. Adding costs O(n / k), finding O(m) dictionary
    look-ups for m argument characters. Should an adversarial text make confirmation
    too expensive (more than 200,000 candidate checks in one ``find``), ``find``
    fails closed and reports the arguments as tainted.
"""

from __future__ import annotations

import bisect
import fnmatch
import re
from collections import deque
from typing import Any, Literal, NamedTuple
from collections.abc import Callable, Iterable, Iterator, Mapping

import msgspec

from runtime.redact import REDACTED, Redactor

__all__ = [
    "DEFAULT_TRUNCATE",
    "truncate",
    "REDACTED",
    "Redactor",
    "SECRET_ENV_PATTERNS",
    "secret_env_values",
    "Verdict",
    "LoopGuard",
    "Taint",
    "TaintTracker",
    "normalize",
    "SENSITIVE_SINKS",
    "is_sensitive_sink",
    "is_untrusted_source",
]

# -- truncation ---------------------------------------------------------------------

DEFAULT_TRUNCATE = 50_000


def truncate(text: str, limit: int = DEFAULT_TRUNCATE) -> str:
    """``text`` cut to ``limit`` characters on a line boundary, with a visible note."""
    if len(text) <= limit:
        return text
    if limit < 0:
        raise ValueError("limit must be >= 0")
    cut = text.rfind("\n", 0, limit + 1)
    if cut < limit - limit // 5:
        cut = limit  # no newline in the last 20% of the window: hard cut
    return f"{text[:cut]}\n[truncated {len(text) - cut} characters]"


# -- redaction ----------------------------------------------------------------------

SECRET_ENV_PATTERNS = ("*KEY*", "*TOKEN*", "*SECRET*", "*PASSWORD*", "*PASSWD*", "*CREDENTIAL*")


def secret_env_values(environ: Mapping[str, str], names_patterns: Iterable[str] = SECRET_ENV_PATTERNS,
                      extra_names: Iterable[str] = ()) -> list[str]:
    """Values of environment variables whose names look secret (fnmatch, any case).

    Errs towards redacting: ``KEYBOARD_LAYOUT`` matches ``*KEY*``. Harmless for short
    values, which ``Redactor`` ignores anyway.
    """
    patterns = [p.upper() for p in names_patterns]
    extra = {n.upper() for n in extra_names}
    values: dict[str, None] = {}
    for name, value in environ.items():
        upper = name.upper()
        if value and (upper in extra or any(fnmatch.fnmatchcase(upper, p) for p in patterns)):
            values[value] = None
    return list(values)


# -- loop guard ---------------------------------------------------------------------

Action = Literal["ok", "warn", "block"]


class Verdict(NamedTuple):
    """What to do with a call: run it, run it and tell the model, or refuse it."""

    action: Action
    reason: str = ""


_OK = Verdict("ok")
_encode = msgspec.json.Encoder(order="sorted").encode


def _call_key(tool: str, arguments: Any) -> bytes:
    try:
        canonical = _encode(arguments)
    except (TypeError, ValueError, msgspec.EncodeError):
        canonical = repr(arguments).encode()
    return tool.encode() + b"\0" + canonical


class LoopGuard:
    """Spots a run that is going round in circles, one per run."""

    def __init__(self, warn_at: int = 3, block_at: int = 5, max_calls: int = 50) -> None:
        self.warn_at, self.block_at, self.max_calls = warn_at, block_at, max_calls
        self.cap_reason = ""  # what a call past max_calls is told, when the cap is not the default one
        self.on_cap: Callable[[], None] | None = None  # told of each call refused for max_calls
        self.calls = 0
        self._counts: dict[bytes, int] = {}
        self._recent: deque[tuple[bytes, str]] = deque(maxlen=6)

    def check(self, tool: str, arguments: Any) -> Verdict:
        """The verdict on the next call; counts it unless it is blocked."""
        if self.calls >= self.max_calls:
            if self.on_cap is not None:
                self.on_cap()
            return Verdict("block", self.cap_reason or f"this run has already made {self.max_calls} tool calls, "
                                                       "the limit; stop calling tools and answer with what you have")
        key = _call_key(tool, arguments)
        seen = self._counts.get(key, 0) + 1
        if seen >= self.block_at:
            return Verdict("block", f"you called {tool} with the same arguments {seen} times; the result will "
                                    "not change — use the result you have or try something else")
        recent = self._recent
        if len(recent) >= 5 and _alternates(recent, key, 6):
            other = recent[-1][1]
            return Verdict("block", f"you are alternating between {tool} and {other} with the same arguments "
                                    "(3 rounds); the results will not change — use them or try something else")
        self.calls += 1
        self._counts[key] = seen
        warn = len(recent) >= 3 and _alternates(recent, key, 4)
        other = recent[-1][1] if warn else ""
        recent.append((key, tool))
        if seen >= self.warn_at:
            return Verdict("warn", f"you have called {tool} with the same arguments {seen} times; the result "
                                   "will not change — use the result you have or try something else")
        if warn:
            return Verdict("warn", f"you are alternating between {tool} and {other} with the same arguments; "
                                   "the results will not change — use them or try something else")
        return _OK


def _alternates(recent: deque[tuple[bytes, str]], key: bytes, n: int) -> bool:
    """Whether the last ``n - 1`` remembered calls plus ``key`` go A,B,A,B,... (A != B)."""
    keys = [k for k, _ in list(recent)[-(n - 1):]] + [key]
    a, b = keys[0], keys[1]
    return a != b and all(k == (a if i % 2 == 0 else b) for i, k in enumerate(keys))


# -- taint --------------------------------------------------------------------------

_INVISIBLE = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad\x00"))
_SPACES = re.compile(r"\s+")
_SEPARATOR = "\x00"  # between results in the buffer; normalize() removes it from text
_CHECK_BUDGET = 200_000


def normalize(text: str) -> str:
    """The form taint compares: no invisible characters, casefolded, single spaces."""
    return _SPACES.sub(" ", text.translate(_INVISIBLE).casefold())


class Taint(NamedTuple):
    """Untrusted content found in arguments: whose, where, and a piece of it."""

    source: str
    path: str
    excerpt: str


class TaintTracker:
    """Untrusted text seen in a run, and whether call arguments copy from it."""

    def __init__(self, min_len: int = 16, max_chars: int = 1_000_000) -> None:
        if min_len < 2:
            raise ValueError("min_len must be >= 2")
        self.min_len, self.max_chars = min_len, max_chars
        self._step = min_len // 2
        self._width = min_len - self._step + 1
        self._results: deque[tuple[str, str]] = deque()  # (source, normalised text), oldest first
        self._reset_index()

    def _reset_index(self) -> None:
        self._chunks: list[str] = []  # the buffer: each result followed by a separator
        self._joined = ""
        self._length = 0
        self._starts: list[int] = []  # buffer offset of each result, for bisect
        self._sources: list[str] = []
        self._index: dict[str, int | list[int]] = {}
        self._seen: set[int] = set()  # hashes of anchor neighbourhoods already indexed

    @property
    def size(self) -> int:
        """Normalised characters of untrusted text currently kept."""
        return sum(len(text) for _, text in self._results)

    def add_untrusted(self, text: str, source: str) -> None:
        """Remember the text of an untrusted result (``source``: e.g. the tool name)."""
        norm = normalize(text)
        if len(norm) < self.min_len:
            return
        if len(norm) > self.max_chars:
            norm = norm[-self.max_chars:]  # only the newest part of a giant result fits
        self._results.append((source, norm))
        total = self.size
        if total > self.max_chars:
            while total > self.max_chars * 3 // 4 and len(self._results) > 1:
                total -= len(self._results.popleft()[1])
            self._reset_index()
            for old_source, old in self._results:
                self._append(old, old_source)
        else:
            self._append(norm, source)

    def _append(self, norm: str, source: str) -> None:
        base = self._length
        self._starts.append(base)
        self._sources.append(source)
        self._chunks.append(norm + _SEPARATOR)
        self._length += len(norm) + 1
        index, seen, step, width = self._index, self._seen, self._step, self._width
        slack = self.min_len - width
        padded = _SEPARATOR * slack + norm + _SEPARATOR * slack
        for offset in range(0, len(norm) - width + 1, step):
            # An anchor whose neighbourhood was indexed before would confirm exactly the
            # same matches: skip it, so repetitive text does not grow the candidate lists.
            around = hash(padded[offset:offset + width + 2 * slack])
            if around in seen:
                continue
            seen.add(around)
            gram = norm[offset:offset + width]
            held = index.get(gram)
            if held is None:
                index[gram] = base + offset
            elif type(held) is int:
                index[gram] = [held, base + offset]
            else:
                held.append(base + offset)

    def _text(self) -> str:
        if len(self._chunks) > 1 or (self._chunks and not self._joined):
            self._joined = "".join(self._chunks)
            self._chunks = [self._joined]
        return self._joined

    def find(self, arguments: Any) -> Taint | None:
        """The first untrusted result whose content the arguments contain, or None."""
        if not self._index:
            return None
        budget = [_CHECK_BUDGET]
        for path, value in _strings(arguments, "arguments"):
            if len(value) < self.min_len:
                continue
            found = self._find_in(normalize(value), path, budget)
            if found is not None:
                return found
        return None

    def _find_in(self, arg: str, path: str, budget: list[int]) -> Taint | None:
        width, need, index = self._width, self.min_len, self._index
        if len(arg) < need:
            return None
        text = None
        for j in range(len(arg) - width + 1):
            held = index.get(arg[j:j + width])
            if held is None:
                continue
            if text is None:
                text = self._text()
            for q in (held,) if type(held) is int else held:
                budget[0] -= 1
                if budget[0] < 0:
                    return Taint(self._source_at(q), path, "(too many partial matches to check; assumed tainted)")
                start = _confirm(arg, j, text, q, width, need)
                if start is not None:
                    return Taint(self._source_at(q), path, arg[start:start + need])
        return None

    def _source_at(self, position: int) -> str:
        return self._sources[bisect.bisect_right(self._starts, position) - 1]


def _confirm(arg: str, j: int, text: str, q: int, width: int, need: int) -> int | None:
    """Where in ``arg`` a common run of ``need`` characters around the anchor starts."""
    slack = need - width
    left = 0
    while left < slack and j - left > 0 and q - left > 0 and arg[j - left - 1] == text[q - left - 1]:
        left += 1
    right = 0
    end_a, end_t = j + width, q + width
    while left + right < slack and end_a + right < len(arg) and end_t + right < len(text) \
            and arg[end_a + right] == text[end_t + right]:
        right += 1
    return j - left if left + right >= slack else None


def _strings(obj: Any, path: str, depth: int = 0) -> Iterator[tuple[str, str]]:
    """Every string in a JSON-like value, dict keys included, with its path."""
    if isinstance(obj, str):
        yield path, obj
    elif depth > 64:
        yield path, repr(obj)  # too deep to walk: still check its text
    elif isinstance(obj, dict):
        for key, value in obj.items():
            if isinstance(key, str):
                yield f"{path} (key)", key
            yield from _strings(value, f"{path}.{key}", depth + 1)
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            yield from _strings(value, f"{path}[{i}]", depth + 1)


# -- sinks and sources --------------------------------------------------------------

SENSITIVE_SINKS = frozenset({"shell_exec", "file_write"})
NETWORK_TOOLS = frozenset({"web_fetch", "agent_send",
                           # an upstream MCP server's resources and prompts (kernel/tools_mcp.py)
                           "mcp_resources_list", "mcp_resource_read", "mcp_prompts_list", "mcp_prompt_get"})


def is_sensitive_sink(tool_name: str, *, remote_agent: bool = False) -> bool:
    """Whether untrusted content in this call's arguments needs the policy's consent:
    ``shell_exec``, ``file_write``, and anything sent to a remote agent (``agent_send``
    to a remote one, the ``a2a_*`` tools)."""
    return tool_name in SENSITIVE_SINKS or (remote_agent and tool_name == "agent_send") or tool_name.startswith("a2a_")


def is_untrusted_source(tool_name: str, *, mcp: bool = False) -> bool:
    """Whether this tool's results come from the network: MCP tools, ``web_fetch``,
    and A2A replies (``agent_send``, the ``a2a_*`` tools of external agents)."""
    return mcp or tool_name in NETWORK_TOOLS or tool_name.startswith("a2a_")
