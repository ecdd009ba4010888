"""The grants that present a JWT from the environment: ``jwt_bearer`` (a workload's
token, workload identity federation) and ``enterprise_managed`` (SEP-990: an enterprise
IdP's ID token exchanged for an ID-JAG, then presented). Bad input: the JWT missing,
unreadable, huge or not a JWT, never quoted back; an authorization server or IdP that
refuses, tried once and never with another grant. Scripted servers on loopback, the
real OAuth session; the happy paths run against the conformance suite."""

from __future__ import annotations

import os
import subprocess
import sys
from urllib.parse import parse_qs

import msgspec
import pytest
import trio

from runtime.config import OAuthConfig
from runtime.mcp.client.oauth import grant
from runtime.mcp.client.oauth.model import AuthError
from runtime.mcp.client.oauth.shell import OAuthSession
from runtime.mcp.client.oauth.store import TokenStore
from runtime.net.guard import AddressPolicy
from runtime.net.outbound import make_client
from tests.mcp.oauth.scripted import Scripted, json_answer
from tests.mcp.server_harness import tern_env
from tests.test_cli import ROOT

JWT = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ3b3JrbG9hZCJ9.c2lnbmF0dXJl"
SECRET_PART = "eyJzdWIiOiJ3b3JrbG9hZCJ9"


async def login(tmp_path, config: OAuthConfig, token_answer, exchange_answer=None, environ=None):
    """Run a login against a scripted authorization server (and IdP); (error, server)."""
    server = Scripted({"/token": lambda r: token_answer, "/idp/token": lambda r: exchange_answer})
    error = None
    async with trio.open_nursery() as nursery:
        base = await server.serve(nursery)
        server.routes["/.well-known/oauth-protected-resource/mcp"] = lambda r: json_answer(
            200, {"resource": f"{base}/mcp", "authorization_servers": [base]})
        server.routes["/.well-known/oauth-authorization-server"] = lambda r: json_answer(
            200, {"issuer": base, "token_endpoint": f"{base}/token", "grant_types_supported": [grant.JWT_BEARER]})
        if config.grant == "enterprise_managed":
            config = msgspec.structs.replace(config, idp_token_endpoint=f"{base}/idp/token")
        async with make_client(AddressPolicy(), timeout=5) as http:
            session = OAuthSession("s", f"{base}/mcp", config, http, TokenStore(tmp_path), environ=environ or {})
            try:
                await session.login()
            except AuthError as exc:
                error = exc
        nursery.cancel_scope.cancel()
    return error, server


def form(request) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(request.body.decode()).items()}


OK = json_answer(200, {"access_token": "at-1", "token_type": "Bearer", "expires_in": 60})


async def test_a_workload_jwt_from_a_file_is_presented_and_reread_each_time(tmp_path):
    path = tmp_path / "token.jwt"
    path.write_text(JWT + "\n")
    config = OAuthConfig(grant="jwt_bearer", assertion_file=str(path))
    error, server = await login(tmp_path, config, OK)
    assert error is None
    sent = form(server.to("/token")[0])
    assert sent["grant_type"] == grant.JWT_BEARER and sent["assertion"] == JWT
    assert "client_id" not in sent and sent["resource"].endswith("/mcp")


async def test_a_refused_workload_jwt_is_final(tmp_path):
    refused = json_answer(400, {"error": "invalid_grant", "error_description": "expired"})
    error, server = await login(tmp_path, OAuthConfig(grant="jwt_bearer", assertion_env="WL", client_id="w"),
                                refused, environ={"WL": JWT})
    assert error is not None and "invalid_grant" in str(error)
    assert len(server.to("/token")) == 1  # not retried, no other grant tried
    assert form(server.to("/token")[0])["client_id"] == "w"


@pytest.mark.parametrize("content, why", [
    (None, "cannot read the workload's JWT from"),  # missing
    ("dir", "cannot read the workload's JWT from"),  # a directory
    ("fifo", "not a regular file"),  # would block a plain open() forever
    ("x" * (grant.MAX_ASSERTION_CHARS + 1), "larger than"),
    ("", "is empty"),
    ("not a jwt but a secret-ish " + SECRET_PART, "is not a JWT"),
])
async def test_a_bad_assertion_file_is_a_clear_error_and_never_quoted(tmp_path, content, why):
    path = tmp_path / "token.jwt"
    if content == "dir":
        path.mkdir()
    elif content == "fifo":
        os.mkfifo(path)
    elif content is not None:
        path.write_text(content)
    error, server = await login(tmp_path, OAuthConfig(grant="jwt_bearer", assertion_file=str(path)), OK)
    assert error is not None and why in str(error), error
    assert SECRET_PART not in str(error) and "xxxx" not in str(error)
    assert server.to("/token") == []  # nothing was sent


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
async def test_an_unreadable_assertion_file_is_a_clear_error(tmp_path):
    path = tmp_path / "token.jwt"
    path.write_text(JWT)
    path.chmod(0)
    error, _ = await login(tmp_path, OAuthConfig(grant="jwt_bearer", assertion_file=str(path)), OK)
    assert error is not None and "Permission denied" in str(error)


