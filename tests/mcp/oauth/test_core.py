"""The sans-IO OAuth core: challenges, discovery order and trust checks, the grant's
requests and the answers it refuses. No sockets: every decision is a function."""

from __future__ import annotations

import base64
import hashlib
from urllib.parse import parse_qs, urlsplit

import msgspec
import pytest

from runtime.mcp.client.oauth import discovery, grant
from runtime.mcp.client.oauth.challenge import parse_www_authenticate
from runtime.mcp.client.oauth.model import AsMetadata, AuthError, Client, ResourceMetadata, Tokens

AS = AsMetadata(issuer="https://as.example", authorization_endpoint="https://as.example/authorize",
                token_endpoint="https://as.example/token", registration_endpoint="https://as.example/register",
                authorization_response_iss_parameter_supported=True)


def doc(**fields) -> bytes:
    return msgspec.json.encode(fields)


# --- WWW-Authenticate -------------------------------------------------------------------

def test_challenge_reads_bearer_params_among_other_schemes():
    c = parse_www_authenticate(['Basic realm="a, b"', 'Bearer error="insufficient_scope", scope="files:read  x", '
                                'resource_metadata="https://s.example/.well-known/oauth-protected-resource/mcp", '
                                'error_description="needs \\"x\\""'])
    assert (c.scheme, c.error, c.scope) == ("bearer", "insufficient_scope", "files:read  x")
    assert c.resource_metadata.endswith("/oauth-protected-resource/mcp")
    assert c.error_description == 'needs "x"' and c.insufficient_scope


@pytest.mark.parametrize("header", ["", "Basic realm=x", "Negotiate abc==", "Bearer", "Bearer,",
                                    'Bearer scope="unterminated', "=,,=", "Bearer " + "a=" * 10000])
def test_challenge_never_raises_on_junk(header):
    c = parse_www_authenticate(header)
    assert not c.insufficient_scope


def test_challenge_token68_then_next_scheme():
    c = parse_www_authenticate("Negotiate abc==, Bearer scope=a")
    assert c.scope == "a"


# --- discovery --------------------------------------------------------------------------

def test_resource_metadata_order_header_then_path_then_root():
    assert discovery.resource_metadata_urls("https://s.example/a/mcp", "https://s.example/custom.json") == [
        "https://s.example/custom.json",
        "https://s.example/.well-known/oauth-protected-resource/a/mcp",
        "https://s.example/.well-known/oauth-protected-resource"]
    assert discovery.resource_metadata_urls("https://s.example/") == [
        "https://s.example/.well-known/oauth-protected-resource"]


def test_as_metadata_order_with_and_without_path():
    assert discovery.as_metadata_urls("https://as.example/tenant1") == [
        "https://as.example/.well-known/oauth-authorization-server/tenant1",
        "https://as.example/.well-known/openid-configuration/tenant1",
        "https://as.example/tenant1/.well-known/openid-configuration"]
    assert discovery.as_metadata_urls("https://as.example") == [
        "https://as.example/.well-known/oauth-authorization-server",
        "https://as.example/.well-known/openid-configuration"]


@pytest.mark.parametrize("resource,ok", [
    ("https://s.example/mcp", True), ("https://S.EXAMPLE:443/mcp/", True), ("https://s.example", True),
    ("https://s.example/other", False), ("https://evil.example/mcp", False), ("http://s.example/mcp", False),
    ("https://s.example/mcpx", False)])
def test_resource_metadata_must_name_this_server(resource, ok):
    body = doc(resource=resource, authorization_servers=["https://as.example"])
    if ok:
        assert discovery.parse_resource_metadata(body, "https://s.example/mcp").resource == resource
    else:
        with pytest.raises(AuthError, match="refused"):
            discovery.parse_resource_metadata(body, "https://s.example/mcp")


@pytest.mark.parametrize("body", [b"[]", b"not json", b"{" * 100, doc(resource="https://s.example/mcp"),
                                  doc(resource="https://s.example/mcp", authorization_servers=["javascript:x"]),
                                  b" " * (discovery.MAX_METADATA_BYTES + 1)])
def test_bad_resource_metadata_is_a_clear_error(body):
    with pytest.raises(AuthError):
        discovery.parse_resource_metadata(body, "https://s.example/mcp")


