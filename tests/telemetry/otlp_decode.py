"""Decodes OTLP trace requests with the official ``opentelemetry-proto`` messages.

Run by the python of ``.peers/otel-venv`` (``peers.otel_proto_python``): reads a JSON list
of base64 request bodies on stdin, prints a JSON list with one plain view per body (ids
in hex, each attribute as ``[oneof field, value]`` so the kind is checked too), and
whether protobuf's own serialization of the parsed message gives back the same bytes
(no unknown field, nothing out of canonical order)."""

import base64
import json
import sys

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


def any_value(value):
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [kind, [any_value(v) for v in value.array_value.values]]
    return [kind, getattr(value, kind) if kind else None]


def attributes(kvs):
    return [[kv.key, any_value(kv.value)] for kv in kvs]


def span(s):
    return {
        "trace_id": s.trace_id.hex(), "span_id": s.span_id.hex(), "trace_state": s.trace_state,
        "parent_span_id": s.parent_span_id.hex(), "flags": s.flags, "name": s.name, "kind": s.kind,
        "start_time_unix_nano": s.start_time_unix_nano, "end_time_unix_nano": s.end_time_unix_nano,
        "attributes": attributes(s.attributes), "dropped_attributes_count": s.dropped_attributes_count,
        "events": [{"time_unix_nano": e.time_unix_nano, "name": e.name, "attributes": attributes(e.attributes),
                    "dropped_attributes_count": e.dropped_attributes_count} for e in s.events],
        "dropped_events_count": s.dropped_events_count, "links": len(s.links),
        "status": {"code": s.status.code, "message": s.status.message, "has": s.HasField("status")},
    }


def view(body):
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    return {
        "resource_spans": [{
            "resource": attributes(rs.resource.attributes),
            "resource_dropped": rs.resource.dropped_attributes_count,
            "scope_spans": [{"scope": {"name": ss.scope.name, "version": ss.scope.version},
                             "spans": [span(s) for s in ss.spans]} for ss in rs.scope_spans],
        } for rs in request.resource_spans],
        "same_bytes": request.SerializeToString() == body,
    }


print(json.dumps([view(base64.b64decode(b)) for b in json.load(sys.stdin)]))
