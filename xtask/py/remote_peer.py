#!/usr/bin/env python3
"""Python peer of the remote benchmark: plain boto3 range GETs of the bytes stowage reads.

Usage: remote_peer.py BENCH_DIR [--passes N]

BENCH_DIR is the directory the criterion bench leaves behind (STOWAGE_BENCH_DIR). Its ranges.json
names the S3 server (moto's, which `cargo xtask bench` keeps running until this peer is done),
the bucket, the credentials, and the reads of the bench's cold gets in their order: for each key
the object holding its row record and the record's byte range [start, end).

For each read, in that order, --passes times (2): s3.get_object(Bucket, Key, Range="bytes=a-b")
and Body.read(), checking the length. One boto3 client, made and warmed (one request) before
timing: the same connection reuse a long-lived reader has.

Prints one JSON line:

    {"boto3_range_get_rows_per_s": ..., "rows": ..., "seconds": ..., "p50_ms": ..., ...}

Exits 1 with a message when ranges.json is missing or the server does not answer (it is gone
after the bench's own run; `cargo xtask bench --suite remote` runs both against one server).
Needs boto3.
"""

import argparse
import json
import os
import platform
import sys
import time

import boto3
import botocore.exceptions


def fail(message):
    """Stops with exit status 1: the bench data or the server is not there."""
    sys.exit(f"remote_peer: {message}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench_dir")
    parser.add_argument("--passes", type=int, default=2)
    args = parser.parse_args()

    path = os.path.join(args.bench_dir, "ranges.json")
    try:
        with open(path, encoding="utf-8") as file:
            plan = json.load(file)
    except OSError as error:
        fail(f"cannot read {path} (the remote benchmark writes it): {error}")
    endpoint = os.environ.get("STOWAGE_BENCH_S3_ENDPOINT") or plan["endpoint"]
    credentials = plan["credentials"]
    s3 = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=credentials["aws_access_key_id"],
        aws_secret_access_key=credentials["aws_secret_access_key"],
        region_name=credentials["aws_region"],
    )
    bucket = plan["bucket"]
    reads = [(r["object"], r["start"], r["end"]) for r in plan["reads"]]
    if not reads:
        fail(f"{path} lists no reads")

    def read(obj, start, end):
        body = s3.get_object(Bucket=bucket, Key=obj, Range=f"bytes={start}-{end - 1}")["Body"]
        data = body.read()
        if len(data) != end - start:
            fail(f"{obj} bytes {start}..{end}: {len(data)} bytes came back")
        return data

    try:
        read(*reads[0])
    except botocore.exceptions.EndpointConnectionError as error:
        fail(
            f"the S3 server at {endpoint} does not answer ({error}): it lives only while "
            "`cargo xtask bench --suite remote` runs the bench and this peer"
        )
    except botocore.exceptions.ClientError as error:
        fail(f"{bucket}/{reads[0][0]} on {endpoint}: {error}")

    times = []
    start_all = time.perf_counter()
    for _ in range(args.passes):
        for obj, start, end in reads:
            started = time.perf_counter()
            read(obj, start, end)
            times.append(time.perf_counter() - started)
    seconds = time.perf_counter() - start_all
    times.sort()
    rows = len(times)
    print(
        json.dumps(
            {
                "boto3_range_get_rows_per_s": rows / seconds,
                "rows": rows,
                "seconds": seconds,
                "p50_ms": times[rows // 2] * 1e3,
                "endpoint": endpoint,
                "python": platform.python_version(),
                "boto3": boto3.__version__,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
