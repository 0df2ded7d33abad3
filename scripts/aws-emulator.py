#!/usr/bin/env python3
"""The local AWS emulator: moto's server on 127.0.0.1 only, with DynamoDB calls one at a time,
and Lambda's event source mappings kept but not acted on.

moto applies a TransactWriteItems by copying the tables and putting the copy back when a
condition fails; served by several threads at once, a failed transaction can so undo another
request's writes. Real DynamoDB transactions are atomic, so DynamoDB requests are serialised
here; the other services (SQS long polling) keep their threads.

It also counts the requests it serves, by service and operation, with the items each DynamoDB
write touches, in all and by the app id a client sets (`AWS_SDK_UA_APP_ID`, sent in its user
agent), with the DynamoDB request units each app's requests would cost on AWS (on-demand:
a write unit per 1 KB of an item written, two in a transaction; a strongly consistent read unit
per 4 KB read). `GET /overture/requests` answers them as JSON, and `POST /overture/requests/reset`
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
import os
import re
import signal
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


APP = re.compile(r"(?:^| )app/([^ ]+)")


class Requests:
    """What was asked of the emulator since it started or was last reset."""

    def __init__(self):
        self.lock = threading.Lock()
        self.reset()

    def reset(self):
        with self.lock:
            self.operations = collections.Counter()
            self.items_written = collections.Counter()
            self.by_app = collections.defaultdict(
                lambda: {
                    "operations": collections.Counter(),
                    "dynamodb_read_units": 0,
                    "dynamodb_write_units": 0,
                }
            )

    def note(self, app, service, operation, written, write_units):
        with self.lock:
            key = f"{service}:{operation}"
            self.operations[key] += 1
            if written:
                self.items_written[key] += written
            mine = self.by_app[app]
            mine["operations"][key] += 1
            mine["dynamodb_write_units"] += write_units

    def note_read(self, app, read_units):
        with self.lock:
            self.by_app[app]["dynamodb_read_units"] += read_units

    def as_json(self):
        with self.lock:
            return json.dumps(
                {
                    "operations": self.operations,
                    "items_written": self.items_written,
                    "by_app": self.by_app,
                },
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


def item_units(item, per_kb):
    """Request units for an item of this size: one per started kilobyte, at `per_kb` each."""
    size = len(json.dumps(item))
    return max(1, -(-size // 1024)) * per_kb


def dynamodb_writes(operation, body):
    """How many items a DynamoDB write touches, and the write units it costs on demand."""
    if operation in ("PutItem", "UpdateItem", "DeleteItem"):
        try:
            request = json.loads(body)
        except ValueError:
            return 1, 1
        return 1, item_units(request.get("Item", request.get("Key", {})), 1)
    if operation in ("TransactWriteItems", "BatchWriteItem"):
        try:
            request = json.loads(body)
        except ValueError:
            return 0, 0
        if operation == "TransactWriteItems":
            actions = request.get("TransactItems", [])
            units = 0
            for action in actions:
                for kind in action.values():
                    units += item_units(kind.get("Item", kind.get("Key", {})), 2)
            return len(actions), units
        writes = [w for ws in request.get("RequestItems", {}).values() for w in ws]
        units = sum(
            item_units(
                w.get("PutRequest", {}).get("Item", w.get("DeleteRequest", {}).get("Key", {})), 1
            )
            for w in writes
        )
        return len(writes), units
    return 0, 0


READS = ("GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems")


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
        agent = environ.get("HTTP_X_AMZ_USER_AGENT", "") + " " + environ.get("HTTP_USER_AGENT", "")
        named = APP.search(agent)
        client = named.group(1) if named else "unnamed"
        service, operation = operation_of(environ, body)
        written, write_units = (0, 0)
        if service == "dynamodb":
            written, write_units = dynamodb_writes(operation, body)
        requests.note(client, service, operation, written, write_units)
        answer = app(environ, start_response)
        if service == "dynamodb" and operation in READS:
            answer = list(answer)
            size = sum(len(part) for part in answer)
            # A strongly consistent read costs a unit per started 4 KB it returns.
            requests.note_read(client, max(1, -(-size // 4096)))
        return answer

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


def create_function_urls_in_stacks():
    """moto's CloudFormation has no AWS::Lambda::Url: it skips one, and a stack output reading
    its FunctionUrl then fails. Its Lambda API has function URL configs, so the resource is
    made through that (the URL is recorded, not served, as moto serves no function URL)."""
    from moto.awslambda.models import lambda_backends
    from moto.core.common_models import CloudFormationModel

    class FunctionUrl(CloudFormationModel):
        # moto files every model under the service its module names.
        __module__ = "moto.awslambda.function_urls"

        def __init__(self, config):
            self.config = config

        @staticmethod
        def cloudformation_name_type():
            return ""

        @staticmethod
        def cloudformation_type():
            return "AWS::Lambda::Url"

        @classmethod
        def create_from_cloudformation_json(
            cls, resource_name, cloudformation_json, account_id, region_name, **kwargs
        ):
            properties = cloudformation_json["Properties"]
            backend = lambda_backends[account_id][region_name]
            config = {
                key: properties[key] for key in ("AuthType", "Cors", "InvokeMode") if key in properties
            }
            return cls(backend.create_function_url_config(properties["TargetFunctionArn"], config))

        @property
        def physical_resource_id(self):
            return self.config.function.function_arn

        @classmethod
        def has_cfn_attr(cls, attr):
            return attr in ("FunctionUrl", "FunctionArn")

        def get_cfn_attribute(self, attribute_name):
            return self.config.to_dict()[attribute_name]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    # Straight out: it keeps nothing worth flushing, and a graceful exit could wait on a request's
    # thread or the server's loop, leaving a test's teardown waiting for it.
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    keep_event_source_mappings_inert()
    create_function_urls_in_stacks()
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
