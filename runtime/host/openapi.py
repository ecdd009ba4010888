"""The API as an OpenAPI 3.1 document, written by hand (tests/http/test_api.py checks
that it names exactly the routes the router serves, with the same methods)."""

from __future__ import annotations

from typing import Any

from runtime import __version__

__all__ = ["document"]

_ERROR = {"description": "error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
_JSON_OBJECT = {"application/json": {"schema": {"type": "object"}}}
_ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
_APPROVAL = {"type": "object", "required": ["id", "agent", "tool", "state", "expires"],
             "properties": {"state": {"enum": ["pending", "approved", "denied", "expired"]},
                            "arguments": {"description": "the whole arguments, redacted (known secrets masked)"},
                            "arguments_sha256": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$",
                                                 "description": "sha256 of their RFC 8785 bytes (GET .../arguments): "
                                                                "what approving binds to"},
                            "arguments_bytes": {"type": "integer"},
                            "form": {"type": ["object", "null"],
                                     "description": "a server's question: mode, message, requestedSchema or url"}}}
_TOO_MANY = {**_ERROR, "description": "the rate limit, or the agent's budget (requests_per_minute, tokens_per_hour), "
             "is spent", "headers": {"Retry-After": {"description": "whole seconds until it may succeed",
                                                    "schema": {"type": "integer", "minimum": 1}}}}


def _ok(description: str, schema: Any = None, content_type: str = "application/json") -> dict[str, Any]:
    return {"200": {"description": description,
                    "content": {content_type: {"schema": schema or {"type": "object"}}}},
            "401": _ERROR, "403": _ERROR, "429": _TOO_MANY}


def document(*, a2a_path: Any = None, mcp: bool = True) -> dict[str, Any]:
    """The API as served: ``a2a_path`` (``[a2a] listen_path``) when A2A is on, the
    ``/mcp`` endpoint when the MCP server is on."""
    doc = _base()
    doc["paths"].update(_dashboard_paths())
    doc["paths"].update(_trigger_paths())
    doc["paths"].update(_hook_paths())
    doc["paths"].update(_link_paths())
    if not mcp:
        del doc["paths"]["/mcp"]
    if a2a_path is not None:
        doc["paths"].update(_a2a_paths(a2a_path.rstrip("/")))
    return doc


