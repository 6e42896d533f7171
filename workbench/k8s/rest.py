"""Plain-JSON calls through a `kubernetes.client.ApiClient`.

The generated client validates and builds a model object for every call; the emulator and
the control plane only need dicts, many times a second, so they go through the ApiClient's
own authentication and connection pool but skip the models. Every request's outcome goes to
`outage.OUTAGES`, so an apiserver outage is one log line, not one per failed request.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from .outage import OUTAGES, install, no_answer, with_backoff

STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"


class Rest:
    def __init__(self, api_client: ApiClient) -> None:
        self.api_client = api_client
        install()

    def request(self, method: str, path: str, body: Any = None, *, query: dict | None = None,
                content_type: str = "application/json", timeout: float | None = 30.0,
                stream: bool = False):
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        params = [(k, v) for k, v in (query or {}).items() if v is not None]
        method_, url, headers, body, post = self.api_client.param_serialize(
            method, path, query_params=params, header_params=headers, body=body,
            auth_settings=["BearerToken"])
        try:
            resp = self.api_client.call_api(method_, url, headers, body, post,
                                            _request_timeout=timeout)
        except Exception as e:
            if no_answer(e):
                OUTAGES.failed(_first_line(e), self.api_client.configuration.host)
            raise
        OUTAGES.ok()
        if stream:
            if not 200 <= resp.status <= 299:
                resp.read()
                raise ApiException.from_response(http_resp=resp, body=resp.data.decode(),
                                                 data=None)
            return resp.response
        data = resp.read()
        if not 200 <= resp.status <= 299:
            raise ApiException.from_response(http_resp=resp, body=data.decode(errors="replace"),
                                             data=None)
        return json.loads(data) if data else None

    def get(self, path: str, **query) -> Any:
        return self.request("GET", path, query=query)

    def post(self, path: str, body: Any) -> Any:
        return self.request("POST", path, body)

    def put(self, path: str, body: Any) -> Any:
        return self.request("PUT", path, body)

    def patch(self, path: str, body: Any, content_type: str = STRATEGIC) -> Any:
        return self.request("PATCH", path, body, content_type=content_type)

    def delete(self, path: str, grace_period_seconds: int | None = None) -> Any:
        body = None
        if grace_period_seconds is not None:
            body = {"kind": "DeleteOptions", "apiVersion": "v1",
                    "gracePeriodSeconds": grace_period_seconds}
        return self.request("DELETE", path, body)

    def watch(self, path: str, resource_version: str, timeout_seconds: int = 300,
              **query) -> Iterator[dict]:
        """Yield watch events (dicts with `type` and `object`) until the server ends the watch.
        An `ERROR` event is yielded as is (its object's `code` is 410 when the version expired)."""
        resp = self.request("GET", path, query={
            "watch": "true", "resourceVersion": resource_version,
            "timeoutSeconds": timeout_seconds, "allowWatchBookmarks": "true", **query},
            timeout=(10, timeout_seconds + 30), stream=True)
        try:
            for events in event_batches(resp):
                yield from events
        finally:
            resp.release_conn()


def _first_line(e: BaseException) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0][:200]


def event_batches(resp) -> Iterator[list[dict]]:
    """The events of a streamed watch response, one list per chunk read (often empty), so a
    reader can check whether to stop between chunks and not only when an event comes."""
    buffer = b""
    for chunk in resp.stream(amt=None, decode_content=False):
        buffer += chunk
        lines = buffer.split(b"\n")
        buffer = lines.pop()  # an incomplete last line waits for the next chunk
        yield [json.loads(line) for line in lines if line.strip()]


def client_from_kubeconfig(path: str | Path, pool_size: int = 32,
                           context: str | None = None) -> ApiClient:
    """An ApiClient for a kubeconfig file (its `context`, default the current one), with a
    connection pool big enough for threads."""
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=str(path), context=context,
                            client_configuration=configuration)
    configuration.connection_pool_maxsize = pool_size
    with_backoff(configuration)
    install()
    return ApiClient(configuration)
