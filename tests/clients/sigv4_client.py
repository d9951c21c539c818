"""boto3 through sluice with the placeholder keys the sandboxed side gets, for
tests/tests/sigv4.rs. Arguments: PROXY CA ENDPOINT OPERATION. The keys come from the
environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN): placeholders.
Prints one line per step; an AWS error prints `error <code> <status>` and exits 1.

S3_ADDRESSING=virtual puts the bucket in the host name. Operations: `s3` (PutObject with botocore's default checksum trailer, GetObject, a larger
PutObject with `Expect: 100-continue`, and a GetObject whose response reflects the signature
headers the origin received); `bedrock` (InvokeModel, body signed).
"""

import hashlib
import json
import os
import sys

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

proxy, ca, endpoint, operation = sys.argv[1:5]
config = Config(
    proxies={"https": proxy},
    s3={"addressing_style": os.environ.get("S3_ADDRESSING", "path")},
    retries={"max_attempts": 1, "mode": "standard"},
    region_name="us-east-1",
)
session = boto3.session.Session()

try:
    if operation == "s3":
        s3 = session.client("s3", endpoint_url=endpoint, config=config, verify=ca)
        small = b"object body " * 100
        s3.put_object(Bucket="bkt", Key="small", Body=small)
        got = s3.get_object(Bucket="bkt", Key="small")["Body"].read()
        print("small", got == small)
        large = bytes(range(256)) * 8192  # 2 MiB
        s3.put_object(Bucket="bkt", Key="large", Body=large)
        got = s3.get_object(Bucket="bkt", Key="large")["Body"].read()
        print("large", hashlib.sha256(got).hexdigest() == hashlib.sha256(large).hexdigest())
        echo = s3.get_object(Bucket="bkt", Key="echo-auth")["Body"].read()
        print("echo", echo.decode())
    elif operation == "bedrock":
        runtime = session.client("bedrock-runtime", endpoint_url=endpoint, config=config, verify=ca)
        body = json.dumps({"prompt": "hello", "numbers": list(range(500))}).encode()
        reply = runtime.invoke_model(
            modelId="anthropic.claude-v2", body=body, contentType="application/json"
        )
        answer = json.loads(reply["body"].read())
        print("bedrock", answer["ok"], answer["sha256"] == hashlib.sha256(body).hexdigest())
    else:
        sys.exit(f"unknown operation {operation}")
except ClientError as e:
    print("error", e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"])
    sys.exit(1)
