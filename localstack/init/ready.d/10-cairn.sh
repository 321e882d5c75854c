#!/bin/bash
# LocalStack init hook (READY stage), mounted by compose.yaml: creates the S3 bucket
# "cairn" and deploys the lambda-hello example as the Lambda function "cairn-hello"
# from bin/lambda-hello.zip, which `make lambda-zip` builds on the host (compose.yaml
# mounts ./bin at /opt/cairn/bin). Safe to run again: existing resources are updated.
# Without the zip the function is skipped with a hint; the bucket is still created.
set -euo pipefail

BUCKET=cairn
FUNCTION=cairn-hello
ZIP=/opt/cairn/bin/lambda-hello.zip # bin/lambda-hello.zip on the host

awslocal s3 mb "s3://$BUCKET" 2>/dev/null || echo "bucket $BUCKET exists"

if [[ ! -f "$ZIP" ]]; then
	echo "cairn: $ZIP not found: run 'make lambda-zip' on the host, then 'docker compose restart localstack'" >&2
	exit 0
fi

if awslocal lambda get-function --function-name "$FUNCTION" >/dev/null 2>&1; then
	awslocal lambda update-function-code --function-name "$FUNCTION" --zip-file "fileb://$ZIP" >/dev/null
	awslocal lambda wait function-updated-v2 --function-name "$FUNCTION"
else
	# LocalStack does not check the role, but the API requires one.
	awslocal lambda create-function \
		--function-name "$FUNCTION" \
		--runtime provided.al2023 \
		--handler bootstrap \
		--architectures x86_64 \
		--timeout 30 \
		--memory-size 128 \
		--role arn:aws:iam::000000000000:role/cairn-lambda \
		--zip-file "fileb://$ZIP" >/dev/null
	awslocal lambda wait function-active-v2 --function-name "$FUNCTION"
fi
echo "cairn: deployed Lambda function $FUNCTION from $ZIP"
