"""OpenTelemetry semantic-convention names tern's spans use, in one place.

GenAI (model calls, tool execution, agent runs) and MCP follow the GenAI semantic
conventions (development status, open-telemetry/semantic-conventions-genai); A2A
follows the A2A attributes of the same repository; HTTP, server, network and error
names are the stable general conventions. ``gen_ai.provider.name`` replaced the older
``gen_ai.system``. Span names: ``{operation} {model}`` for a model call (kind CLIENT),
``execute_tool {tool}``, ``invoke_agent {agent}``, ``{mcp.method.name} {tool}`` for MCP
(CLIENT or SERVER), ``{method} {route}`` for HTTP.

Never recorded: prompts, messages, tool arguments and results (``gen_ai.input.messages``
and the like are opt-in in the conventions and carry exactly what must not leave).
"""

from __future__ import annotations

# Resource and scope
SERVICE_NAME = "service.name"
SERVICE_VERSION = "service.version"
SERVICE_INSTANCE_ID = "service.instance.id"
SCOPE_NAME = "tern"

# GenAI: operations (values of gen_ai.operation.name)
OP_CHAT = "chat"
OP_EXECUTE_TOOL = "execute_tool"
OP_INVOKE_AGENT = "invoke_agent"

# GenAI: attributes
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
GEN_AI_REQUEST_TEMPERATURE = "gen_ai.request.temperature"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"  # string[]
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_TYPE = "gen_ai.tool.type"  # "function" (built-in), "extension" (an MCP server's)

# MCP (JSON-RPC)
MCP_METHOD_NAME = "mcp.method.name"
MCP_SESSION_ID = "mcp.session.id"
MCP_PROTOCOL_VERSION = "mcp.protocol.version"
MCP_RESOURCE_URI = "mcp.resource.uri"
JSONRPC_REQUEST_ID = "jsonrpc.request.id"
RPC_RESPONSE_STATUS_CODE = "rpc.response.status_code"
TOOL_ERROR = "tool_error"  # error.type of a CallToolResult with isError

# A2A
A2A_METHOD_NAME = "a2a.method.name"
A2A_PROTOCOL_VERSION = "a2a.protocol.version"
A2A_TASK_ID = "a2a.task.id"
A2A_TASK_STATE = "a2a.task.state"
A2A_MESSAGE_ID = "a2a.message.id"

# HTTP, server, network, errors
HTTP_REQUEST_METHOD = "http.request.method"
HTTP_RESPONSE_STATUS_CODE = "http.response.status_code"
HTTP_ROUTE = "http.route"
URL_PATH = "url.path"
URL_SCHEME = "url.scheme"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
CLIENT_ADDRESS = "client.address"
NETWORK_TRANSPORT = "network.transport"  # "pipe" for stdio, "tcp" for HTTP
NETWORK_PROTOCOL_NAME = "network.protocol.name"
ERROR_TYPE = "error.type"
