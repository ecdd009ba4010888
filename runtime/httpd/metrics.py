"""Prometheus metrics in text exposition format 0.0.4, with no dependency, sans-IO.

Why our own: the server records every request, so recording has to be a few dict
lookups and list increments (series in nested dicts keyed by label value, so no key
tuple is built; bucket found by bisect), and a scrape only ever needs a handful of
families. ``render()`` builds the text; serving it is the caller's business.

Label values from a request are mapped to a closed set before they get here: the
route is its template (or "(unmatched)"), the status is ours, and the method goes
through ``method_label`` (a known method, else "other"): a junk method up to the
header limit long, once a series, made a scrape megabytes. Other label values still
come from the outside (tool names), so every family also holds at most
``max_series`` label sets. New ones past that fold into one
series whose label values are all ``"other"``, and
``tern_metrics_dropped_series_total{family}`` counts the folded observations: a
flood of junk cannot grow memory, and it shows.

Format reference: https://prometheus.io/docs/instrumenting/exposition_formats/
"""

from __future__ import annotations

import math
import re
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable

from runtime import __version__

__all__ = ["CONTENT_TYPE", "DURATION_BUCKETS", "MAX_SERIES", "Metrics", "method_label"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
MAX_SERIES = 1_000
OTHER = "other"

_METHODS = {m: m for m in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE")}


def method_label(method: str) -> str:
    """The ``method`` label for an HTTP method: one of the standard ones, else "other"."""
    return _METHODS.get(method, OTHER)


_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
_NBUCKETS = len(DURATION_BUCKETS)
_LE = [repr(bound) for bound in DURATION_BUCKETS] + ["+Inf"]
# Imported early at startup, so close enough to when the process started.
_IMPORTED_AT = time.time()

GaugeSource = Callable[[], Iterable[tuple[tuple[str, ...], float]]]


def _escape_label(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _fmt(value: float) -> str:
    """A sample value: integers as such, floats round-trip, and the format's
    spellings of infinity and NaN."""
    if type(value) is int:
        return str(value)
    value = float(value)
    if math.isfinite(value):
        return repr(value)
    if math.isnan(value):
        return "NaN"
    return "+Inf" if value > 0 else "-Inf"


def _labels(names: tuple[str, ...], values: Iterable[object]) -> str:
    return ",".join(f'{n}="{_escape_label(str(v))}"' for n, v in zip(names, values))


class _Family:
    """One metric family: its metadata and its series.

    Series live in nested dicts, one level a label (``route -> method -> status ->
    count``), so recording hashes strings, whose hashes are cached, and builds no key
    tuple. A histogram has one label and maps it to ``_new_histogram()`` state.
    ``size`` counts the series admitted, not the "other" one.
    """

    __slots__ = ("name", "help", "type", "labels", "series", "size")

    def __init__(self, name: str, help: str, type: str, labels: tuple[str, ...]) -> None:
        self.name = name
        self.help = help
        self.type = type
        self.labels = labels
        self.series: dict = {}
        self.size = 0

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {_escape_help(self.help)}", f"# TYPE {self.name} {self.type}"]

    def samples(self) -> list:
        """``(label values as strings, value or state)`` for every series, sorted."""
        out: list = []
        _flatten(self.series, len(self.labels), (), out)
        out.sort()
        return out


def _flatten(tree: dict, depth: int, prefix: tuple[str, ...], out: list) -> None:
    if depth == 1:
        out.extend((prefix + (str(k),), v) for k, v in tree.items())
        return
    for k, subtree in tree.items():
        _flatten(subtree, depth - 1, prefix + (str(k),), out)


def _new_histogram() -> list:
    """Per-bucket counts (not cumulative; the last is +Inf), then the sum."""
    return [0] * (_NBUCKETS + 1) + [0.0]


class Metrics:
    """Request and tool-call counters and histograms, plus gauges (and counters kept
    elsewhere) read at scrape."""

    def __init__(self, *, max_series: int = MAX_SERIES, start_time: float | None = None) -> None:
        if max_series < 1:
            raise ValueError(f"max_series must be at least 1, not {max_series!r}")
        self._max_series = max_series
        self._start_time = _IMPORTED_AT if start_time is None else start_time
        self._requests = _Family(
            "tern_http_requests_total",
            "HTTP requests answered, by route template, method and status.",
            "counter",
            ("route", "method", "status"),
        )
        self._request_seconds = _Family(
            "tern_http_request_duration_seconds",
            "Time from request head to the end of the response, by route template.",
            "histogram",
            ("route",),
        )
        self._tools = _Family(
            "tern_tool_calls_total",
            "Tool calls, by tool and outcome.",
            "counter",
            ("tool", "outcome"),
        )
        self._tool_seconds = _Family(
            "tern_tool_call_duration_seconds",
            "Tool call duration, by tool.",
            "histogram",
            ("tool",),
        )
        self._dropped = _Family(
            "tern_metrics_dropped_series_total",
            "Observations folded into an \"other\" series (or gauge samples left out) "
            "because a family reached its series limit.",
            "counter",
            ("family",),
        )
        self._source_errors = _Family(
            "tern_metrics_gauge_source_errors_total",
            "Scrapes at which a gauge's source raised or gave malformed samples.",
            "counter",
            ("gauge",),
        )
        self._families = {
            f.name: f
            for f in (self._requests, self._request_seconds, self._tools, self._tool_seconds)
        }
        for name in self._families:
            self._dropped.series[name] = 0
        self._gauges: dict[str, tuple[_Family, GaugeSource]] = {}
        # The hot path's dicts, bound once.
        self._request_counts = self._requests.series
        self._request_hists = self._request_seconds.series
        self._tool_counts = self._tools.series
        self._tool_hists = self._tool_seconds.series

    # --- recording (hot path) ----------------------------------------------------

    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None:
        """Count one answered request and its duration (``route`` is the template)."""
        try:
            self._request_counts[route][method][status] += 1
        except KeyError:
            self._count_new(self._requests, (route, method, status))
        try:
            hist = self._request_hists[route]
        except KeyError:
            hist = self._histogram_new(self._request_seconds, route)
        hist[bisect_left(DURATION_BUCKETS, seconds)] += 1
        hist[-1] += seconds

    def observe_tool_call(self, tool: str, outcome: str, seconds: float) -> None:
        """Count one tool call (``outcome`` e.g. ok, error, timeout) and its duration."""
        try:
            self._tool_counts[tool][outcome] += 1
        except KeyError:
            self._count_new(self._tools, (tool, outcome))
        try:
            hist = self._tool_hists[tool]
        except KeyError:
            hist = self._histogram_new(self._tool_seconds, tool)
        hist[bisect_left(DURATION_BUCKETS, seconds)] += 1
        hist[-1] += seconds

    def _count_new(self, family: _Family, values: tuple) -> None:
        """Count a label set the hot path did not find: a new series while the family
        has room, else one more in the all-"other" series."""
        if family.size < self._max_series:
            family.size += 1
        else:
            self._dropped.series[family.name] += 1
            values = (OTHER,) * len(values)
        node = family.series
        for value in values[:-1]:
            node = node.setdefault(value, {})
        node[values[-1]] = node.get(values[-1], 0) + 1

    def _histogram_new(self, family: _Family, value: str) -> list:
        """The state to record a new label value in: its own while the family has
        room, else the "other" series'."""
        if family.size < self._max_series:
            family.size += 1
            hist = family.series[value] = _new_histogram()
            return hist
        self._dropped.series[family.name] += 1
        hist = family.series.get(OTHER)
        if hist is None:
            hist = family.series[OTHER] = _new_histogram()
        return hist

    def totals(self) -> dict[str, int]:
        """Monotonic totals for the dashboard's charts: requests, those answered 5xx, tool
        calls, those that did not end "ok" (a walk of at most ``max_series`` series; the
        "other" series, whose labels are lost, counts in the totals only)."""
        requests = [(status, n) for by_method in self._request_counts.values()
                    for by_status in by_method.values() for status, n in by_status.items()]
        tools = [(outcome, n) for by_outcome in self._tool_counts.values() for outcome, n in by_outcome.items()]
        return {"http_requests": sum(n for _, n in requests),
                "http_errors": sum(n for status, n in requests if status != OTHER and int(status) >= 500),
                "tool_calls": sum(n for _, n in tools),
                "tool_errors": sum(n for outcome, n in tools if outcome not in ("ok", OTHER))}

    # --- counters of the kernel's own ------------------------------------------

    def add_counter(self, name: str, help: str, labels: tuple[str, ...]) -> Callable[..., None]:
        """A counter family of the caller's (approvals by outcome, say); returns the
        function that counts one, called with the label values. Bounded like every
        family: past ``max_series`` label sets, counts go to the "other" series."""
        if not _METRIC_NAME.match(name) or not name.endswith("_total"):
            raise ValueError(f"{name!r} is not a valid counter name (it must end in _total)")
        if name in self._families or name in self._gauges or name in self._fixed_names():
            raise ValueError(f"a metric family named {name!r} already exists")
        family = self._families[name] = _Family(name, help, "counter", tuple(labels))
        self._dropped.series[name] = 0

        def count(*values: str) -> None:
            node = family.series
            try:
                for value in values[:-1]:
                    node = node[value]
                node[values[-1]] += 1
            except KeyError:
                self._count_new(family, values)

        return count

    # --- gauges ------------------------------------------------------------------

    def add_gauge_source(
        self,
        name: str,
        help: str,
        labels: tuple[str, ...],
        source: GaugeSource,
    ) -> None:
        """A gauge family whose samples ``source()`` yields at each scrape, as
        ``(label_values, value)``.

        Nothing is stored between scrapes. A source that raises, or yields label
        tuples of the wrong length, costs its own samples for that scrape (counted in
        ``tern_metrics_gauge_source_errors_total``), not the whole scrape; samples
        past ``max_series`` are left out and counted as dropped.
        """
        self._add_source(name, help, labels, source, "gauge")

    def add_counter_source(self, name: str, help: str, labels: tuple[str, ...], source: GaugeSource) -> None:
        """A counter family whose values another object keeps (``source()`` yields them
        at each scrape, as for ``add_gauge_source``); they must only ever grow."""
        self._add_source(name, help, labels, source, "counter")

    def _add_source(self, name: str, help: str, labels: tuple[str, ...], source: GaugeSource, kind: str) -> None:
        if not _METRIC_NAME.match(name):
            raise ValueError(f"{name!r} is not a valid metric name")
        for label in labels:
            if not _LABEL_NAME.match(label) or label.startswith("__"):
                raise ValueError(f"{label!r} is not a valid label name")
        if len(set(labels)) != len(labels):
            raise ValueError(f"{kind} {name!r} repeats a label name")
        if name in self._families or name in self._gauges or name in self._fixed_names():
            raise ValueError(f"a metric family named {name!r} already exists")
        self._gauges[name] = (_Family(name, help, kind, tuple(labels)), source)
        self._dropped.series[name] = 0
        self._source_errors.series[name] = 0

    def _fixed_names(self) -> tuple[str, ...]:
        return (
            "tern_build_info",
            "tern_process_start_time_seconds",
            self._dropped.name,
            self._source_errors.name,
        ) + tuple(f"{n}_{s}" for n in self._families for s in ("bucket", "sum", "count"))

    def _gauge_samples(self, family: _Family, source: GaugeSource) -> list[tuple[tuple[str, ...], float]]:
        try:
            samples = []
            for values, value in source():
                if len(values) != len(family.labels):
                    raise ValueError("wrong number of label values")
                samples.append((tuple(map(str, values)), float(value)))
        except Exception:
            self._source_errors.series[family.name] += 1
            return []
        samples.sort()
        if any(a[0] == b[0] for a, b in zip(samples, samples[1:])):
            self._source_errors.series[family.name] += 1  # one label set twice
            return []
        extra = len(samples) - self._max_series
        if extra > 0:
            self._dropped.series[family.name] += extra
            del samples[self._max_series :]
        return samples

    # --- exposition --------------------------------------------------------------

    def render(self) -> str:
        """Every family, sorted by name, each with HELP and TYPE; series sorted by
        label values. Ends with a newline, as the format requires."""
        blocks: dict[str, list[str]] = {}
        for family in self._families.values():
            if family.type == "histogram":
                blocks[family.name] = self._render_histogram(family)
            else:
                blocks[family.name] = self._render_samples(family, family.samples())
        for family, source in self._gauges.values():
            # Before the dropped/error counters are rendered, which this may bump.
            blocks[family.name] = self._render_samples(family, self._gauge_samples(family, source))
        for family in (self._dropped, self._source_errors):
            blocks[family.name] = self._render_samples(family, family.samples())
        info = _Family("tern_build_info", "The running tern's version; always 1.", "gauge", ("version",))
        blocks[info.name] = self._render_samples(info, [((__version__,), 1)])
        start = _Family(
            "tern_process_start_time_seconds",
            "When the process started, in seconds since the Unix epoch.",
            "gauge",
            (),
        )
        blocks[start.name] = self._render_samples(start, [((), self._start_time)])
        lines: list[str] = []
        for name in sorted(blocks):
            lines.extend(blocks[name])
        lines.append("")
        return "\n".join(lines)

    @staticmethod
    def _render_samples(family: _Family, samples: Iterable[tuple[tuple[str, ...], float]]) -> list[str]:
        lines = family.header()
        name = family.name
        for values, value in samples:
            labels = _labels(family.labels, values)
            lines.append(f"{name}{{{labels}}} {_fmt(value)}" if labels else f"{name} {_fmt(value)}")
        return lines

    @staticmethod
    def _render_histogram(family: _Family) -> list[str]:
        lines = family.header()
        name = family.name
        for values, hist in family.samples():
            labels = _labels(family.labels, values)
            count = 0
            for le, n in zip(_LE, hist):  # zip stops before the sum
                count += n
                lines.append(f'{name}_bucket{{{labels},le="{le}"}} {count}')
            lines.append(f"{name}_sum{{{labels}}} {_fmt(hist[-1])}")
            lines.append(f"{name}_count{{{labels}}} {count}")
        return lines
