import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import __version__
from runtime.httpd.metrics import CONTENT_TYPE, DURATION_BUCKETS, Metrics

# --- a small, strict parser for text format 0.0.4 ---------------------------------------

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="')
_VALUE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?\Z|[+-]Inf\Z|NaN\Z")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}
_SUFFIXES = {"counter": ("",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}


class Family:
    def __init__(self, help):
        self.help = help
        self.type = None
        self.samples = {}  # (sample name, ((label, value), ...)) -> float


def _unescape(text, allowed):
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            nxt = text[i + 1 : i + 2]
            assert nxt in allowed, f"bad escape \\{nxt!r} in {text!r}"
            out.append(_ESCAPES[nxt])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _parse_labels(line, pos):
    """Labels from just after '{' to just after '}': (tuple of pairs, new pos)."""
    labels = []
    if line[pos] == "}":
        raise AssertionError(f"empty braces in {line!r}")
    while True:
        m = _LABEL.match(line, pos)
        assert m, f"bad label at {pos} in {line!r}"
        pos = m.end()
        value = []
        while True:
            ch = line[pos]
            if ch == "\\":
                nxt = line[pos + 1]
                assert nxt in _ESCAPES, f"bad escape in {line!r}"
                value.append(_ESCAPES[nxt])
                pos += 2
            elif ch == '"':
                pos += 1
                break
            else:
                value.append(ch)
                pos += 1
        labels.append((m.group(1), "".join(value)))
        if line[pos] == "}":
            names = [n for n, _ in labels]
            assert len(set(names)) == len(names), f"repeated label in {line!r}"
            return tuple(labels), pos + 1
        assert line[pos] == ",", f"expected , or }} at {pos} in {line!r}"
        pos += 1


def _parse_value(text):
    assert _VALUE.match(text), f"bad value {text!r}"
    return float(text.replace("Inf", "inf").replace("NaN", "nan"))


def parse(text):
    """{family name: Family}, asserting the grammar and the structural rules."""
    assert text.endswith("\n") and not text.endswith("\n\n")
    families = {}
    current = None
    for line in text[:-1].split("\n"):
        if line.startswith("# HELP "):
            name, _, help = line[len("# HELP ") :].partition(" ")
            assert _NAME.fullmatch(name) and name not in families, line
            current = families[name] = Family(_unescape(help, "\\n"))
            current.name = name
        elif line.startswith("# TYPE "):
            name, _, type = line[len("# TYPE ") :].partition(" ")
            assert current is not None and name == current.name and current.type is None, line
            assert type in _SUFFIXES, line
            current.type = type
        else:
            assert current is not None and current.type is not None, f"sample before HELP/TYPE: {line!r}"
            m = _NAME.match(line)
            assert m, line
            name, pos = m.group(), m.end()
            assert name in {current.name + s for s in _SUFFIXES[current.type]}, line
            labels = ()
            if line[pos] == "{":
                labels, pos = _parse_labels(line, pos + 1)
            assert line[pos] == " ", line
            key = (name, labels)
            assert key not in current.samples, f"duplicate sample {line!r}"
            current.samples[key] = _parse_value(line[pos + 1 :])
    for family in families.values():
        assert family.type is not None
    return families


def sample(families, name, in_family=None, **labels):
    """The value of sample ``name`` with exactly these labels (``in_family`` for a
    histogram's ``_bucket``/``_sum``/``_count``)."""
    for (n, pairs), value in families[in_family or name].samples.items():
        if n == name and dict(pairs) == labels:
            return value
    raise KeyError((name, labels))


def series(families, name, sample_name=None):
    """The label dicts of one family's samples named ``sample_name``."""
    return [dict(pairs) for (n, pairs) in families[name].samples if n == (sample_name or name)]


# --- the format ------------------------------------------------------------------------


def test_content_type():
    assert CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"


def test_an_empty_registry_renders_every_family_with_help_and_type():
    families = parse(Metrics(start_time=1700000000.5).render())
    assert {name: f.type for name, f in families.items()} == {
        "tern_build_info": "gauge",
        "tern_http_request_duration_seconds": "histogram",
        "tern_http_requests_total": "counter",
        "tern_metrics_dropped_series_total": "counter",
        "tern_metrics_gauge_source_errors_total": "counter",
        "tern_process_start_time_seconds": "gauge",
        "tern_tool_call_duration_seconds": "histogram",
        "tern_tool_calls_total": "counter",
    }
    assert all(f.help for f in families.values())
    assert sample(families, "tern_build_info", version=__version__) == 1
    assert sample(families, "tern_process_start_time_seconds") == 1700000000.5
    assert series(families, "tern_http_requests_total") == []


def test_process_start_time_defaults_to_about_now():
    import time

    value = sample(parse(Metrics().render()), "tern_process_start_time_seconds")
    assert time.time() - 3600 < value <= time.time()


def test_requests_are_counted_by_route_method_and_status():
    m = Metrics()
    for route, method, status in [
        ("/api/agents", "GET", 200),
        ("/api/agents", "GET", 200),
        ("/api/agents", "POST", 201),
        ("/api/agents/{name}/message", "POST", 429),
        ("(unmatched)", "BREW", 404),
    ]:
        m.observe_request(route, method, status, 0.01)
    f = parse(m.render())
    name = "tern_http_requests_total"
    assert sample(f, name, route="/api/agents", method="GET", status="200") == 2
    assert sample(f, name, route="/api/agents", method="POST", status="201") == 1
    assert sample(f, name, route="/api/agents/{name}/message", method="POST", status="429") == 1
    assert sample(f, name, route="(unmatched)", method="BREW", status="404") == 1
    assert len(series(f, name)) == 4


def _check_histogram(families, name, labels, observations):
    buckets = {
        d["le"]: sample(families, name + "_bucket", name, **d)
        for d in series(families, name, name + "_bucket")
        if all(d[k] == v for k, v in labels.items())
    }
    expected = {repr(b): sum(1 for o in observations if o <= b) for b in DURATION_BUCKETS}
    expected["+Inf"] = len(observations)
    assert buckets == expected
    assert list(buckets) == list(expected)  # in order of le, +Inf last
    assert sample(families, name + "_count", name, **labels) == len(observations)
    assert sample(families, name + "_sum", name, **labels) == pytest.approx(sum(observations))


def test_request_duration_histogram_is_cumulative():
    m = Metrics()
    obs = [0.0005, 0.001, 0.003, 0.2, 0.25, 7.0, 20.0, 0.0]
    for seconds in obs:
        m.observe_request("/a", "GET", 200, seconds)
    m.observe_request("/b", "GET", 200, 0.5)
    f = parse(m.render())
    name = "tern_http_request_duration_seconds"
    _check_histogram(f, name, {"route": "/a"}, obs)
    _check_histogram(f, name, {"route": "/b"}, [0.5])
    assert sample(f, name + "_bucket", name, route="/a", le="0.001") == 3  # le is inclusive
    assert sample(f, name + "_bucket", name, route="/a", le="10.0") == 7
    assert sample(f, name + "_bucket", name, route="/a", le="+Inf") == 8


def test_tool_calls_are_counted_and_timed():
    m = Metrics()
    m.observe_tool_call("mcp_fs_read", "ok", 0.02)
    m.observe_tool_call("mcp_fs_read", "ok", 0.3)
    m.observe_tool_call("mcp_fs_read", "error", 3.0)
    m.observe_tool_call("shell", "timeout", 30.0)
    f = parse(m.render())
    assert sample(f, "tern_tool_calls_total", tool="mcp_fs_read", outcome="ok") == 2
    assert sample(f, "tern_tool_calls_total", tool="mcp_fs_read", outcome="error") == 1
    assert sample(f, "tern_tool_calls_total", tool="shell", outcome="timeout") == 1
    name = "tern_tool_call_duration_seconds"
    _check_histogram(f, name, {"tool": "mcp_fs_read"}, [0.02, 0.3, 3.0])
    _check_histogram(f, name, {"tool": "shell"}, [30.0])


WEIRD = [
    'say "hi"',
    "back\\slash",
    "new\nline",
    "\\n is not a newline",
    '\\"',
    "ünïcødé ☃ 日本 🦆",
    "",
    "}",
    "a} 1",
    "x,y=\"z\"",
    "tab\there",
    "cr\rhere",
    "# HELP",
]


@pytest.mark.parametrize("value", WEIRD)
def test_label_values_are_escaped(value):
    m = Metrics()
    m.observe_request(value, value, 200, 0.1)
    m.observe_tool_call(value, value, 0.1)
    f = parse(m.render())
    assert sample(f, "tern_http_requests_total", route=value, method=value, status="200") == 1
    assert sample(f, "tern_tool_calls_total", tool=value, outcome=value) == 1
    name = "tern_http_request_duration_seconds"
    assert sample(f, name + "_count", name, route=value) == 1


def test_escaping_is_exactly_backslash_quote_newline():
    m = Metrics()
    m.observe_tool_call('a\\b"c\nd', "ok", 0.1)
    assert 'tern_tool_calls_total{tool="a\\\\b\\"c\\nd",outcome="ok"} 1\n' in m.render()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=20), min_size=1, max_size=5))
