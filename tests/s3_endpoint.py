"""A real S3 endpoint on localhost for the tests: moto's server in a thread, reached through s3fs
as any S3 is. `endpoint()` starts it once a process; `environment(url)` is what a subprocess
needs to find it (the standard AWS variables, nothing of ours)."""

from __future__ import annotations

import functools
import uuid

from moto.server import ThreadedMotoServer

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@functools.cache
def endpoint() -> str:
    """The endpoint's URL (one server a process, stopped with it)."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return f"http://{host}:{port}"


def environment(url: str | None = None) -> dict[str, str]:
    """The standard variables that point boto and s3fs at the endpoint."""
    return {**CREDENTIALS, "AWS_ENDPOINT_URL": url or endpoint()}


def new_bucket(fs) -> str:
    """A bucket of its own for one test."""
    name = f"test-{uuid.uuid4().hex[:12]}"
    fs.mkdir(name)
    return name
