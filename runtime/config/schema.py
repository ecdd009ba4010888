"""The shape of config.toml: msgspec Structs, decoded in one step at the edge.

Why Structs: unknown keys are rejected and types are exact when the file is read, and
everything past the loader works with typed, immutable values. Checks a type cannot
express live in ``checks``; turning a decoding error into a sentence, in ``sentences``.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

MiB = 1024 * 1024


class _Section(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """Base of every config table: unknown keys are errors, values are immutable."""


# --- [server] -----------------------------------------------------------------------


class KeyConfig(_Section):
    """``[[server.keys]]``: one named key and what it may do (docs/security-model.md).
    Exactly one of ``key_env``, ``key``, ``key_sha256`` (hex SHA-256 of the key: the file
    holds no secret); none is allowed with ``tls_subject`` (a client certificate only).
    Empty ``scopes``: message (``agents``) and its own tasks."""

    name: str
    key_env: str = ""
    key: str = ""
    key_sha256: str = ""
    scopes: list[str] = []
    agents: list[str] = msgspec.field(default_factory=lambda: ["*"])
    tls_subject: str = ""  # a verified client certificate with this subject (RFC 4514) is this key
    # Budgets of this key's own, across every agent it reaches (0: none; agents' own still apply).
    tokens_per_hour: int = 0
    requests_per_minute: int = 0


class ServerConfig(_Section):
    """The daemon's HTTP server (A2A, POST /mcp, the API).

    With no ``api_key``/``api_key_env``, only tern's own OS user may call it: a loopback
    client whose socket is ours, or one sending the state directory's ``local-token``;
    ``allow_unauthenticated_remote`` lets anyone in (see docs/threat-model.md).

    Connections: at most ``max_connections`` at once, lowered at start to what the
    open-file soft limit leaves after a reserve for files and subprocesses; at most
    ``max_connections_per_client`` from one client, where an IPv6 client is its first
    ``client_ipv6_prefix`` bits (64 by default: one household or server holds a whole
    /64), as it is for ``rate_limit_per_sec``. Above 75% of ``max_connections`` a new or
    idle connection gets 1 s (not ``request_head_timeout_secs``) to start a request.
    Connections before their first request head hold at most a quarter of the slots.
    """

    listen: str = "127.0.0.1:50051"
    api_key: str = ""
    api_key_env: str = ""
    allow_unauthenticated_remote: bool = False
    rate_limit_per_sec: float = 50.0  # per client address; 0 turns rate limiting off
    rate_limit_burst: int = 100
    max_body_bytes: int = 10 * MiB
    max_header_bytes: int = 16 * 1024
    max_connections: int = 1000  # never more than the open-file soft limit allows (see httpd/server.py)
    max_connections_per_client: int = 32  # per client address (IPv6: per prefix); 0 means no per-client cap
    client_ipv6_prefix: int = 64  # IPv6 clients count as one per /64 for the above and the rate limit
    request_head_timeout_secs: float = 10.0
    keep_alive_timeout_secs: float = 5.0
    write_timeout_secs: float = 30.0
    shutdown_grace_secs: float = 10.0
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_ca: str = ""  # PEM: clients may present a certificate signed by it (mTLS)
    tls_client_required: bool = False  # refuse TLS clients without a good certificate
    keys: list[KeyConfig] = []
    cors_origins: list[str] = []
    allowed_hosts: list[str] = []
    # An operator token: a file the daemon writes at start (0640, this group) that loopback clients
    # of any OS user in the group send as the owner's (the system service's operators: docs/deploying.md)
    operator_group: str = ""
    operator_token_file: str = ""


# --- [[mcp_servers]] ------------------------------------------------------------------


class StdioTransport(_Section, tag="stdio", tag_field="type"):
    """A local MCP server started as a subprocess; newline-delimited JSON on stdio.

    ``sandbox``: run it in bubblewrap or Landlock (``"auto"``: bubblewrap when it works
    here, else Landlock; a server whose mode gives no sandbox is not started, never
    started bare). The system directories, the command's own directory, ``cwd``,
    ``readable`` and (for node, npx and npm) ``~/.npm`` are readable; ``cwd`` and
    ``writable`` writable; the network only with ``network = true``. ``"off"`` (the
    default for an entry that does not say, so configs written before it keep running;
    ``tern mcp import`` writes ``"auto"``) runs it as tern's user.
    """

    command: str
    args: list[str] = []
    cwd: str = ""
    sandbox: Literal["auto", "bubblewrap", "landlock", "off"] = "off"
    network: bool = True
    writable: list[str] = []
    readable: list[str] = []


class OAuthConfig(_Section):
    """``[mcp_servers.transport.oauth]``: log in to a remote MCP server with OAuth 2.1.

    With no ``client_id``, tern uses ``client_metadata_url`` (a Client ID Metadata
    Document) where the authorization server reads them, else registers itself (DCR).
    ``client_secret_env`` names the variable holding the secret (never the secret).
    ``grant = "client_credentials"`` is for unattended daemons (no login, no browser);
    with ``private_key_file`` (a P-256 PEM key) the client authenticates with a signed
    JWT (``private_key_jwt``, ES256) instead of a secret.
    ``grant = "jwt_bearer"`` presents a JWT the workload's environment issued (workload
    identity federation) and ``grant = "enterprise_managed"`` exchanges an enterprise
    IdP's ID token at ``idp_token_endpoint`` for an ID-JAG first (SEP-990); either
    JWT is read at each token request from ``assertion_file`` or ``assertion_env``.
    ``dpop``: bind tokens to a key of tern's (RFC 9449) when the authorization server
    offers it (``"auto"``), always, or never.
    The login's loopback callback listens on ``redirect_port`` (0: any free port) unless
    ``redirect_uri`` names another address (then paste the redirect back).
    """

    client_id: str = ""
    client_secret_env: str = ""
    client_metadata_url: str = ""
    scopes: list[str] = []
    grant: Literal["authorization_code", "client_credentials", "jwt_bearer", "enterprise_managed"] = \
        "authorization_code"
    private_key_file: str = ""
    assertion_file: str = ""
    assertion_env: str = ""
    idp_token_endpoint: str = ""
    idp_client_id: str = ""
    idp_client_secret_env: str = ""
    dpop: Literal["auto", "always", "never"] = "auto"
    redirect_port: int = 0
    redirect_uri: str = ""


class HttpTransport(_Section, tag="http", tag_field="type"):
    """A Streamable HTTP MCP server. Header values may name variables: ``${TOKEN}``.
    ``tls_client_cert``/``tls_client_key``: a client certificate for this server only."""

    url: str
    headers: dict[str, str] = {}
    oauth: OAuthConfig | None = None
    tls_client_cert: str = ""
    tls_client_key: str = ""


class SseTransport(_Section, tag="sse", tag_field="type"):
    """A legacy (2024-11-05) HTTP+SSE MCP server."""

    url: str
    headers: dict[str, str] = {}
    oauth: OAuthConfig | None = None
    tls_client_cert: str = ""
    tls_client_key: str = ""


McpTransport = StdioTransport | HttpTransport | SseTransport


def oauth_of(transport: Any) -> OAuthConfig | None:
    """The OAuth settings an MCP server is reached with: its ``oauth`` table, else the
    defaults (log in when the server asks, registering by CIMD or DCR) for an HTTP or SSE
    server that is given no ``Authorization`` header; None for stdio and for a server
    with a static ``Authorization`` header (its owner chose that instead)."""
    if not isinstance(transport, (HttpTransport, SseTransport)):
        return None
    if transport.oauth is not None:
        return transport.oauth
    if any(name.lower() == "authorization" for name in transport.headers):
        return None
    return OAuthConfig()

class SamplingConfig(_Section):
    """``[mcp_servers.sampling]``: the server's ``sampling/createMessage`` requests are
    answered by the model of ``agent`` (an llm agent: its ``[agents.model]`` endpoint,
    model and key; not its prompt or tools), each one decided by the governance policy as
    the pseudo-tool ``mcp_{server}_sampling`` (asked of a person unless a rule says
    otherwise). A request's ``maxTokens`` is cut to ``max_tokens``; at most
    ``requests_per_minute`` are answered (more are refused). Without this table the
    server is not offered sampling at all."""

    agent: str
    max_tokens: int = 1024
    requests_per_minute: int = 10


McpProtocol = Literal["auto", "2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"]


class McpServerEntry(_Section):
    """One external MCP server whose tools become ``mcp_{name}_{tool}``.

    ``timeout_secs`` bounds every request to it, ``tools/call`` included (a call gets
    the smaller of this and the ``[tools]`` timeout; a call the server runs as a task
    gets the ``[tools]`` timeout in all, each of its requests this). ``tools_include``/``tools_exclude``
    are globs matched on the tool's name or its ``mcp_{name}_{tool}`` name, casefolded
    and with ``-`` and ``_`` the same: ``delete_*`` also excludes ``Delete-Repo``.
    ``lock``: how ``tern.lock`` (beside the config, written by ``tern mcp lock``) binds
    this server: ``enforce`` holds a changed or new tool back until a person approves
    it, ``warn`` offers it and says so, ``off`` ignores the lock; unset, ``enforce``
    when a ``tern.lock`` exists, else ``off`` (docs/mcp-lock.md).
    """

    name: str
    transport: McpTransport
    timeout_secs: float = 30.0
    env: list[str] = []
    enabled: bool = True
    restart: Literal["on-failure", "never"] = "on-failure"
    max_restarts: int = 5
    tools_include: list[str] = []
    tools_exclude: list[str] = []
    protocol: McpProtocol = "auto"
    sampling: SamplingConfig | None = None
    lock: Literal["off", "warn", "enforce"] | None = None


# --- [mcp_server] ------------------------------------------------------------------------


class McpPreset(_Section):
    """A call published as a tool of its own: ``tool`` (an exposed name such as
    ``tern_agent_echo``, or a kernel tool) with ``arguments``; with no ``input_schema`` a
    fixed call taking no arguments. ``input_schema`` (a JSON Schema, published as is) makes
    it take the caller's arguments: they fill ``{name}`` in the string values of
    ``arguments`` when those name any; otherwise an agent gets them as its message (JSON)
    and a kernel tool gets them with ``arguments`` laid over them. ``task``: whether a call
    of an agent through it may (optional), must (required) or may not (forbidden) run as a
    task of the MCP tasks extension."""

    name: str
    tool: str
    arguments: dict[str, Any] = {}
    description: str = ""
    input_schema: dict[str, Any] = {}
    task: Literal["optional", "required", "forbidden"] = "optional"


class McpAskQuestion(_Section):
    """One question an ask puts to its MCP caller: a ``form`` (elicitation: ``message``
    and a flat ``schema``), a ``url`` (URL-mode elicitation: the client offers to open
    ``url``, and answers only accept, decline or cancel), a ``sampling`` request
    (``message`` is the user prompt, with ``system`` and ``max_tokens``) or ``roots``
    (the client's roots). ``{name}`` in a
    message is a tool argument or an earlier round's answer. ``optional``: skipped when
    the client cannot answer it; otherwise such a client gets -32021."""

    key: str
    kind: Literal["form", "url", "sampling", "roots"]
    round: int = 1
    message: str = ""
    schema: dict[str, Any] = {}
    url: str = ""
    system: str = ""
    max_tokens: int = 1000
    optional: bool = False


class McpAsk(_Section):
    """A tool that asks its MCP caller (elicitation, sampling, roots; both eras) and
    returns ``reply`` with the answers filled in, or sends it as the ``message`` to the
    exposed tool ``send_to`` (an agent) and returns that tool's result. ``prompt``:
    published as a prompt instead (``prompts/get`` asks, and ``reply`` is the prompt's
    user message). ``task``: whether a client with the MCP tasks extension gets a task
    at once, whose questions it answers with ``tasks/update`` (not with ``send_to``)."""

    name: str
    description: str = ""
    arguments: list[str] = []  # string arguments the tool takes, all required
    questions: list[McpAskQuestion] = []
    reply: str = ""
    send_to: str = ""
    timeout_secs: float = 300.0  # handshake era and tasks: how long one question (a task: a round) waits
    prompt: bool = False
    task: Literal["optional", "required", "forbidden"] = "forbidden"


class McpServerExposure(_Section):
    """What tern itself exposes as an MCP server (``tern mcp``, ``POST /mcp``).

    Agents are exposed as ``tern_agent_{name}``; kernel tools only when allowlisted
    here by glob (``tools``; matched casefolded, with ``-`` and ``_`` the same).
    Nothing dangerous is exposed by default.
    """

    enabled: bool = True
    expose_agents: bool = True
    tools: list[str] = []
    presets: list[McpPreset] = []
    asks: list[McpAsk] = []
    instructions: str = ""
    page_size: int = 100
    # A client whose key lacks the scope "approvals" may answer the approval requests of the
    # calls it made over MCP (by elicitation, or over the API); off: only a key with
    # "approvals" (or the owner) may.
    caller_may_approve: bool = False
    max_sessions: int = 256  # POST /mcp, handshake era: the least recently used idle one goes first
    session_idle_secs: float = 1800.0
    # Connected [[mcp_servers]] (by name) whose resources, templates and prompts are re-exported
    # (a gateway, as kernel tools are with ``tools``); nothing by default.
    upstream: list[str] = []
    max_resource_bytes: int = 1024 * 1024  # resources/read: a larger file is refused


# --- [a2a] -------------------------------------------------------------------------------


class PeerAuth(_Section):
    """``auth = {...}``: the credentials tern presents to an A2A peer or a webhook.

    ``kind = "bearer"``: the token in the variable ``token_env``. ``kind =
    "client_credentials"``: a token from ``token_url`` (RFC 6749 4.4) for ``client_id``,
    whose secret is in ``client_secret_env``, with ``scopes`` and ``audience`` if set;
    cached and refreshed. Without ``token_url`` (or ``scopes``) an A2A peer's card says.
    """

    kind: Literal["bearer", "client_credentials"]
    token_env: str = ""
    token_url: str = ""
    client_id: str = ""
    client_secret_env: str = ""
    scopes: list[str] = []
    audience: str = ""


class ExternalAgent(_Section):
    """An A2A agent elsewhere, discovered at boot from its card. ``auth`` and the
    client certificate (``tls_client_cert``/``tls_client_key``, PEM files) are this
    peer's only; ``kind = "remote"`` agents reach it with them too."""

    name: str
    url: str
    enabled: bool = True
    headers: dict[str, str] = {}
    auth: PeerAuth | None = None
    tls_client_cert: str = ""
    tls_client_key: str = ""
    # Signed cards (docs/signed-cards.md): the peer's card must carry a valid signature by this
    # key (a public JWK, inline JSON or a file) or by a key of this JWKS (fetched, cached).
    card_public_key: str = ""
    card_jwks_url: str = ""


class PushWebhook(_Section):
    """``[[a2a.push_webhooks]]``: credentials for the webhooks clients register whose URL
    starts with ``url_prefix``, when the registration carries none of its own."""

    url_prefix: str
    auth: PeerAuth | None = None
    tls_client_cert: str = ""
    tls_client_key: str = ""


class A2aConfig(_Section):
    """The A2A server. Tasks are kept within ``max_tasks`` tasks and ``max_store_bytes``
    bytes (in memory, and on disk with ``persist_tasks``), the oldest finished ones going
    first; when unfinished tasks fill it, new work is refused. One task (its messages,
    artifacts and status, as JSON) is at most ``max_task_bytes``: a message that would
    pass it is refused. At most ``max_subscribers_per_task`` streams follow one task."""

    enabled: bool = False
    listen_path: str = "/a2a"
    public_url: str = ""
    default_agent: str = ""
    max_tasks: int = 1000
    max_tasks_per_caller: int = 0  # one key's share of max_tasks (0: a tenth); its own oldest go past it
    max_task_bytes: int = 8 * MiB
    max_store_bytes: int = 128 * MiB
    max_subscribers_per_task: int = 32
    persist_tasks: bool = False
    # A task whose agent waits for a person's approval of a tool call stays "working" with a
    # status message naming the approval; true turns it into "input-required" with a data part
    # describing the request, and the caller's next message on the task answers it.
    caller_may_approve: bool = False
    discovery_timeout_secs: float = 30.0
    external_agents: list[ExternalAgent] = []
    push_webhooks: list[PushWebhook] = []
    # The card at /.well-known/agent-card.json carries the 0.3 fields (url, protocolVersion,
    # ...) next to the 1.0 ones, as the SDKs serve it; false serves a strict 1.0 card.
    card_03_fields: bool = True
    # The Ed25519 key tern signs its cards with (a private JWK or PKCS#8 PEM file, 0600);
    # empty: <state dir>/card-signing-key.jwk, made at first use.
    card_signing_key: str = ""


# --- [[agents]] --------------------------------------------------------------------------


class ModelConfig(_Section):
    """An OpenAI-compatible chat completions endpoint (Ollama, llama-server, vLLM...), or
    with ``provider = "mcp-sampling"`` the model of the MCP client that called the agent
    (its sampling; ``model`` is then only a hint, and no endpoint or key is used)."""

    provider: Literal["openai", "mcp-sampling"] = "openai"
    base_url: str = "http://127.0.0.1:11434/v1"
    model: str = ""
    api_key_env: str = ""
    temperature: float | None = None
    max_tokens: int | None = None
    timeout_secs: float = 120.0


class Skill(_Section):
    """An A2A skill descriptor shown on the agent's card."""

    id: str
    name: str
    description: str = ""
    tags: list[str] = []
    examples: list[str] = []


AgentKind = Literal["llm", "echo", "command", "tool", "remote"]


class PromptArgument(_Section):
    """One argument of an ``[[agents.prompts]]`` prompt; ``values`` are what
    ``completion/complete`` offers for it."""

    name: str
    description: str = ""
    required: bool = False
    values: list[str] = []


class PromptMessage(_Section):
    """One message of a prompt: ``text`` (``{argument}`` is replaced by its value), or a
    file of the agent's workspace embedded as a ``resource`` or an ``image`` (a fixed path:
    named here by the config's author, it needs no ``resources`` glob)."""

    role: Literal["user", "assistant"] = "user"
    text: str = ""
    resource: str = ""
    image: str = ""


class AgentPrompt(_Section):
    """A prompt the MCP server offers as ``{agent}/{name}`` (``prompts/list``, ``prompts/get``)."""

    name: str
    description: str = ""
    arguments: list[PromptArgument] = []
    messages: list[PromptMessage] = []


class AgentConfig(_Section):
    name: str
    kind: AgentKind
    description: str = ""
    tools: list[str] = []  # allowlist globs, matched casefolded with - and _ the same
    system_prompt: str = ""
    max_iterations: int = 10
    workspace: str = ""
    model: ModelConfig | None = None
    skills: list[Skill] = []
    # kind = "command": argv run with the message on stdin.
    command: list[str] = []
    timeout_secs: float = 60.0
    max_output_bytes: int = 1 * MiB
    # kind = "command" under A2A: stdout is JSON Lines of task events (docs/a2a-events.md)
    # and the TERN_A2A_* variables say which message and task it is working on.
    a2a_events: bool = False
    # kind = "tool": the one tool called with the message.
    tool: str = ""
    # kind = "remote": the external A2A agent (name from [[a2a.external_agents]]).
    remote: str = ""
    # Taint policy: may this agent pass untrusted content to sensitive tools?
    allow_tainted_sinks: bool = False
    # Governance (docs/governance.md): an access tier narrows the tools the agent may call
    # ("read", "write", "full", an OSSA tier name, or a [[governance.tiers]] name; "" is full).
    access_tier: str = ""
    # Budgets; 0 is no limit. requests_per_minute counts messages sent to the agent;
    # tokens_per_hour the model's usage (estimated when the endpoint reports none);
    # max_tool_calls_per_run caps one run's tool calls (0: [tools] max_calls_per_run).
    requests_per_minute: int = 0
    tokens_per_hour: int = 0
    max_tool_calls_per_run: int = 0
    # MCP server: workspace files offered read-only as resources (globs on the relative path,
    # fnmatch: "*" crosses "/"; nothing by default), and prompts.
    resources: list[str] = []
    prompts: list[AgentPrompt] = []


# --- [tools], [security], [state] --------------------------------------------------------


class ShellRule(_Section):
    """One pinned command for ``shell_exec`` (``[[tools.shell_rules]]``), matched on the
    whole argv: ``program`` as in ``shell_allowlist`` (a bare name found on PATH, or an
    absolute path); ``args`` one glob per argument (``fnmatch``: ``*`` matches anything,
    options too; ``[!-]*`` matches anything but an option), so ``argv[1:]`` must have
    exactly that many arguments; ``rest``, when set, the glob that every further argument
    must match (empty, the default: no further arguments); ``stdin`` whether the call may
    send standard input (off by default: an interpreter reads its program from stdin).
    The way to allow a program that can run other programs (``find``, ``git``, ``sh``...);
    for one, no ``args`` and a ``rest`` that lets options through is refused (it pins nothing)."""

    program: str
    args: list[str] = []
    rest: str = ""
    stdin: bool = False


ShellSandbox = Literal["auto", "bubblewrap", "landlock", "off"]


class ToolsConfig(_Section):
    """Limits of the built-in tools, and ``shell_exec``'s policy.

    ``shell_allowlist``: programs ``shell_exec`` may run with any arguments, by bare name
    or absolute path; a program that can run other programs through its arguments
    (``find -exec``, ``git -c alias.x=!cmd``, ``tar --checkpoint-action``, shells,
    interpreters, ``env``, ``xargs``...) is refused there and must be pinned in
    ``shell_rules`` instead. ``shell_sandbox``: ``"auto"`` (default) runs each program
    in a sandbox (system directories read-only, the workspace writable, a private temp
    directory, no network): bubblewrap when bwrap is on PATH and works, else Landlock
    (Linux 5.13+, nothing to install); ``"bubblewrap"`` or ``"landlock"`` ask for one.
    Where the mode gives none the config is refused at load. ``"off"`` never sandboxes,
    and then only rules that pin every argument to a literal value are accepted.
    ``shell_sandbox_paths``: more directories readable in the sandbox (a toolchain
    outside ``/usr``, say); none by default.
    """

    timeout_secs: float = 60.0
    timeouts: dict[str, float] = {}
    max_result_chars: int = 50_000
    max_calls_per_run: int = 50
    shell_exec_enabled: bool = False
    shell_allowlist: list[str] = []
    shell_rules: list[ShellRule] = []
    shell_sandbox: ShellSandbox = "auto"
    shell_sandbox_paths: list[str] = []
    web_fetch_max_bytes: int = 2 * MiB
    web_fetch_timeout_secs: float = 30.0


class SecurityConfig(_Section):
    """Network and secret policy. Metadata and link-local addresses are always blocked.

    ``audit_required``: refuse every tool call (a tool error naming the cause) while the
    audit log (``<state dir>/audit.jsonl``) cannot be written. Off (the default), calls
    go on, and the failure is counted, logged once a minute and shown by ``/health``
    ("degraded"), ``/api/status`` and ``tern status``.
    """

    block_private_networks: bool = False
    block_loopback: bool = False
    web_fetch_allow_private: bool = False
    redact_env: list[str] = []
    redact: list[str] = []
    audit_required: bool = False


# --- [governance], [scripts] -------------------------------------------------------------

Decision = Literal["allow", "ask", "deny"]
#: The access tiers an agent may name without defining them, and the OSSA names for them.
PRESET_TIERS = ("read", "write", "full")
OSSA_TIERS = {"tier_1_read": "read", "tier_2_write_limited": "write", "tier_3_full_access": "full",
              "tier_4_policy": "full"}


class ApprovalRule(_Section):
    """One policy rule (``[[governance.rules]]``): a call of a tool matching ``tool`` by an
    agent matching ``agent`` (globs, casefolded, ``-`` and ``_`` the same; the operator,
    ``tern call`` or an MCP client calling a kernel tool, is the agent ``""``, which ``*``
    matches) is allowed, asked of a person, or denied. The first matching rule wins."""

    tool: str
    decision: Decision
    agent: str = "*"
    # "ask": how long its request waits for a person before it is denied (0: the
    # [governance] approval_timeout_secs); a short wait suits unattended callers.
    wait_secs: float = 0.0


class AccessTier(_Section):
    """A named tier of its own (``[[governance.tiers]]``): the tool globs an agent of this
    tier may call at most (its ``tools`` still apply too)."""

    name: str
    tools: list[str]


class NotifyChannel(_Section):
    """``[[governance.notify]]``: a way to reach a person who is not watching when a tool
    call waits for approval, with one-time approve and deny links to ``[governance]
    public_url`` (docs/approvals-notify.md). ``kind = "webhook"``: a JSON POST to ``url``,
    signed with the secret in ``secret_env`` if set; ``"ntfy"``: a message to ``topic`` on
    the ntfy server ``url`` (https://ntfy.sh by default), with the token in ``token_env``
    if set; ``"smtp"``: an email to ``to`` from ``mail_from`` through ``host``:``port``
    (STARTTLS by default; ``tls = "implicit"`` for port 465), logging in as ``username``
    with the password in ``password_env``. Secrets only ever come from variables. Targets
    go through the SSRF guard; a private or loopback address only with ``allow_private``.
    ``after_secs``: notify only when the request is still pending then (0: at once)."""

    name: str
    kind: Literal["webhook", "ntfy", "smtp"]
    url: str = ""
    secret_env: str = ""
    topic: str = ""
    token_env: str = ""
    host: str = ""
    port: int = 587
    tls: Literal["starttls", "implicit", "none"] = "starttls"
    username: str = ""
    password_env: str = ""
    mail_from: str = ""
    to: list[str] = []
    after_secs: float = 0.0
    timeout_secs: float = 15.0
    allow_private: bool = False


class GovernanceConfig(_Section):
    """Who may run what without a person saying yes.

    With no rule matching a call, tern asks for ``shell_exec``, ``script_run`` and any
    tool annotated ``destructiveHint: true``, and allows the rest. A request waits at
    most ``approval_timeout_secs`` (then it is denied); an agent has at most
    ``max_pending_per_agent`` requests waiting (more are denied at once)."""

    rules: list[ApprovalRule] = []
    tiers: list[AccessTier] = []
    approval_timeout_secs: float = 300.0
    max_pending_per_agent: int = 5
    # What one key's runs may fill: requests waiting at once, decided requests kept (the
    # oldest go first); every decided request goes after approval_retention_days.
    max_pending_per_caller: int = 10
    max_kept_per_caller: int = 1000
    approval_retention_days: float = 30.0
    # Approvals that find a person who is not watching: channels that carry one-time
    # approve/deny links, and the base URL those links start with as a phone reaches tern
    # ("": http://<server listen address>, which only a browser on this machine reaches).
    notify: list[NotifyChannel] = []
    public_url: str = ""


class ScriptsConfig(_Section):
    """Approved scripts (the ``script_*`` tools, on when ``dir`` is set): executable files
    in ``dir``, run only while their SHA-256 is in ``allow`` (name -> hex digest) or was
    approved with ``tern scripts approve NAME``; any change to a file makes it pending again."""

    dir: str = ""
    allow: dict[str, str] = {}
    timeout_secs: float = 60.0
    max_output_bytes: int = 1 * MiB


class StateConfig(_Section):
    """Where tern keeps conversations, tasks, audit logs and workspaces, and the daemon's
    ``daemon.json`` and ``local-token``. Must be owned by tern's user and not group- or
    world-writable (``tern serve`` refuses it otherwise)."""

    dir: str = ""
    #: Where tasks, conversations and approvals live: one node's SQLite files in ``dir``
    #: (the default), or a PostgreSQL database several nodes share (docs/scale-out.md).
    store: Literal["sqlite", "postgres"] = "sqlite"
    #: ``postgresql://user:${PGPASSWORD}@host:5432/tern``: ``${VAR}`` is taken from tern's
    #: environment at boot (a literal password is masked wherever the config is shown).
    postgres_url: str = ""
    pool_size: int = msgspec.field(default=8)  # connections (and worker threads) to PostgreSQL at most
    lease_secs: float = 15.0  # how soon another node fails the live tasks of a node that died
    node_id: str = ""  # this node's name in the shared store (default: host-pid-random)


# --- [telemetry] -------------------------------------------------------------------------


class TelemetryConfig(_Section):
    """OpenTelemetry traces, exported as OTLP/HTTP protobuf to ``otlp_endpoint`` (off when
    empty: nothing is imported, nothing recorded). The endpoint is the collector's base URL
    (``/v1/traces`` is added) or the full traces URL. Header values may name variables
    (``${TOKEN}``) and are masked like every secret. Ended spans wait in a queue of at most
    ``max_queue_spans`` spans and ``max_queue_bytes`` bytes (more are dropped and counted) and
    leave in requests of at most ``batch_spans`` spans, one at a time, each given
    ``export_timeout_secs``. See docs/tracing.md."""

    otlp_endpoint: str = ""
    service_name: str = "tern"
    sampling_ratio: float = 1.0
    headers: dict[str, str] = {}
    max_queue_spans: int = 8192
    max_queue_bytes: int = 4 * MiB
    batch_spans: int = 2048  # Python pays about 1 ms of CPU per request: fewer, larger ones
    export_timeout_secs: float = 10.0


# --- [[triggers]] ------------------------------------------------------------------------


class TriggerSink(_Section):
    """``[triggers.sink]``: where a run's reply goes: a ``file`` of the agent's workspace
    (``path``, a template; links never followed out), a ``webhook`` (``url``, POSTed JSON
    through the SSRF guard) or an ``agent`` (a local agent or an external A2A agent's name)."""

    kind: Literal["file", "webhook", "agent"]
    path: str = ""
    url: str = ""
    agent: str = ""


class TriggerConfig(_Section):
    """One ``[[triggers]]`` entry: ``agent`` is sent ``message`` (a template) when the
    trigger fires: on a ``schedule`` (exactly one of ``cron`` or ``every``, in
    ``timezone``), on a signed ``webhook`` (``POST /hooks/{name}``) or when files change
    under ``path`` of the agent's workspace (``watch``). Runs overlap per ``overlap``;
    ``max_failures`` failed runs in a row pause the trigger until ``tern triggers resume``.
    See docs/triggers.md."""

    name: str
    agent: str
    message: str
    kind: Literal["schedule", "webhook", "watch"]
    # schedule
    cron: str = ""
    every: str = ""
    timezone: str = "UTC"
    jitter_secs: float = 0.0
    catch_up: Literal["none", "one", "all"] = "none"
    catch_up_limit: int = 10
    # webhook
    secret_env: str = ""
    timestamp_header: str = ""
    replay_window_secs: float = 300.0
    max_body_bytes: int = 1 * MiB
    rate_limit_per_min: int = 60
    # watch
    path: str = ""
    interval_secs: float = 2.0
    debounce_secs: float = 1.0
    max_files: int = 10_000
    # every kind
    overlap: Literal["skip", "queue", "parallel"] = "skip"
    max_queued: int = 10
    max_parallel: int = 4
    max_failures: int = 5
    timeout_secs: float = 600.0
    sink: TriggerSink | None = None
    # Who a schedule's, a watch's or a signed webhook's run acts for: the owner ("", the
    # default) or a key's name ([[server.keys]] or `tern keys add`), whose agents bound it.
    # An unsigned webhook's run acts for the key that posted it.
    run_as: str = ""


class Config(_Section):
    server: ServerConfig = ServerConfig()
    mcp_servers: list[McpServerEntry] = []
    mcp_server: McpServerExposure = McpServerExposure()
    a2a: A2aConfig = A2aConfig()
    agents: list[AgentConfig] = []
    tools: ToolsConfig = ToolsConfig()
    security: SecurityConfig = SecurityConfig()
    governance: GovernanceConfig = GovernanceConfig()
    scripts: ScriptsConfig = ScriptsConfig()
    state: StateConfig = StateConfig()
    telemetry: TelemetryConfig = TelemetryConfig()
    triggers: list[TriggerConfig] = []