def _dashboard_paths() -> dict[str, Any]:
    """The dashboard's page and files, and the routes only it needs."""
    page = {"200": {"description": "the file", "content": {"text/html": {"schema": {"type": "string"}}}},
            "304": {"description": "not modified (If-None-Match)"}, "403": _ERROR, "404": _ERROR}
    task = {"type": "object", "required": ["id", "context_id", "agent", "state"]}
    return {
        "/": {"get": {"summary": "the dashboard (needs no key to load: it holds no data)", "security": [],
                      "responses": page}},
        "/ui/{file}": {"get": {"summary": "the dashboard's files (script, styles, icons)", "security": [],
                               "parameters": [{"name": "file", "in": "path", "required": True,
                                               "schema": {"type": "string"}}], "responses": page}},
        "/api/activity": {"get": {
            "summary": "the history the daemon keeps (host/activity.py): per-minute counts of runs, model calls, "
                       "tool calls, errors and tokens; the last runs with their cost; each agent's last run",
            "parameters": [{"name": n, "in": "query", "required": False, "schema": sch} for n, sch in (
                ("minutes", {"type": "integer", "default": 40, "maximum": 60}),
                ("limit", {"type": "integer", "default": 20, "maximum": 200}))],
            "responses": {**_ok("the history", {"type": "object", "required": ["start", "series", "runs",
                                                                             "last_runs"]}), "400": _ERROR}}},
        "/api/activity/runs": {"get": {
            "summary": "runs, newest first, each with its model calls, tool calls and tokens",
            "parameters": [{"name": n, "in": "query", "required": False, "schema": sch} for n, sch in (
                ("agent", {"type": "string"}), ("context_id", {"type": "string"}),
                ("limit", {"type": "integer", "default": 50, "maximum": 200}))],
            "responses": {**_ok("runs", {"type": "object", "required": ["runs"]}), "400": _ERROR}}},
        "/api/activity/runs/{id}": {"get": {
            "summary": "one run and its model and tool calls in the order they started (its timeline)",
            "parameters": [_ID], "responses": {**_ok("the run", {"type": "object", "required": [
                "seq", "agent", "started", "ended", "outcome", "spans"]}), "404": _ERROR}}},
        "/api/sign-in": {"get": {
            "summary": "what the dashboard's sign-in form says: the local token's file (to a loopback client "
                       "of a daemon that takes it; else null) and where tern's clients take the key from",
            "security": [], "responses": {"200": {"description": "the hint", "content": {"application/json": {
                "schema": {"type": "object", "required": ["local_token_path", "key_hint"]}}}}, "403": _ERROR}}},
        "/api/tasks": {"get": {
            "summary": "A2A tasks, newest first, without history or artifacts (404 while A2A is off)",
            "parameters": [{"name": n, "in": "query", "required": False, "schema": sch} for n, sch in (
                ("state", {"enum": ["submitted", "working", "input-required", "auth-required", "completed",
                                    "canceled", "failed", "rejected", "unknown"]}),
                ("context_id", {"type": "string"}), ("limit", {"type": "integer", "default": 50, "maximum": 500}))],
            "responses": {**_ok("tasks", {"type": "object", "required": ["tasks", "total"]}), "400": _ERROR,
                          "404": _ERROR}}},
        "/api/tasks/{id}": {"get": {"summary": "one A2A task: status, history, artifacts", "parameters": [_ID],
                                    "responses": {**_ok("the task", task), "404": _ERROR}}},
        "/api/tasks/{id}/cancel": {"post": {"summary": "cancel one A2A task", "parameters": [_ID],
                                            "responses": {**_ok("the canceled task", task), "404": _ERROR,
                                                          "409": _ERROR}}},
        "/api/config": {"get": {"summary": "the running config with secrets masked, and the file it came from",
                                "responses": _ok("{path, config}", {"type": "object",
                                                                    "required": ["path", "config"]})}},
        "/api/config/reload": {"post": {
            "summary": "re-read the daemon's config file and apply it (as SIGHUP does)",
            "responses": {**_ok("what changed", {"type": "object", "required": ["changes", "not_applied"]}),
                          "404": _ERROR,
                          "422": {"description": "the file does not load; the running config stays",
                                  "content": {"application/json": {"schema": {
                                      "type": "object", "required": ["error"],
                                      "properties": {"error": {"type": "string"}}}}}}}}},
        "/api/mcp/servers/{name}/login": {"post": {
            "summary": "start an OAuth login (authorization_code) for one MCP server in the daemon: answers the "
                       "URL a person opens; the server reconnects once the redirect arrives",
            "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}],
            "responses": {**_ok("the URL", {"type": "object", "required": ["authorization_url"]}), "400": _ERROR,
                          "404": _ERROR, "409": _ERROR, "502": _ERROR, "504": _ERROR}}},
    }


def _link_paths() -> dict[str, Any]:
    """The one-time approve/deny links of ``[[governance.notify]]`` (docs/approvals-notify.md)."""
    token = {"name": "token", "in": "path", "required": True, "schema": {"type": "string"}}
    page = {"content": {"text/html": {"schema": {"type": "string"}}}}
    refused = {"description": "the link is forged, spent, expired, or may not make this decision", **page}
    return {"/approve/{token}": {
        "get": {"summary": "a notify link's page: what would be approved, and its buttons (decides nothing)",
                "security": [], "parameters": [token],
                "responses": {"200": {"description": "the page", **page}, "403": refused,
                              "429": {"description": "too many refused links from this address"}}},
        "post": {"summary": "decide through a one-time notify link: the token's own decision, or the form's "
                            "decision=approve|deny (a deny link only denies)",
                 "security": [], "parameters": [token],
                 "requestBody": {"required": False, "content": {"application/x-www-form-urlencoded": {"schema": {
                     "type": "object", "properties": {"decision": {"enum": ["approve", "deny"]}}}}}},
                 "responses": {"200": {"description": "decided", **page}, "403": refused,
                               "429": {"description": "too many refused links from this address"}}}}}