def test_any_label_value_round_trips(values):
    m = Metrics()
    for v in values:
        m.observe_tool_call(v, "ok", 0.1)
        m.add_gauge_source(f"g_{len(m._gauges)}", v, ("x",), lambda v=v: [((v,), 1.5)])
    f = parse(m.render())
    assert {d["tool"] for d in series(f, "tern_tool_calls_total")} == set(values)
    for i, v in enumerate(values):
        assert f[f"g_{i}"].help == v
        assert sample(f, f"g_{i}", x=v) == 1.5


def test_render_is_deterministic_and_independent_of_observation_order():
    a, b = Metrics(start_time=1.0), Metrics(start_time=1.0)
    calls = [("/z", "GET", 200, 0.1), ("/a", "POST", 500, 2.0), ("/m", "GET", 404, 0.001)]
    for c in calls:
        a.observe_request(*c)
    for c in reversed(calls):
        b.observe_request(*c)
    assert a.render() == b.render() == a.render()
    names = [line.split()[2] for line in a.render().splitlines() if line.startswith("# TYPE")]
    assert names == sorted(names)
    routes = [d["route"] for d in series(parse(a.render()), "tern_http_requests_total")]
    assert routes == sorted(routes)


# --- cardinality ---------------------------------------------------------------------


def test_new_label_sets_past_the_cap_fold_into_other():
    m = Metrics(max_series=3)
    for i in range(3):
        m.observe_request(f"/r{i}", "GET", 200, 0.01)
    for i in range(1000):
        m.observe_request(f"/junk/{i}", "GET", 200, 0.01)
    m.observe_request("/r0", "GET", 200, 0.01)  # an existing series still counts
    f = parse(m.render())
    name = "tern_http_requests_total"
    assert len(series(f, name)) == 4
    assert sample(f, name, route="/r0", method="GET", status="200") == 2
    assert sample(f, name, route="other", method="other", status="other") == 1000
    hist = "tern_http_request_duration_seconds"
    assert [d["route"] for d in series(f, hist, hist + "_count")] == ["/r0", "/r1", "/r2", "other"]
    assert sample(f, hist + "_count", hist, route="other") == 1000
    dropped = "tern_metrics_dropped_series_total"
    assert sample(f, dropped, family=name) == 1000
    assert sample(f, dropped, family=hist) == 1000
    assert sample(f, dropped, family="tern_tool_calls_total") == 0


