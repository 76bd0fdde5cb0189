#!/usr/bin/env python3
# The local AWS emulator: moto's server with DynamoDB requests serialised, so a conditional write is atomic per item as on DynamoDB.
# Usage: .venv/bin/python infra/aws/moto_server.py -H 127.0.0.1 -p 5000   (infra/aws/moto.sh runs it)
#
# Why: moto's threaded server applies a conditional UpdateItem without holding the item, so under load two
# racing counts can both see the same `remaining` - something DynamoDB, which applies each conditional write
# atomically per item, never does. Such an emulator would report double counts and hangs AWS cannot produce,
# and hide the ones it can. One lock around every DynamoDB and DynamoDB Streams request restores DynamoDB's
# per-item atomicity (and more: all table requests run one at a time). SQS requests - long polls among them -
# never wait behind it, so nothing stalls behind a 20-second ReceiveMessage.
import argparse
import os
import signal
import sys
import threading

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import run_simple


class SerialisedDynamoDB:
    """WSGI middleware: requests whose X-Amz-Target names DynamoDB or DynamoDB Streams run one at a time."""

    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ, start_response):
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if not target.startswith("DynamoDB"):
            return self.app(environ, start_response)
        with self.lock:
            # The body is produced inside the lock: a WSGI app may do its work lazily while it is iterated.
            result = self.app(environ, start_response)
            try:
                body = b"".join(result)
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()
        return [body]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=int(os.environ.get("MOTO_PORT", 5000)))
    args = parser.parse_args()
    os.environ.setdefault("MOTO_PORT", str(args.port))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(args.host, args.port, SerialisedDynamoDB(app), threaded=True)


if __name__ == "__main__":
    main()
