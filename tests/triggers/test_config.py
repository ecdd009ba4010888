"""``[[triggers]]`` at load time: a sound file loads; each mistake is one line naming its key."""

from __future__ import annotations

import pytest

from runtime.config import parse_config
from runtime.errors import ConfigError

AGENTS = '[[agents]]\nname = "echo"\nkind = "echo"\n[[a2a.external_agents]]\nname = "peer"\nurl = "https://p.example"\n'


def load(triggers: str):
    return parse_config(AGENTS + triggers, "config.toml", None)


def test_a_schedule_a_webhook_and_a_watch_load():
    config = load('[[triggers]]\nname = "tick"\nagent = "echo"\nkind = "schedule"\ncron = "@hourly"\n'
                  'timezone = "Europe/Berlin"\nmessage = "{{ time }}"\n'
                  '[triggers.sink]\nkind = "agent"\nagent = "peer"\n'
                  '[[triggers]]\nname = "ci"\nagent = "echo"\nkind = "webhook"\nsecret_env = "CI_SECRET"\n'
                  'message = "{{ body.a }}"\noverlap = "queue"\nmax_queued = 3\n'
                  '[[triggers]]\nname = "inbox"\nagent = "echo"\nkind = "watch"\npath = "in/box"\n'
                  'message = "{{ paths }}"\n')
    assert [(t.name, t.kind) for t in config.triggers] == [("tick", "schedule"), ("ci", "webhook"), ("inbox", "watch")]
    assert config.triggers[0].sink.agent == "peer" and config.triggers[1].max_queued == 3


def entry(**fields) -> str:
    values = {"name": "t", "agent": "echo", "kind": "schedule", "every": "5m", "message": "x", **fields}
    lines = [f"{k} = {v!r}".replace("'", '"') if isinstance(v, str) else f"{k} = {v}" for k, v in values.items()
             if v is not None]
    return "[[triggers]]\n" + "\n".join(lines) + "\n"


@pytest.mark.parametrize("text, expected", [
    (entry(message=""), "triggers[0].message: expected a template of 1 to 16384 characters, got 0"),
    (entry(message="x" * 20_000), "triggers[0].message: expected a template of 1 to 16384 characters, got 20000"),
    (entry(agent="nobody"), 'triggers[0].agent: no agent named "nobody" (agents: echo)'),
    (entry(name="Bad Name"), 'triggers[0].name: expected 1-64 of a-z 0-9 _ -, got "Bad Name"'),
    (entry() + entry(), 'triggers[1].name: "t" is already used by triggers[0]'),
    (entry(cron="* * * * *"), "triggers[0]: a schedule needs exactly one of cron"),
    (entry(every=None), "triggers[0]: a schedule needs exactly one of cron"),
    (entry(every=None, cron="* * * *"), 'triggers[0].cron: expected five fields'),
    (entry(every=None, cron="@sometimes"), 'triggers[0].cron: expected five fields'),
    (entry(every="5 minutes"), 'triggers[0].every: expected a duration such as "90s"'),
    (entry(timezone="Mars/Olympus_Mons"), 'triggers[0].timezone: "Mars/Olympus_Mons" is not a time zone name'),
    (entry(timezone="../../etc/passwd"), "triggers[0].timezone:"),
    (entry(kind="webhook", every=None, cron=None, secret_env="NOT A NAME"), "triggers[0].secret_env:"),
    (entry(kind="webhook", every=None, max_body_bytes=10**12), "triggers[0].max_body_bytes: expected 1 to"),
    (entry(kind="webhook"), 'triggers[0].every: only used with kind = "schedule"'),
    (entry(kind="watch", every=None, path="../secrets"), "triggers[0].path: expected a directory relative"),
    (entry(kind="watch", every=None, path="/etc"), "triggers[0].path: expected a directory relative"),
    (entry(kind="watch", every=None, path="in", interval_secs=0.01), "triggers[0].interval_secs: expected 0.2 to"),
    (entry(overlap="queue", max_queued=0), "triggers[0].max_queued: expected 1 to 1000, got 0"),
    (entry(overlap="parallel", max_parallel=10_000), "triggers[0].max_parallel: expected 1 to 64"),
    (entry(max_failures=0), "triggers[0].max_failures: expected 1 to 1000"),
    (entry(timeout_secs=-1), "triggers[0].timeout_secs: expected a number above 0"),
    (entry(overlap="sometimes"), "triggers[0].overlap"),
    (entry(colour="blue"), "colour"),
    (entry() + '[triggers.sink]\nkind = "file"\npath = "../../out.md"\n', "triggers[0].sink.path: expected a file"),
    (entry() + '[triggers.sink]\nkind = "webhook"\nurl = "ftp://x"\n', "triggers[0].sink.url: expected an http"),
    (entry() + '[triggers.sink]\nkind = "agent"\nagent = "ghost"\n', "triggers[0].sink.agent: expected a local"),
])
def test_each_mistake_is_one_line_naming_its_key(text, expected):
    with pytest.raises(ConfigError) as caught:
        load(text)
    message = str(caught.value)
    assert expected in message and "\n" not in message, message


def test_the_message_bound_is_the_templates():
    from runtime.config.checks import MAX_TRIGGER_MESSAGE_CHARS
    from runtime.kernel.triggers.template import MAX_TEMPLATE_CHARS

    assert MAX_TRIGGER_MESSAGE_CHARS == MAX_TEMPLATE_CHARS


def test_the_readmes_triggers_example_loads():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "triggers.md").read_text()
    section = page.split("## An example", 1)[1]
    block = section.split("```toml\n", 1)[1].split("```", 1)[0]
    config = parse_config('[[agents]]\nname = "assistant"\nkind = "echo"\n' + block, "README", None)
    assert [(t.name, t.kind) for t in config.triggers] == [("morning", "schedule"), ("ci", "webhook")]
    commented = (Path(__file__).resolve().parents[2] / "config.toml").read_text().split("# [[triggers]]", 1)[1]
    example = "[[triggers]]\n" + "".join(line[2:] + "\n" for line in commented.splitlines() if line.startswith("# "))
    assert parse_config('[[agents]]\nname = "assistant"\nkind = "echo"\n' + example, "config.toml", None).triggers