async def test_an_unset_assertion_variable_is_a_clear_error(tmp_path):
    error, server = await login(tmp_path, OAuthConfig(grant="jwt_bearer", assertion_env="NOPE"), OK)
    assert error is not None and "NOPE" in str(error) and "is not set" in str(error)
    assert server.to("/token") == []


def enterprise(**fields) -> OAuthConfig:
    return OAuthConfig(grant="enterprise_managed", client_id="c", client_secret_env="CS", assertion_env="IDT",
                       idp_client_id="idp-c", **fields)


async def test_the_enterprise_id_token_is_exchanged_then_presented(tmp_path):
    jag = "eyJ0eXAiOiJvYXV0aC1pZC1qYWcrand0In0.eyJzdWIiOiJ1In0.c2ln"
    exchanged = json_answer(200, {"access_token": jag, "issued_token_type": grant.ID_JAG_TYPE, "token_type": "N_A"})
    error, server = await login(tmp_path, enterprise(), OK, exchanged, environ={"IDT": JWT, "CS": "client-secret"})
    assert error is None
    asked = form(server.to("/idp/token")[0])
    assert asked["grant_type"] == grant.TOKEN_EXCHANGE and asked["subject_token"] == JWT
    assert asked["subject_token_type"] == grant.ID_TOKEN_TYPE and asked["requested_token_type"] == grant.ID_JAG_TYPE
    assert asked["audience"] == server.base and asked["resource"] == f"{server.base}/mcp"
    assert asked["client_id"] == "idp-c"
    token = server.to("/token")[0]
    assert form(token)["assertion"] == jag and token.headers["authorization"].startswith("Basic ")


@pytest.mark.parametrize("answer, why", [
    (json_answer(400, {"error": "invalid_grant"}), "refused the token exchange (HTTP 400): invalid_grant"),
    (json_answer(200, {"access_token": JWT, "issued_token_type": "urn:ietf:params:oauth:token-type:access_token"}),
     "not an ID-JAG"),
    (json_answer(200, {"access_token": "opaque", "issued_token_type": grant.ID_JAG_TYPE}), "is not a JWT"),
    ((200, {}, b"x" * 100_000), "larger than"),
])
async def test_a_bad_identity_provider_answer_stops_the_flow(tmp_path, answer, why):
    error, server = await login(tmp_path, enterprise(), OK, answer, environ={"IDT": JWT})
    assert error is not None and why in str(error), error
    assert server.to("/token") == []  # nothing presented to the authorization server


def test_the_cli_needs_no_login_and_never_shows_the_jwt(tmp_path):
    """``tern auth login`` has nothing to do for these grants, ``auth status`` says who
    gets the token, and neither they nor ``config show`` print the JWT the variable holds."""
    config = tmp_path / "config.toml"
    config.write_text(f'[state]\ndir = "{tmp_path / "state"}"\n\n[[mcp_servers]]\nname = "wl"\n\n'
                      '[mcp_servers.transport]\ntype = "http"\nurl = "https://mcp.example/mcp"\n\n'
                      '[mcp_servers.transport.oauth]\ngrant = "jwt_bearer"\nassertion_env = "WL_JWT"\n')
    env = tern_env(tmp_path, WL_JWT=JWT)

    def tern(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "runtime", "--config", str(config), *args], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=60)

    login, status, shown = tern("auth", "login", "wl"), tern("auth", "status"), tern("config", "show")
    assert login.returncode != 0 and "uses the jwt_bearer grant: it needs no login" in login.stderr
    assert "wl: gets its own token (jwt_bearer)" in status.stdout
    assert 'assertion_env = "WL_JWT"' in shown.stdout
    for done in (login, status, shown):
        assert SECRET_PART not in done.stdout + done.stderr
