#!/usr/bin/env python3
"""The local AWS emulator: moto's server on 127.0.0.1 only, with DynamoDB calls one at a time.

moto applies a TransactWriteItems by copying the tables and putting the copy back when a
condition fails; served by several threads at once, a failed transaction can so undo another
request's writes. Real DynamoDB transactions are atomic, so DynamoDB requests are serialised
here; the other services (SQS long polling) keep their threads.

Usage: aws-emulator.py --port PORT
"""
import argparse
import signal
import sys
import threading

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import run_simple


def serialise_dynamodb(app):
    lock = threading.Lock()

    def wrapped(environ, start_response):
        if environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB_"):
            with lock:
                # The body is produced inside the lock too: moto builds it lazily.
                return list(app(environ, start_response))
        return app(environ, start_response)

    return wrapped


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    run_simple(
        "127.0.0.1",
        args.port,
        serialise_dynamodb(DomainDispatcherApplication(create_backend_app)),
        threaded=True,
    )


if __name__ == "__main__":
    main()
