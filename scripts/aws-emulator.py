#!/usr/bin/env python3
"""The local AWS emulator: moto's server on 127.0.0.1 only, with DynamoDB calls one at a time,
and Lambda's event source mappings kept but not acted on.

moto applies a TransactWriteItems by copying the tables and putting the copy back when a
condition fails; served by several threads at once, a failed transaction can so undo another
request's writes. Real DynamoDB transactions are atomic, so DynamoDB requests are serialised
here; the other services (SQS long polling) keep their threads.

moto acts on an event source mapping itself: it receives the queue's messages (counting a
delivery) and, after invoking the function in docker, drops the table stream's records. Here the
functions run under `cargo lambda watch` and the local poller (`overture-local-aws poll`) reads
the mappings and delivers as Lambda does, so moto only records them.

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
        serialise_dynamodb(DomainDispatcherApplication(create_backend_app)),
        threaded=True,
    )


if __name__ == "__main__":
    main()
