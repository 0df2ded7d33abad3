"""Sends CloudEvents to `POST /v1/events` with the official CloudEvents SDK's own serializers.

Reads one JSON object on stdin:

    {"url": ".../v1/events", "token": "...", "mode": "binary",
     "events": [{"attributes": {"id": ..., "source": ..., "type": ...}, "data": {...}}]}

`mode` is one of:
- `binary`, `structured`: the SDK's `to_binary_event` / `to_structured_event`
  (`cloudevents.core.bindings.http`), one request per event;
- `binary-v1`, `structured-v1`: the SDK's older API, `to_binary` / `to_structured`
  (`cloudevents.v1.conversion`), one request per event;
- `batch`: one request in batched mode, an array of the events as the SDK's JSON format
  writes each (the SDK has no batch serializer of its own).

An event's `data_text` (with a `datacontenttype` attribute) sends text instead of JSON data.
Prints a JSON list on stdout: for each request, `{"status": ..., "answer": ...}`.
"""

import http.client
import json
import sys
import urllib.parse

from cloudevents.core.bindings import http as ce_http
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent
from cloudevents.v1 import conversion as v1_conversion
from cloudevents.v1.http import CloudEvent as V1CloudEvent


def post(url, token, headers, body):
    """POSTs exactly the SDK's headers and body (urllib would add a form Content-Type)."""
    parsed = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=120)
    try:
        connection.request("POST", parsed.path, body, {**headers, "X-Auth-Token": token})
        response = connection.getresponse()
        text = response.read()
        return {"status": response.status, "answer": json.loads(text) if text else None}
    finally:
        connection.close()


def data_of(spec):
    return spec["data_text"] if "data_text" in spec else spec.get("data")


def main():
    request = json.load(sys.stdin)
    url, token, mode = request["url"], request["token"], request["mode"]
    results = []
    if mode in ("binary", "structured"):
        serialize = (
            ce_http.to_binary_event if mode == "binary" else ce_http.to_structured_event
        )
        for spec in request["events"]:
            message = serialize(CloudEvent(attributes=spec["attributes"], data=data_of(spec)))
            results.append(post(url, token, message.headers, message.body))
    elif mode in ("binary-v1", "structured-v1"):
        serialize = (
            v1_conversion.to_binary if mode == "binary-v1" else v1_conversion.to_structured
        )
        for spec in request["events"]:
            headers, body = serialize(V1CloudEvent(spec["attributes"], data_of(spec)))
            results.append(post(url, token, headers, body))
    elif mode == "batch":
        json_format = JSONFormat()
        bodies = [
            json_format.write(CloudEvent(attributes=spec["attributes"], data=data_of(spec)))
            for spec in request["events"]
        ]
        headers = {"Content-Type": "application/cloudevents-batch+json"}
        results.append(post(url, token, headers, b"[" + b",".join(bodies) + b"]"))
    else:
        sys.exit(f"unknown mode {mode!r}: binary, structured, binary-v1, structured-v1, batch")
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