def test_memory_is_bounded_under_a_flood_of_names():
    m = Metrics(max_series=50)
    for i in range(20_000):
        m.observe_request(f"/{i}", f"M{i}", 200 + i % 300, 0.01)
        m.observe_tool_call(f"tool{i}", f"outcome{i}", 0.01)
    for family in (m._requests, m._request_seconds, m._tools, m._tool_seconds):
        assert len(family.samples()) <= 51  # 50 and "other"
    f = parse(m.render())
    assert sample(f, "tern_tool_calls_total", tool="other", outcome="other") == 20_000 - 50


def test_max_series_must_be_positive():
    with pytest.raises(ValueError):
        Metrics(max_series=0)


# --- gauges --------------------------------------------------------------------------


def test_gauge_sources_are_read_at_each_scrape():
    m = Metrics()
    tasks = {"running": 2, "done": 5}
    m.add_gauge_source(
        "tern_tasks", "Tasks by state.", ("state",), lambda: [((k,), v) for k, v in tasks.items()]
    )
    m.add_gauge_source(
        "tern_mcp_server_up",
        "1 when the server is in this state.",
        ("server", "state"),
        lambda: [(("fs", "ready"), 1), (("git", "backoff"), 1), (("git", "ready"), 0)],
    )
    f = parse(m.render())
    assert f["tern_tasks"].type == "gauge"
    assert sample(f, "tern_tasks", state="running") == 2
    assert sample(f, "tern_tasks", state="done") == 5
    assert series(f, "tern_tasks") == [{"state": "done"}, {"state": "running"}]  # sorted
    assert sample(f, "tern_mcp_server_up", server="git", state="backoff") == 1
    tasks["running"] = 7
    tasks["failed"] = 1
    f = parse(m.render())
    assert sample(f, "tern_tasks", state="running") == 7
    assert sample(f, "tern_tasks", state="failed") == 1