def _trigger_paths() -> dict[str, Any]:
    """``tern triggers``: the list, runs, fire and resume (docs/triggers.md)."""
    name = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
    run = {"type": "object", "required": ["id", "trigger", "source", "started_at", "outcome"],
           "properties": {"source": {"enum": ["schedule", "webhook", "watch", "manual"]},
                          "outcome": {"enum": ["queued", "running", "ok", "failed", "timeout", "skipped"]},
                          "ended_at": {"type": ["number", "null"]}, "reply": {"type": "string"},
                          "started_iso": {"type": "string"}, "ended_iso": {"type": ["string", "null"]},
                          "error": {"type": "string"}, "sink_error": {"type": "string"}}}
    listed = {"type": "object", "required": ["name", "kind", "agent", "paused", "failures", "next_fire", "last_run"],
              "properties": {"timezone": {"type": "string"}, "next_fire_iso": {"type": ["string", "null"]}}}
    return {
        "/api/triggers": {"get": {"summary": "the triggers: kind, agent, paused, failures, next fire, last run",
                                  "responses": _ok("triggers", {"type": "object", "required": ["triggers"],
                                                                "properties": {"triggers": {"type": "array",
                                                                                            "items": listed}}})}},
        "/api/triggers/{name}/runs": {"get": {
            "summary": "a trigger's runs, newest first",
            "parameters": [name, {"name": "limit", "in": "query", "required": False,
                                  "schema": {"type": "integer", "default": 50, "maximum": 1000}}],
            "responses": {**_ok("runs", {"type": "object", "required": ["trigger", "runs"],
                                         "properties": {"runs": {"type": "array", "items": run}}}),
                          "400": _ERROR, "404": _ERROR}}},
        "/api/triggers/{name}/runs/{id}": {"get": {"summary": "one run of a trigger", "parameters": [name, _ID],
                                                   "responses": {**_ok("the run", run), "404": _ERROR}}},
        "/api/triggers/{name}/fire": {"post": {
            "summary": "start a run now; it goes on in the background",
            "parameters": [name],
            "responses": {"202": {"description": "the run's id", "content": {"application/json": {"schema": {
                "type": "object", "required": ["trigger", "run_id"]}}}},
                "401": _ERROR, "403": _ERROR, "404": _ERROR, "429": _TOO_MANY,
                "409": {**_ERROR, "description": "the overlap policy refuses another run now"},
                "503": {**_ERROR, "description": "the trigger is paused after failing too often (resume it)"}}}},
        "/api/triggers/{name}/resume": {"post": {
            "summary": "resume a paused trigger; its failures in a row start again at 0", "parameters": [name],
            "responses": {**_ok("the trigger", listed), "404": _ERROR}}},
    }


def _hook_paths() -> dict[str, Any]:
    """``POST /hooks/{name}``: the key, or (a trigger with ``secret_env``) the signature alone."""
    signed = {"name": "X-Hub-Signature-256", "in": "header", "required": False,
              "description": "sha256=<hex HMAC-SHA256 of the body, or of <timestamp>.<body>>",
              "schema": {"type": "string", "pattern": "^sha256=[0-9a-fA-F]{64}$"}}
    return {"/hooks/{name}": {"post": {
        "summary": "fire a webhook trigger: its body (JSON, else text) is {{ body }} in the message; answered at "
                   "once with the run's id. A trigger with secret_env takes its signature instead of the key",
        "security": [{"bearer": []}, {"apiKey": []}, {}],
        "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}, signed],
        "requestBody": {"required": False, "content": {"application/json": {"schema": {}}, "*/*": {"schema": {}}}},
        "responses": {"202": {"description": "the run started", "content": {"application/json": {"schema": {
            "type": "object", "required": ["run_id"], "properties": {"run_id": {"type": "string"}}}}}},
            "400": _ERROR, "401": _ERROR, "403": _ERROR, "404": _ERROR, "409": _ERROR, "413": _ERROR,
            "429": _TOO_MANY, "503": _ERROR}}}}


