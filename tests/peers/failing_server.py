"""A stand-in OpenAI-compatible server that fails on purpose, for run-level failure tests.

    python tests/peers/failing_server.py PORT MODE

MODE `die`: lists a model, serves the first two completions whole, streams two tokens of the third and
then the whole process exits (a server dying mid-run: later requests find nothing listening). MODE `error`: lists a model and answers every completion with HTTP 500.
"""
import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import os
import sys
import threading

PORT, MODE = int(sys.argv[1]), sys.argv[2]
LOCK, SERVED = threading.Lock(), []


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send_json(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.send_json(200, {"object": "list", "data": [{"id": "failing", "object": "model"}]})

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if MODE == "error":
            self.send_json(500, {"error": {"message": "internal failure", "type": "server_error", "code": 500}})
            return
        with LOCK:
            SERVED.append(1)
            dies = len(SERVED) > 2
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(2 if dies else int(json.loads(body)["max_tokens"])):
            self.chunk(b'data: {"choices": [{"index": 0, "text": "x", "finish_reason": null}]}\n\n')
        if dies:
            os._exit(1)
        self.chunk(b'data: {"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}\n\n')
        self.chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