def test_as_metadata_issuer_must_match():
    good = doc(issuer="https://as.example/t", token_endpoint="https://as.example/t/token",
               authorization_endpoint="https://as.example/t/authorize",
               authorization_response_iss_parameter_supported=True, client_id_metadata_document_supported=True)
    meta = discovery.parse_as_metadata(good, "https://as.example/t")
    assert meta.authorization_response_iss_parameter_supported and meta.client_id_metadata_document_supported
    with pytest.raises(AuthError, match="RFC 8414"):
        discovery.parse_as_metadata(doc(issuer="https://attacker.example", token_endpoint="https://a/t"),
                                    "https://as.example/t")
    with pytest.raises(AuthError, match="S256"):
        discovery.parse_as_metadata(doc(issuer="https://as.example", token_endpoint="https://as.example/token",
                                        code_challenge_methods_supported=["plain"]), "https://as.example")


def test_legacy_fallback_endpoints_at_the_origin():
    meta = discovery.legacy_as_metadata("https://s.example/deep/mcp")
    assert (meta.authorization_endpoint, meta.token_endpoint, meta.registration_endpoint) == (
        "https://s.example/authorize", "https://s.example/token", "https://s.example/register")


# --- scope, identity --------------------------------------------------------------------

def test_scope_selection_order_and_offline_access():
    prm = ResourceMetadata(resource="https://s.example/mcp", scopes_supported=["a", "b"])
    plain = AsMetadata(issuer="x")
    offline = AsMetadata(issuer="x", scopes_supported=["a", "offline_access"])
    assert grant.choose_scope("c d", prm, plain) == "c d"
    assert grant.choose_scope("", prm, plain) == "a b"
    assert grant.choose_scope("", None, plain) == ""
    assert grant.choose_scope("", ResourceMetadata(resource="r"), offline) == ""  # nothing asked: nothing added
    assert grant.choose_scope("a", prm, offline) == "a offline_access"
    assert grant.choose_scope("a offline_access", prm, plain) == "a"  # not listed: never requested
    assert grant.choose_scope("a", prm, offline, want_refresh=False) == "a"
    assert grant.choose_scope("a", prm, plain, ("z",)) == "z"
    assert grant.step_up_scope("a b", "b c") == "a b c"


def test_client_identity_order():
    cimd = AsMetadata(issuer="i", client_id_metadata_document_supported=True, registration_endpoint="https://r",
                      token_endpoint_auth_methods_supported=["client_secret_post"])
    assert grant.client_for(cimd, "i", client_id="pre", client_secret="s").how == "config"
    assert grant.client_for(cimd, "i", client_id="pre", client_secret="s").auth_method == "client_secret_post"
    assert grant.client_for(cimd, "i", client_id="pre").auth_method == "none"
    assert grant.client_for(cimd, "i", metadata_url="https://c/m.json").client_id == "https://c/m.json"
    assert grant.client_for(AsMetadata(issuer="i", registration_endpoint="https://r"), "i",
                            metadata_url="https://c/m.json") is None  # not advertised: register
    with pytest.raises(AuthError, match="client_id"):
        grant.client_for(AsMetadata(issuer="i"), "i")


def test_registration_body_is_a_native_client():
    body = msgspec.json.decode(grant.registration_body(AS, "http://127.0.0.1:5/cb", "a b"))
    assert body["application_type"] == "native" and body["redirect_uris"] == ["http://127.0.0.1:5/cb"]
    assert "refresh_token" in body["grant_types"] and body["scope"] == "a b"
    client = grant.parse_registration(201, doc(client_id="c1", client_secret="s1",
                                               token_endpoint_auth_method="client_secret_post"), AS, "i", "u")
    assert (client.client_id, client.auth_method) == ("c1", "client_secret_post")
    with pytest.raises(AuthError, match="HTTP 400"):
        grant.parse_registration(400, doc(error="invalid_redirect_uri"), AS, "i", "u")


# --- authorization code -----------------------------------------------------------------

def pending(**overrides):
    client = Client(issuer=AS.issuer, client_id="c1")
    return grant.authorization_request(AS, client, "https://s.example/mcp", overrides.get("scope", "a b"),
                                       "http://127.0.0.1:5/cb")


def test_authorization_url_has_pkce_s256_state_and_resource():
    p = pending()
    q = {k: v[0] for k, v in parse_qs(urlsplit(p.url).query).items()}
    assert q["code_challenge_method"] == "S256" and q["resource"] == "https://s.example/mcp"
    assert q["code_challenge"] == base64.urlsafe_b64encode(
        hashlib.sha256(p.pkce.verifier.encode()).digest()).rstrip(b"=").decode()
    assert q["state"] == p.state and q["scope"] == "a b" and q["client_id"] == "c1"
    assert 43 <= len(p.pkce.verifier) <= 128
    assert "scope" not in parse_qs(urlsplit(pending(scope="").url).query)


