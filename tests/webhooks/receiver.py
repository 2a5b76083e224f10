"""A webhook receiver that verifies every request with the Python `standardwebhooks` package
(an implementation of the Standard Webhooks specification independent of askloop's), and
records each outcome as a JSON line: {"ok", "error", "id", "type", "wrongSecretRefused"}.

    receiver.py SECRET OUT_FILE PORT_FILE

Listens on 127.0.0.1 (a free port, written to PORT_FILE); answers 204 to a request that
verifies, 400 to one that does not.
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from standardwebhooks.webhooks import Webhook

secret, out_file, port_file = sys.argv[1:4]
webhook = Webhook(secret)
# Another secret of the same form: the same request must not verify with it.
other = Webhook("whsec_" + "A" * 32)


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        headers = {key.lower(): value for key, value in self.headers.items()}
        record = {"id": headers.get("webhook-id"), "ok": False, "error": None}
        try:
            payload = webhook.verify(body, headers)
            record["ok"] = True
            record["type"] = payload.get("type")
            record["payloadId"] = payload.get("id")
        except Exception as error:  # noqa: BLE001 - every failure is recorded
            record["error"] = repr(error)
        try:
            other.verify(body, headers)
            record["wrongSecretRefused"] = False
        except Exception:  # noqa: BLE001
            record["wrongSecretRefused"] = True
        with open(out_file, "a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")
        self.send_response(204 if record["ok"] else 400)
        self.end_headers()

    def log_message(self, *args):
        pass


server = HTTPServer(("127.0.0.1", 0), Handler)
with open(port_file, "w", encoding="utf-8") as port:
    port.write(str(server.server_address[1]))
server.serve_forever()