def _a2a_paths(p: str) -> dict[str, Any]:
    public = {"security": []}
    card = {"get": {"summary": "A2A agent card", **public, "responses": {"200": {"description": "the card",
            "content": {"application/json": {"schema": {"type": "object"}}}}, "304": {"description": "not modified"}}}}
    rpc = {"post": {"summary": "A2A JSON-RPC (0.1 tasks/*, 0.3 message/*, 1.0 SendMessage...; 1.0 needs A2A-Version)",
                    "requestBody": {"required": True, "content": _JSON_OBJECT},
                    "responses": _ok("a JSON-RPC response, or an SSE stream for the streaming methods")}}
    rest = f"{p}/{{agent}}/rest"

    def op(summary: str) -> dict[str, Any]:
        return {"summary": summary, "responses": _ok(summary)}

    return {
        "/.well-known/agent-card.json": card,
        "/.well-known/agent.json": card,
        "/.well-known/jwks.json": {"get": {"summary": "the public keys A2A agent cards are signed with (JWKS)",
                                           **public, "responses": _ok("a JWKS")}},
        f"{p}/agents": {"get": {"summary": "A2A: every agent's card ({agents, total})", **public,
                                "responses": _ok("cards")}},
        f"{p}/{{agent}}/.well-known/agent-card.json": card,
        p: rpc, f"{p}/": rpc, f"{p}/{{agent}}": rpc,
        f"{rest}/message:send": {"post": op("A2A 1.0 HTTP+JSON SendMessage")},
        f"{rest}/message:stream": {"post": op("A2A 1.0 HTTP+JSON SendStreamingMessage (SSE)")},
        f"{rest}/tasks": {"get": op("A2A 1.0 HTTP+JSON ListTasks")},
        f"{rest}/tasks/{{op}}": {"get": op("GetTask ({id}) or SubscribeToTask ({id}:subscribe)"),
                                 "post": op("CancelTask ({id}:cancel) or SubscribeToTask ({id}:subscribe)")},
        f"{rest}/tasks/{{op}}/pushNotificationConfigs": {"post": op("CreateTaskPushNotificationConfig"),
                                                           "get": op("ListTaskPushNotificationConfigs")},
        f"{rest}/tasks/{{op}}/pushNotificationConfigs/{{config}}": {"get": op("GetTaskPushNotificationConfig"),
                                                                      "delete": op("DeleteTaskPushNotificationConfig")},
        f"{rest}/extendedAgentCard": {"get": op("GetExtendedAgentCard (the key needs the card scope)")},
        f"{p}/tasks/send": {"post": op("A2A (the seed's REST): send a task, 0.1 shapes")},
        f"{p}/tasks/{{id}}": {"get": op("A2A (the seed's REST): a task")},
        f"{p}/tasks/{{id}}/cancel": {"post": op("A2A (the seed's REST): cancel a task")},
    }


