"""moto lacks a behaviour of S3 the copies rely on, so the tests' launcher adds it
(`testing.emulators._s3_copy_preconditions`). This test holds the gap open on plain moto, in a
process of its own (the launcher's patch is process-wide): when a moto release checks
CopyObject's destination preconditions itself, it fails, and the patch should go."""

import subprocess
import sys

import pytest

PLAIN_MOTO = """
import boto3
from moto.server import ThreadedMotoServer

server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
host, port = server.get_host_and_port()
s3 = boto3.client("s3", endpoint_url=f"http://{host}:{port}", region_name="us-east-1",
                  aws_access_key_id="test", aws_secret_access_key="test")
s3.create_bucket(Bucket="gap")
s3.put_object(Bucket="gap", Key="src", Body=b"old lineage")
s3.put_object(Bucket="gap", Key="dst", Body=b"new lineage")
try:
    s3.copy_object(Bucket="gap", Key="dst", CopySource={"Bucket": "gap", "Key": "src"}, IfNoneMatch="*")
except s3.exceptions.ClientError as e:
    print("REFUSED", e.response["Error"]["Code"])
else:
    print("LANDED", s3.get_object(Bucket="gap", Key="dst")["Body"].read().decode())
server.stop()
"""


@pytest.mark.processes
def test_plain_moto_ignores_a_create_only_copy_over_an_object_which_s3_refuses():
    done = subprocess.run([sys.executable, "-c", PLAIN_MOTO], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    # S3 answers 412 PreconditionFailed here (botocore's model documents CopyObject's IfNoneMatch)
    assert done.stdout.strip() == "LANDED old lineage", done.stdout