def test_gauge_values_include_infinities_and_nan():
    m = Metrics()
    values = {"inf": math.inf, "ninf": -math.inf, "nan": math.nan, "f": 0.25}
    m.add_gauge_source("g", "h", ("k",), lambda: [((k,), v) for k, v in values.items()])
    text = m.render()
    assert 'g{k="inf"} +Inf\n' in text and 'g{k="ninf"} -Inf\n' in text and 'g{k="nan"} NaN\n' in text
    assert sample(parse(text), "g", k="f") == 0.25


def test_a_gauge_without_labels():
    m = Metrics()
    m.add_gauge_source("tern_up", "Always 1.", (), lambda: [((), 1)])
    assert "\ntern_up 1.0\n" in m.render()


@pytest.mark.parametrize(
    "source",
    [
        lambda: 1 / 0,
        lambda: [(("a", "b"), 1)],  # too many label values
        lambda: [(("a",), "not a number")],
        lambda: [(("a",), 1), (("a",), 2)],  # one label set twice
        lambda: [("a",)],
    ],
)
def test_a_broken_gauge_source_costs_only_its_own_samples(source):
    m = Metrics()
    m.add_gauge_source("bad", "Broken.", ("k",), source)
    m.add_gauge_source("good", "Fine.", ("k",), lambda: [(("x",), 1)])
    m.observe_request("/a", "GET", 200, 0.1)
    f = parse(m.render())
    assert series(f, "bad") == []
    assert sample(f, "good", k="x") == 1
    assert sample(f, "tern_metrics_gauge_source_errors_total", gauge="bad") == 1
    assert sample(f, "tern_metrics_gauge_source_errors_total", gauge="good") == 0
    f = parse(m.render())
    assert sample(f, "tern_metrics_gauge_source_errors_total", gauge="bad") == 2


def test_gauge_samples_past_the_cap_are_left_out_and_counted():
    m = Metrics(max_series=10)
    m.add_gauge_source("many", "Many.", ("i",), lambda: [((f"{i:03}",), i) for i in range(25)])
    f = parse(m.render())
    assert len(series(f, "many")) == 10
    assert sample(f, "tern_metrics_dropped_series_total", family="many") == 15


@pytest.mark.parametrize(
    "name, labels",
    [
        ("1bad", ()),
        ("bad-name", ()),
        ("ok", ("bad-label",)),
        ("ok", ("__reserved",)),
        ("ok", ("a", "a")),
        ("tern_http_requests_total", ()),
        ("tern_build_info", ()),
        ("tern_http_request_duration_seconds_bucket", ()),
    ],
)
def test_bad_gauge_registrations_are_refused(name, labels):
    with pytest.raises(ValueError):
        Metrics().add_gauge_source(name, "h", labels, lambda: [])


def test_a_gauge_name_is_registered_once():
    m = Metrics()
    m.add_gauge_source("tern_tasks", "h", ("state",), lambda: [])
    with pytest.raises(ValueError):
        m.add_gauge_source("tern_tasks", "h", ("state",), lambda: [])


# --- the parser is strict --------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "x 1\n",  # no HELP/TYPE
        "# HELP x h\n# TYPE x counter\nx 1",  # no final newline
        '# HELP x h\n# TYPE x counter\nx{a="b} 1\n',  # unterminated value
        '# HELP x h\n# TYPE x counter\nx{a="\\t"} 1\n',  # unknown escape
        "# HELP x h\n# TYPE x counter\nx one\n",
        "# HELP x h\n# TYPE x counter\ny 1\n",
        "# HELP x h\n# TYPE x counter\nx 1\nx 2\n",
        "# HELP x h\n# TYPE x bogus\n",
    ],
)
def test_the_test_parser_rejects_malformed_text(text):
    with pytest.raises((AssertionError, IndexError)):
        parse(text)
