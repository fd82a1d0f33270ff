"""S3 objects Lifeboat never writes, made through a plain boto3 client for tests: a multipart
object with a COMPOSITE CRC32C, and one carrying only a CRC64NVME.

The checksums are computed here and sent as values: botocore computes CRC32C and CRC64NVME
itself only with awscrt, which Lifeboat does not install.
"""

from __future__ import annotations

import base64

import boto3

from lifeboat_dr.kernel.crc32c import crc32c, to_b64

_CRC64NVME_POLY = 0x9A6C9329AC4BC9B5  # reflected


def crc64nvme(data: bytes) -> int:
    """CRC-64/NVME, bit by bit (test-sized inputs): check value 0xAE8B14860A799888."""
    crc = 0xFFFFFFFFFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (_CRC64NVME_POLY if crc & 1 else 0)
    return crc ^ 0xFFFFFFFFFFFFFFFF


def put_composite_multipart(endpoint: str, bucket: str, key: str, data: bytes) -> None:
    """`key` as a one-part multipart upload with a COMPOSITE CRC32C (S3's `…-1` value)."""
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    up = s3.create_multipart_upload(
        Bucket=bucket, Key=key, ChecksumAlgorithm="CRC32C", ChecksumType="COMPOSITE"
    )
    crc = to_b64(crc32c(data))
    r = s3.upload_part(
        Bucket=bucket, Key=key, UploadId=up["UploadId"], PartNumber=1, Body=data, ChecksumCRC32C=crc
    )
    s3.complete_multipart_upload(
        Bucket=bucket,
        Key=key,
        UploadId=up["UploadId"],
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": r["ETag"], "ChecksumCRC32C": crc}]},
    )


def put_crc64nvme_only(endpoint: str, bucket: str, key: str, data: bytes) -> None:
    """`key` written with a CRC64NVME checksum and no CRC32C."""
    value = crc64nvme(data).to_bytes(8, "big")
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    s3.put_object(Bucket=bucket, Key=key, Body=data, ChecksumCRC64NVME=base64.b64encode(value).decode())