def test_redirect_checks_state_then_issuer():
    p = pending()
    good = f"http://127.0.0.1:5/cb?code=xyz&state={p.state}&iss=https%3A%2F%2Fas.example"
    assert grant.code_from_redirect(p, good) == "xyz"
    assert grant.code_from_redirect(p, f"?code=xyz&state={p.state}&iss=https://as.example") == "xyz"  # pasted query
    for bad, why in [(f"?code=xyz&state=other&iss={AS.issuer}", "state"),
                     (f"?code=xyz&iss={AS.issuer}", "state"),
                     (f"?code=xyz&state={p.state}&iss=https://evil.example", "issuer"),
                     (f"?code=xyz&state={p.state}&iss=https://as.example/", "issuer"),
                     (f"?code=xyz&state={p.state}", "no iss"),
                     (f"?error=access_denied&state={p.state}&iss={AS.issuer}", "refused the login"),
                     (f"?state={p.state}&iss={AS.issuer}", "no code"),
                     ("?" + "a" * 9000, "longer")]:
        with pytest.raises(AuthError, match=why):
            grant.code_from_redirect(p, bad)


def test_iss_compared_even_when_not_advertised():
    quiet = AsMetadata(issuer="https://as.example", authorization_endpoint="https://as.example/authorize")
    p = grant.authorization_request(quiet, Client(issuer="i", client_id="c"), "r", "", "http://127.0.0.1/cb")
    assert grant.code_from_redirect(p, f"?code=1&state={p.state}") == "1"
    with pytest.raises(AuthError, match="issuer"):
        grant.code_from_redirect(p, f"?code=1&state={p.state}&iss=https://evil.example")


# --- token endpoint ---------------------------------------------------------------------

def test_token_request_client_authentication():
    body, headers = grant.token_request(Client(issuer="i", client_id="c:1", client_secret="s/2",
                                               auth_method="client_secret_basic"), "authorization_code", {"code": "x"})
    assert base64.b64decode(headers["Authorization"].split()[1]) == b"c%3A1:s%2F2"
    assert "client_secret" not in parse_qs(body.decode()) and parse_qs(body.decode())["client_id"] == ["c:1"]
    body, headers = grant.token_request(Client(issuer="i", client_id="c", client_secret="s",
                                               auth_method="client_secret_post"), "refresh_token", {"x": ""})
    form = parse_qs(body.decode())
    assert form["client_secret"] == ["s"] and "Authorization" not in headers and "x" not in form
    body, _ = grant.token_request(Client(issuer="i", client_id="c"), "authorization_code", {})
    assert parse_qs(body.decode()) == {"grant_type": ["authorization_code"], "client_id": ["c"]}


def test_token_response_expiry_and_refresh_token_kept():
    tokens = grant.parse_token_response(200, doc(access_token="t", token_type="bearer", expires_in=120,
                                                 refresh_token="r", scope="a"), 1000.0, issuer="i", resource="s")
    assert tokens.expires_at == 1120.0 and not grant.needs_refresh(tokens, 1059.0)
    assert grant.needs_refresh(tokens, 1061.0)
    short = grant.parse_token_response(200, doc(access_token="t", expires_in=4), 1000.0, issuer="i", resource="s")
    assert not grant.needs_refresh(short, 1001.9) and grant.needs_refresh(short, 1002.0)  # half its life
    no_expiry = grant.parse_token_response(200, doc(access_token="t2"), 1000.0, issuer="i", resource="s",
                                           previous=tokens)
    assert no_expiry.expires_at == 0.0 and not grant.needs_refresh(no_expiry, 1e12)
    assert no_expiry.refresh_token == "r" and no_expiry.scope == "a"
    assert "t2" not in repr(no_expiry)


@pytest.mark.parametrize("status,body,why", [
    (400, doc(error="invalid_grant", error_description="expired"), "invalid_grant"),
    (200, doc(token_type="Bearer"), "access_token"),
    (200, doc(access_token="t", token_type="DPoP"), "no DPoP proof"),  # bound to a key it never saw
    (200, doc(access_token="t", token_type="mac"), "Bearer and DPoP tokens only"),
    (200, b"<html>", "not JSON"),
    (200, b" " * (grant.MAX_TOKEN_RESPONSE_BYTES + 1), "larger")])
def test_bad_token_responses(status, body, why):
    with pytest.raises(AuthError, match=why):
        grant.parse_token_response(status, body, 0.0, issuer="i", resource="s")


def test_tokens_repr_hides_secrets():
    assert "secret" not in repr(Tokens(access_token="secret", refresh_token="secret"))
