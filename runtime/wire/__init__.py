"""Sans-IO wire formats: JSON-RPC 2.0, stream framing (NDJSON, Content-Length), SSE.

Everything here takes bytes or objects and returns bytes, objects or events; nothing
does I/O or imports trio, so it is all tested without sockets (the h11 model). The
trio shells in ``runtime.net`` and the protocol clients and servers move the bytes.
"""

from runtime.wire.framing import (
    HEAD_BYTES as HEAD_BYTES,
    MAX_HEADER_BYTES as MAX_HEADER_BYTES,
    MAX_MESSAGE_BYTES as MAX_MESSAGE_BYTES,
    AutoDecoder as AutoDecoder,
    ContentLengthDecoder as ContentLengthDecoder,
    Frame as Frame,
    Framing as Framing,
    FramingEvent as FramingEvent,
    Garbage as Garbage,
    NdjsonDecoder as NdjsonDecoder,
    Oversized as Oversized,
    detect_framing as detect_framing,
    encode_content_length as encode_content_length,
    encode_ndjson as encode_ndjson,
    encoder_for as encoder_for,
)
from runtime.wire.jsonrpc import (
    INTERNAL_ERROR as INTERNAL_ERROR,
    INVALID_PARAMS as INVALID_PARAMS,
    INVALID_REQUEST as INVALID_REQUEST,
    METHOD_NOT_FOUND as METHOD_NOT_FOUND,
    PARSE_ERROR as PARSE_ERROR,
    BatchNotSupported as BatchNotSupported,
    ErrorObject as ErrorObject,
    ErrorResponse as ErrorResponse,
    InvalidMessage as InvalidMessage,
    Message as Message,
    Notification as Notification,
    Request as Request,
    RequestId as RequestId,
    Response as Response,
    encode as encode,
    error_response as error_response,
    parse as parse,
    sniff_id as sniff_id,
)
from runtime.wire.sse import (
    MAX_EVENT_BYTES as MAX_EVENT_BYTES,
    ServerSentEvent as ServerSentEvent,
    SseDecoder as SseDecoder,
    encode_comment as encode_comment,
    encode_event as encode_event,
)

__all__ = [
    # jsonrpc
    "PARSE_ERROR",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "INVALID_PARAMS",
    "INTERNAL_ERROR",
    "RequestId",
    "Request",
    "Notification",
    "Response",
    "ErrorObject",
    "ErrorResponse",
    "Message",
    "InvalidMessage",
    "BatchNotSupported",
    "encode",
    "parse",
    "error_response",
    "sniff_id",
    # framing
    "MAX_MESSAGE_BYTES",
    "MAX_HEADER_BYTES",
    "HEAD_BYTES",
    "Framing",
    "Frame",
    "Oversized",
    "Garbage",
    "FramingEvent",
    "NdjsonDecoder",
    "ContentLengthDecoder",
    "AutoDecoder",
    "detect_framing",
    "encode_ndjson",
    "encode_content_length",
    "encoder_for",
    # sse
    "MAX_EVENT_BYTES",
    "ServerSentEvent",
    "SseDecoder",
    "encode_event",
    "encode_comment",
]
