"""A service in Python that writes under a zkfence lock, to PostgreSQL, MySQL/MariaDB, Redis
and an S3-compatible store, with nothing of zkfence but its documented protocol (docs/fences.md)
and the token `zkfence run` hands it:

    zkfence run --lock /locks/orders -- python3 fenced_service.py

Each store refuses a write whose token is below the newest holder's: the store's own error
(SQLSTATE ZF001, a Redis ZF001 error reply, a newer token in the object's header), which this
service reports and never retries. Which stores it writes to is set by its environment:
ZKFENCE_EXAMPLE_POSTGRES (a libpq connection string), ZKFENCE_EXAMPLE_MYSQL
(host:port/database, as user root), ZKFENCE_EXAMPLE_REDIS (a redis:// URL),
ZKFENCE_EXAMPLE_S3 (endpoint/bucket, credentials from the AWS_* variables).

It writes `first <token>` to each store, then `late <token>`; with ZKFENCE_EXAMPLE_PAUSE set it
stops itself in between (SIGSTOP: a GC pause, a frozen VM), after printing `paused <its pid>`,
so that a test can let its lease lapse and a successor write before it goes on. It prints one line per write: `wrote <store>`
or `refused <store> <the store's error>`.
"""

import os
import secrets
import signal
import sys

TOKEN = os.environ["ZKFENCE_TOKEN"]  # plain decimal, from 0 to 9223372036854775807
SCOPE = os.environ["ZKFENCE_LOCK_PATH"]


class Refused(Exception):
    """The store refused the write: a newer holder has claimed the lock path."""


def postgres(conninfo, value):
    import psycopg

    with psycopg.connect(conninfo) as conn:
        try:
            # Pipeline mode: BEGIN, the claim and the write go out together, and COMMIT waits
            # for their answers: the claim costs no round trip. A refused claim aborts the
            # transaction, the server skips the rest, and the refusal is raised here.
            with conn.pipeline(), conn.transaction():
                conn.execute("SELECT zkfence_claim(%s, %s)", (SCOPE, TOKEN))
                conn.execute(
                    "INSERT INTO example (scope, token, value) VALUES (%s, %s, %s)",
                    (SCOPE, int(TOKEN), value),
                )
        except psycopg.Error as err:
            if err.sqlstate == "ZF001":
                raise Refused(f"ZF001 {err.diag.message_primary}") from err
            raise


def mysql(target, value):
    import pymysql

    host_port, database = target.split("/", 1)
    host, port = host_port.split(":")
    from pymysql.constants import CLIENT

    # Multi-statement text: the claim goes with the write, the seal with COMMIT, so the
    # fence costs no round trip. The server stops a batch at its first error.
    conn = pymysql.connect(
        host=host,
        port=int(port),
        user="root",
        database=database,
        client_flag=CLIENT.MULTI_STATEMENTS,
    )
    try:  # PyMySQL runs with autocommit off, as the claim insists
        with conn.cursor() as cur:
            cur.execute(
                "CALL zkfence_claim(%s, %s); "
                "INSERT INTO example (scope, token, value) VALUES (%s, %s, %s)",
                (SCOPE, TOKEN, SCOPE, int(TOKEN), value),
            )
            while cur.nextset():  # every statement's outcome, errors included
                pass
            cur.execute("CALL zkfence_seal(%s); COMMIT", (SCOPE,))
            while cur.nextset():
                pass
    except pymysql.err.MySQLError as err:
        conn.rollback()  # and SET SESSION TRANSACTION READ WRITE, were this connection kept
        # PyMySQL gives (error number, message), not the SQLSTATE: a SIGNAL is error 1644,
        # and zkfence's refusal message starts "zkfence: refused".
        number, message = (err.args + ("",))[:2]
        if number == 1644 and str(message).startswith("zkfence: refused"):
            raise Refused(f"ZF001 {message}") from err
        raise
    finally:
        conn.close()


def redis_store(url, value):
    import redis

    r = redis.Redis.from_url(url)
    fence = "zkfence:fence:{" + SCOPE + "}"
    data = "{" + SCOPE + "}:example"
    try:
        # One call: the compare, then RPUSH data value, in the installed function library.
        r.fcall("zkfence_write", 2, fence, data, TOKEN, 1, 3, "vRPUSH", "k2", "v" + value)
    except redis.ResponseError as err:
        if str(err).startswith("ZF001"):
            raise Refused(str(err)) from err
        raise


def s3(target, value):
    import boto3
    from botocore.exceptions import ClientError

    endpoint, bucket = target.rsplit("/", 1)
    client = boto3.client("s3", endpoint_url=endpoint)
    key = "example" + SCOPE
    ours = int(TOKEN)
    for _ in range(32):
        try:
            got = client.get_object(Bucket=bucket, Key=key)
            body, etag = got["Body"].read(), got["ETag"]
        except ClientError as err:
            if err.response["Error"]["Code"] not in ("NoSuchKey", "404"):
                raise
            body, etag = None, None
        if body is not None:
            header = body.split(b"\n", 1)[0].decode().split(" ")
            seen = int(header[2])  # compare as integers, never as text
            if seen > ours:
                raise Refused(f"the object holds token {seen}")
        line = f"zkfence-fence 1 {ours:019d} {secrets.token_hex(16)} value {SCOPE}\n"
        put = {"Bucket": bucket, "Key": key, "Body": line.encode() + value.encode()}
        if etag is None:
            put["IfNoneMatch"] = "*"
        else:
            put["IfMatch"] = etag
        try:
            client.put_object(**put)
            return
        except ClientError as err:
            if err.response["ResponseMetadata"]["HTTPStatusCode"] in (409, 412):
                continue  # moved since we read it: read and compare again
            raise
    raise RuntimeError("the object kept moving")


def stores():
    found = []
    for name, var, write in [
        ("postgres", "ZKFENCE_EXAMPLE_POSTGRES", postgres),
        ("mysql", "ZKFENCE_EXAMPLE_MYSQL", mysql),
        ("redis", "ZKFENCE_EXAMPLE_REDIS", redis_store),
        ("s3", "ZKFENCE_EXAMPLE_S3", s3),
    ]:
        if os.environ.get(var):
            found.append((name, os.environ[var], write))
    return found


def write_all(value):
    refused = 0
    for name, target, write in stores():
        try:
            write(target, value)
            print(f"wrote {name}", flush=True)
        except Refused as why:
            refused += 1
            print(f"refused {name} {why}", flush=True)
    return refused


def main():
    write_all(f"first {TOKEN}")
    if os.environ.get("ZKFENCE_EXAMPLE_PAUSE"):
        print(f"paused {os.getpid()}", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
    refused = write_all(f"late {TOKEN}")
    sys.exit(3 if refused else 0)


if __name__ == "__main__":
    main()
