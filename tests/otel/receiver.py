"""An OTLP/HTTP receiver for tests/otel.rs: decodes what gm sends to /v1/traces and /v1/metrics
with the official protobuf classes (the opentelemetry-proto package) and appends one JSON line
per span and per metric to a file, in a flat shape the test reads easily.

    python receiver.py OUT_FILE [--status CODE] [--hang] [--grpc]

Prints the port it listens on (127.0.0.1), then serves until killed. --status answers every
export with that status (a collector refusing); --hang never answers (a collector stuck);
--grpc serves OTLP/gRPC instead (grpcio, with the package's generated services).
Every request's path and content type is recorded too (signal "request"), before decoding.
"""

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

LOCK = threading.Lock()


def any_value(v):
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return attributes(v.kvlist_value.values)
    if kind == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, kind)


def attributes(kvs):
    return {kv.key: any_value(kv.value) for kv in kvs}


def spans(request):
    for rs in request.resource_spans:
        resource = attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                yield {
                    "signal": "span",
                    "name": s.name,
                    "kind": s.kind,
                    "traceId": s.trace_id.hex(),
                    "spanId": s.span_id.hex(),
                    "parentSpanId": s.parent_span_id.hex(),
                    "start": s.start_time_unix_nano,
                    "end": s.end_time_unix_nano,
                    "attributes": attributes(s.attributes),
                    "status": {"code": s.status.code, "message": s.status.message},
                    "scope": ss.scope.name,
                    "resource": resource,
                }


def metrics(request):
    for rm in request.resource_metrics:
        resource = attributes(rm.resource.attributes)
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                kind = m.WhichOneof("data")
                data = getattr(m, kind)
                points = []
                for p in data.data_points:
                    point = {"attributes": attributes(p.attributes)}
                    if kind in ("histogram", "exponential_histogram"):
                        point["count"] = p.count
                        point["sum"] = p.sum
                    else:
                        point["value"] = getattr(p, p.WhichOneof("value"))
                    points.append(point)
                yield {
                    "signal": "metric",
                    "name": m.name,
                    "unit": m.unit,
                    "kind": kind,
                    "monotonic": getattr(data, "is_monotonic", None),
                    "points": points,
                    "resource": resource,
                }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--status", type=int, default=200)
    parser.add_argument("--hang", action="store_true")
    parser.add_argument("--grpc", action="store_true")
    args = parser.parse_args()

    def write(records):
        with LOCK, open(args.out, "a", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")

    if args.grpc:
        serve_grpc(write)
        return

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            write([{"signal": "request", "path": self.path, "contentType": self.headers.get("Content-Type")}])
            if args.hang:
                time.sleep(3600)
                return
            if args.status != 200:
                self.send_response(args.status)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if self.path == "/v1/traces":
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                write(spans(request))
            elif self.path == "/v1/metrics":
                request = ExportMetricsServiceRequest()
                request.ParseFromString(body)
                write(metrics(request))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    sys.stdout.close()
    server.serve_forever()


def serve_grpc(write):
    from concurrent import futures

    import grpc
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

    class Traces(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request, context):
            write([{"signal": "request", "path": "grpc:traces", "contentType": "application/grpc"}])
            write(spans(request))
            return trace_service_pb2.ExportTraceServiceResponse()

    class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
        def Export(self, request, context):
            write([{"signal": "request", "path": "grpc:metrics", "contentType": "application/grpc"}])
            write(metrics(request))
            return metrics_service_pb2.ExportMetricsServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    sys.stdout.close()
    server.wait_for_termination()


if __name__ == "__main__":
    main()
