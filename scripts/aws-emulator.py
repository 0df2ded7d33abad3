#!/usr/bin/env python3
"""The local AWS emulator: moto's server on 127.0.0.1 only, with DynamoDB calls one at a time,
and Lambda's event source mappings kept but not acted on.

moto applies a TransactWriteItems by copying the tables and putting the copy back when a
condition fails; served by several threads at once, a failed transaction can so undo another
request's writes. Real DynamoDB transactions are atomic, so DynamoDB requests are serialised
here; the other services (SQS long polling) keep their threads.

It also counts the requests it serves, by service and operation, with the items each DynamoDB
write touches: `GET /overture/requests` answers them as JSON, and `POST /overture/requests/reset`
sets them to zero. The cost figures of the README and `make bench` come from these counts, so
they are what the engine really asked for, not an estimate of it.

moto acts on an event source mapping itself: it receives the queue's messages (counting a
delivery) and, after invoking the function in docker, drops the table stream's records. Here the
functions run under `cargo lambda watch` and the local poller (`overture-local-aws poll`) reads
the mappings and delivers as Lambda does, so moto only records them.

Usage: aws-emulator.py --port PORT
"""
import argparse
import collections
import io
import json
import re
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


SCOPE = re.compile(r"Credential=[^/]+/[^/]+/[^/]+/([^/]+)/")


class Requests:
    """What was asked of the emulator since it started or was last reset."""

    def __init__(self):
        self.lock = threading.Lock()
        self.reset()

    def reset(self):
        with self.lock:
            self.operations = collections.Counter()
            self.items_written = collections.Counter()

    def note(self, service, operation, written):
        with self.lock:
            self.operations[f"{service}:{operation}"] += 1
            if written:
                self.items_written[f"{service}:{operation}"] += written

    def as_json(self):
        with self.lock:
            return json.dumps(
                {"operations": self.operations, "items_written": self.items_written},
                sort_keys=True,
            ).encode()


def operation_of(environ, body):
    """The service and operation a request asks for, as the SDKs send them."""
    scope = SCOPE.search(environ.get("HTTP_AUTHORIZATION", ""))
    service = scope.group(1) if scope else "unknown"
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    if target:
        return service, target.rsplit(".", 1)[-1]
    action = re.search(r"(?:^|&)Action=([A-Za-z]+)", environ.get("QUERY_STRING", ""))
    if not action and body:
        action = re.search(rb"(?:^|&)Action=([A-Za-z]+)", body)
        if action:
            return service, action.group(1).decode()
    if action:
        return service, action.group(1)
    return service, environ.get("REQUEST_METHOD", "GET")


def items_written(operation, body):
    """How many items a DynamoDB write touches (each costs at least one write unit)."""
    if operation in ("PutItem", "UpdateItem", "DeleteItem"):
        return 1
    if operation in ("TransactWriteItems", "BatchWriteItem"):
        try:
            request = json.loads(body)
        except ValueError:
            return 0
        if operation == "TransactWriteItems":
            return len(request.get("TransactItems", []))
        return sum(len(writes) for writes in request.get("RequestItems", {}).values())
    return 0


def counting(app, requests):
    def wrapped(environ, start_response):
        path = environ.get("PATH_INFO", "")
        if path == "/overture/requests":
            start_response("200 OK", [("Content-Type", "application/json")])
            return [requests.as_json()]
        if path == "/overture/requests/reset":
            requests.reset()
            start_response("204 No Content", [])
            return []
        if path.startswith("/moto-api"):
            return app(environ, start_response)
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        service, operation = operation_of(environ, body)
        written = items_written(operation, body) if service == "dynamodb" else 0
        requests.note(service, operation, written)
        return app(environ, start_response)

    return wrapped

def keep_event_source_mappings_inert():
    from moto.awslambda.models import LambdaBackend
    from moto.dynamodb.models import dynamodb_backends
    from moto.sqs.models import sqs_backends

    create = LambdaBackend.create_event_source_mapping

    def recorded_only(self, spec):
        mapping = create(self, spec)
        for queue in sqs_backends[self.account_id][self.region_name].queues.values():
            queue.lambda_event_source_mappings.pop(mapping.function_arn, None)
        for table in dynamodb_backends[self.account_id][self.region_name].tables.values():
            table.lambda_event_source_mappings.pop(mapping.function_arn, None)
        return mapping

    LambdaBackend.create_event_source_mapping = recorded_only


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    keep_event_source_mappings_inert()
    run_simple(
        "127.0.0.1",
        args.port,
        counting(
            serialise_dynamodb(DomainDispatcherApplication(create_backend_app)), Requests()
        ),
        threaded=True,
    )


if __name__ == "__main__":
    main()
