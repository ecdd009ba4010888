"""Who can hear tern's NOTIFYs (issue #33, item 5), on a real PostgreSQL.

PostgreSQL has no privilege on LISTEN or NOTIFY: any role connected to a database hears
and sends on every channel of it, and only of it. So tern's payloads (task ids,
versions, node ids) are kept from other roles by keeping them out of tern's database
(``REVOKE CONNECT ... FROM PUBLIC``, docs/scale-out.md), and a node warns at boot when
every role may connect.
"""

from __future__ import annotations

import logging
import secrets

import psycopg
import pytest
import trio

from runtime.pg import Database
from tests.scaleout.test_tasks_shared import cluster, msg

ROLE_PASSWORD = secrets.token_hex(8)


@pytest.fixture
def bystander(pg_server):
    """Another login role of the same server, as a shared PostgreSQL has."""
    name = f"bystander_{secrets.token_hex(4)}"
    with psycopg.connect(pg_server.admin_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {name} LOGIN PASSWORD '{ROLE_PASSWORD}'")
    yield name
    with psycopg.connect(pg_server.admin_url, autocommit=True) as conn:
        conn.execute(f"DROP OWNED BY {name}")
        conn.execute(f"DROP ROLE {name}")


def _as(url: str, role: str) -> str:
    rest = url.split("@", 1)[1]
    return f"postgresql://{role}:{ROLE_PASSWORD}@{rest}"


async def _heard_by(listener: psycopg.Connection, secs: float) -> list[str]:
    return await trio.to_thread.run_sync(lambda: [n.payload for n in listener.notifies(timeout=secs)])


async def test_a_role_that_may_connect_hears_task_ids_and_the_node_warns(pg_url, bystander, caplog) -> None:
    caplog.set_level(logging.WARNING)
    with psycopg.connect(_as(pg_url, bystander), autocommit=True) as spy:  # CONNECT is PUBLIC's by default
        spy.execute("LISTEN tern_a2a")
        async with cluster(pg_url, count=1) as (a,):
            task = await a.engine.send("echo", msg("hi"))
            await a.engine.wait(task.id)
            heard = await _heard_by(spy, 1.0)
    assert any(task.id in payload for payload in heard), heard  # what the revoke below prevents
    assert any("every role may connect to the database" in r.getMessage() for r in caplog.records)


async def test_with_connect_revoked_no_other_role_hears_or_notifies(pg_server, pg_url, bystander, caplog) -> None:
    database = pg_url.rsplit("/", 1)[1]
    with psycopg.connect(pg_server.admin_url, autocommit=True) as conn:
        conn.execute(f'REVOKE CONNECT ON DATABASE "{database}" FROM PUBLIC')
    with pytest.raises(psycopg.OperationalError, match="permission denied for database"):
        psycopg.connect(_as(pg_url, bystander)).close()
    caplog.set_level(logging.WARNING)
    with psycopg.connect(_as(pg_server.admin_url, bystander), autocommit=True) as spy:  # another database
        spy.execute("LISTEN tern_a2a")
        async with cluster(pg_url, count=1) as (a,):
            task = await a.engine.send("echo", msg("hi"))
            await a.engine.wait(task.id)
            heard = await _heard_by(spy, 1.0)
            spy.execute("SELECT pg_notify('tern_a2a', 'inbox node-0 1')")  # reaches no node of tern
    assert heard == []  # a channel is one database's: nothing of tern's reaches another
    assert not any("every role may connect" in r.getMessage() for r in caplog.records)
    db = Database(pg_url)
    await db.open()  # tern's own role still connects
    db.close()
