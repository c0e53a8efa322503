"""An OTLP/HTTP sink for the telemetry benchmarks (docs/benchmarks.md): reads
each export and answers 200 without decoding it, so what it costs the machine
is the HTTP exchange only.

    python3 scripts/bench/otlp_sink.py 14318
"""

import sys
from http.server import BaseHTTPRequestHandler, HTTPServer


class Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


HTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
