"""An S3-compatible server for the object-storage tests: moto's server mode on a free loopback port,
with throwaway credentials and the endpoint in the environment (where the lab reads them)."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "glasslab-test",
    "AWS_SECRET_ACCESS_KEY": "glasslab-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@contextlib.contextmanager
def s3_server(buckets: tuple[str, ...] = ("lab",)) -> Iterator[str]:
    """Start moto's S3 server with ``buckets`` made; yields its endpoint URL (also in ``$AWS_ENDPOINT_URL``
    with throwaway credentials, restored afterwards)."""
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    saved = {k: os.environ.get(k) for k in (*CREDENTIALS, "AWS_ENDPOINT_URL")}
    os.environ.update(CREDENTIALS, AWS_ENDPOINT_URL=endpoint)
    try:
        client = boto3.client("s3", endpoint_url=endpoint)
        for bucket in buckets:
            client.create_bucket(Bucket=bucket)
        yield endpoint
    finally:
        server.stop()
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