def _base() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "tern",
            "version": __version__,
            "description": "tern's daemon API. Every path except /health, /ready and the dashboard's (/, /ui/...) "
            "needs the API key (Authorization: Bearer KEY or X-API-Key) unless the client is on "
            "loopback and no key is configured.",
        },
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
            },
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["error"],
                    "properties": {
                        "error": {
                            "type": "object",
                            "required": ["status", "message"],
                            "properties": {
                                "status": {"type": "integer"},
                                "message": {"type": "string"},
                                "request_id": {"type": "string"},
                            },
                        }
                    },
                }
            },
        },
        "security": [{"bearer": []}, {"apiKey": []}],
        "paths": {
            "/health": {
                "get": {
                    "summary": "liveness",
                    "security": [],
                    "responses": {
                        "200": {
                            "description": "up; \"degraded\" while a part fails (the audit log cannot be "
                                           "written): /api/status has the detail",
                            "content": {
                                "application/json": {
                                    "schema": {"type": "object", "properties": {
                                        "status": {"enum": ["ok", "degraded"]},
                                        "failing": {"type": "array", "items": {"type": "string"}}}}
                                }
                            },
                        }
                    },
                }
            },
            "/ready": {
                "get": {
                    "summary": "readiness: the store answers (503 with the reason while it does not)",
                    "security": [],
                    "responses": {
                        "200": {
                            "description": "the store answers: PostgreSQL within 2 s, or the SQLite state "
                                           "directory takes a write",
                            "content": {"application/json": {"schema": {
                                "type": "object", "properties": {"status": {"const": "ready"}}}}},
                        },
                        "503": {
                            "description": "the store does not answer: a load balancer should send this node "
                                           "nothing until it is ready again",
                            "content": {"application/json": {"schema": {
                                "type": "object", "required": ["status", "reason"],
                                "properties": {"status": {"const": "unready"}, "reason": {"type": "string"}}}}},
                        },
                    },
                }
            },
            "/api/status": {
                "get": {"summary": "version, uptime, agents, MCP server states, A2A peers, counters (monotonic "
                               "totals: http_requests, http_errors, tool_calls, tool_errors, model_calls)",
                    "responses": _ok("status")}
            },
            "/api/tools": {"get": {"summary": "every tool agents can call", "responses": _ok("tools")}},
            "/api/mcp/servers": {
                "get": {
                    "summary": "configured and connected MCP servers",
                    "responses": _ok("servers", {"type": "object", "required": ["configured", "connected"]}),
                }
            },
            "/api/mcp/servers/{name}/restart": {
                "post": {
                    "summary": "reconnect one MCP server now; a failed one is revived with a fresh restart budget",
                    "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}],
                    "responses": {
                        **_ok("the server's status as the restart begins",
                              {"type": "object", "required": ["name", "state", "last_error", "restarts"]}),
                        "404": _ERROR,
                        "409": _ERROR,
                    },
                }
            },
            "/api/agents": {"get": {"summary": "configured agents", "responses": _ok("agents")}},
            "/api/agents/{name}/message": {
                "post": {
                    "summary": "send an agent a message",
                    "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["message"],
                                    "additionalProperties": False,
                                    "properties": {"message": {"type": "string"}, "context_id": {"type": "string"}},
                                }
                            }
                        },
                    },
                    "responses": {
                        **_ok("the agent's reply", {"type": "object", "required": ["agent", "context_id", "text"]}),
                        "400": _ERROR,
                        "404": _ERROR,
                        "502": _ERROR,
                    },
                }
            },
            "/api/agents/{name}/stream": {
                "post": {
                    "summary": "send an agent a message and follow the run: an SSE stream of text, tool (a call "
                               "starts or ends), approval and approval_done (a call waits for a person: answer with "
                               "POST /api/approvals/{id}), then reply or error ({status, message})",
                    "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}],
                    "requestBody": {"required": True, "content": {"application/json": {"schema": {
                        "type": "object", "required": ["message"], "additionalProperties": False,
                        "properties": {"message": {"type": "string"}, "context_id": {"type": "string"}}}}}},
                    "responses": {**_ok("the run's events", {"type": "string"}, "text/event-stream"),
                                  "400": _ERROR, "404": _ERROR},
                }
            },
            "/api/tools/{name}/call": {
                "post": {
                    "summary": "call one tool through the pipeline: an SSE stream of approval, approval_done, "
                               "then result (a tool result: text, is_error, structured, content) or error",
                    "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}],
                    "requestBody": {"required": True, "content": {"application/json": {"schema": {
                        "type": "object", "additionalProperties": False,
                        "properties": {"arguments": {"type": "object"}, "timeout_secs": {"type": "number"}}}}}},
                    "responses": {**_ok("the call's events", {"type": "string"}, "text/event-stream"),
                                  "400": _ERROR},
                }
            },
            "/api/audit": {
                "get": {"summary": "the last audit records, newest last, as raw JSON lines",
                        "parameters": [{"name": n, "in": "query", "required": False, "schema": sch} for n, sch in (
                            ("n", {"type": "integer", "default": 20, "maximum": 10000}),
                            ("agent", {"type": "string"}), ("tool", {"type": "string"}),
                            ("outcome", {"type": "string"}))],
                        "responses": {**_ok("records", {"type": "object", "required": ["records"]}),
                                      "400": _ERROR, "404": _ERROR}}
            },
            "/api/audit/verify": {
                "get": {"summary": "check the audit log's hash chain (summary, ok, problems, ...)",
                        "responses": {**_ok("the report", {"type": "object", "required": ["summary", "ok"]}),
                                      "404": _ERROR}}
            },
            "/api/conversations": {
                "get": {"summary": "conversations, most recent first (context_id, agent, messages, first, last, "
                                   "preview)", "responses": _ok("conversations")}
            },
            "/api/conversations/{id}": {
                "get": {"summary": "one conversation's messages, oldest first (role, agent, content, time)",
                        "parameters": [_ID], "responses": {**_ok("the conversation"), "404": _ERROR}},
                "delete": {"summary": "forget one conversation", "parameters": [_ID],
                           "responses": {**_ok("how many messages went"), "404": _ERROR}}
            },
            "/api/approvals": {
                "get": {
                    "summary": "tool calls waiting for a person's approval (newest first)",
                    "parameters": [{"name": "state", "in": "query", "required": False,
                                    "schema": {"enum": ["pending", "approved", "denied", "expired", "all"]}}],
                    "responses": {**_ok("approvals", {"type": "object", "required": ["approvals"]}), "400": _ERROR},
                }
            },
            "/api/approvals/{id}": {
                "get": {
                    "summary": "one approval request",
                    "parameters": [_ID],
                    "responses": {**_ok("the request", _APPROVAL), "404": _ERROR},
                },
                "post": {
                    "summary": "approve or deny a pending request (answer a server's question: approve with an "
                               "answer, deny declines, cancel); the waiting call resumes at once",
                    "parameters": [_ID],
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": {
                            "type": "object", "required": ["decision"], "additionalProperties": False,
                            "properties": {"decision": {"enum": ["approve", "deny", "cancel"]},
                                           "scope": {"enum": ["once", "always", "args"], "default": "once"},
                                           "reason": {"type": "string"},
                                           "channel": {"enum": ["http", "terminal", "websocket"], "default": "http"},
                                           "answer": {"type": "object",
                                                      "description": "a question's field values (its form)"},
                                           "digest": {"type": "string",
                                                      "description": "the arguments_sha256 this approval is for: "
                                                                     "another request's is refused (409)"}}}}},
                    },
                    "responses": {**_ok("the decided request", _APPROVAL), "400": _ERROR, "404": _ERROR,
                                  "409": _ERROR},
                },
            },
            "/api/approvals/{id}/arguments": {
                "get": {
                    "summary": "a request's whole arguments: the RFC 8785 bytes its arguments_sha256 names "
                               "(Content-Disposition: attachment)",
                    "parameters": [_ID],
                    "responses": {**_ok("the arguments", {"type": "object"}), "404": _ERROR},
                }
            },
            "/api/echo": {
                "post": {
                    "summary": "answer the JSON body back (load tests, client checks)",
                    "requestBody": {"required": True, "content": _JSON_OBJECT},
                    "responses": {**_ok("the same JSON"), "400": _ERROR, "413": _ERROR},
                }
            },
            "/api/openapi.json": {"get": {"summary": "this document", "responses": _ok("OpenAPI 3.1")}},
            "/api/events": {
                "get": {
                    "summary": "kernel events over a WebSocket (JSON text messages)",
                    "responses": {"101": {"description": "switching to WebSocket"}, "401": _ERROR, "403": _ERROR},
                }
            },
            "/metrics": {
                "get": {
                    "summary": "Prometheus metrics",
                    "responses": _ok("text format 0.0.4", {"type": "string"}, "text/plain"),
                }
            },
            "/mcp": {  # present when [mcp_server] enabled (the default)
                "post": {
                    "summary": "MCP (Streamable HTTP, both eras): tern's agents as tools",
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {"type": "object", "description": "one JSON-RPC 2.0 message"}
                            }
                        },
                    },
                    "responses": {
                        **_ok("the JSON-RPC response, as JSON or as an SSE stream"),
                        "202": {"description": "a notification or response was accepted"},
                        "400": _ERROR,
                        "404": _ERROR,
                        "406": _ERROR,
                    },
                },
                "get": {
                    "summary": "MCP: a session's server-to-client SSE stream",
                    "responses": {
                        **_ok("SSE stream", {"type": "string"}, "text/event-stream"),
                        "405": {"description": "no stream for 2026-07-28 or without a session"},
                    },
                },
                "delete": {"summary": "MCP: end a session", "responses": {**_ok("ended"), "404": _ERROR}},
            },
        },
    }
