#!/usr/bin/env bash
# make demo: start `cairn dev` in a temporary folder, wait until it is ready, deploy and
# run the examples, print the results, stop everything. Exits non-zero if anything
# did not end as expected. The examples' handlers are written on the function SDKs
# (Python, TypeScript, Go: docs/functions.md); they need python3 and node (`make
# tools` installs them).
#
# The lambda-hello example runs under AWS's Lambda Runtime Interface Emulator
# (aws-lambda-rie, which `make demo` installs) unless CAIRN_LAMBDA_ENDPOINT names a
# Lambda API already (LocalStack, say): no AWS account needed.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="$PWD/bin/cairn"
work=$(mktemp -d /tmp/cairn-demo.XXXXXX)
chmod 755 "$work"
log="$work/dev.log"
cleanup() {
	if [[ -n "${dev_pid:-}" ]] && kill -0 "$dev_pid" 2>/dev/null; then
		kill -TERM "$dev_pid"
		wait "$dev_pid" || true
	fi
	stop_emulator
	rm -rf "$work"
}
trap cleanup EXIT

# stop_emulator kills the emulator and the function it runs (which it starts in a
# process group of its own).
stop_emulator() {
	[[ -n "${rie_pid:-}" ]] || return 0
	local child
	for child in $(ps -o pid= --ppid "$rie_pid" 2>/dev/null); do
		kill -KILL -- "-$child" 2>/dev/null || kill -KILL "$child" 2>/dev/null || true
	done
	kill -KILL "$rie_pid" 2>/dev/null || true
	wait "$rie_pid" 2>/dev/null || true
	rie_pid=
}

# free_port prints a port of 127.0.0.1 that nothing listens on (a moment ago).
free_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 40000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
}

# start_emulator runs examples/lambda-hello's function under aws-lambda-rie, on
# free ports, and points `cairn dev` at it (CAIRN_LAMBDA_EMULATOR: any function
# name reaches the emulator's one function, and its errors are read off the payload).
start_emulator() {
	local rie
	rie=$(command -v aws-lambda-rie || echo "$(go env GOPATH)/bin/aws-lambda-rie")
	if [[ ! -x $rie ]]; then
		echo "aws-lambda-rie is not installed: run \`make demo\` (or \`make lambda-emulator\`)" >&2
		exit 1
	fi
	echo "== building the lambda-hello function and starting the Lambda emulator"
	mkdir -p "$work/lambda-hello"
	CGO_ENABLED=0 go build -tags lambda.norpc -o "$work/lambda-hello/bootstrap" ./examples/lambda-hello/function
	local try invoke_port runtime_port
	for try in 1 2 3; do
		invoke_port=$(free_port)
		runtime_port=$(free_port)
		AWS_LAMBDA_FUNCTION_NAME=cairn-hello AWS_LAMBDA_FUNCTION_TIMEOUT=60 \
			"$rie" --runtime-interface-emulator-address "127.0.0.1:$invoke_port" \
			--runtime-api-address "127.0.0.1:$runtime_port" "$work/lambda-hello/bootstrap" \
			>"$work/rie.log" 2>&1 &
		rie_pid=$!
		for _ in $(seq 1 100); do
			if (exec 3<>"/dev/tcp/127.0.0.1/$invoke_port") 2>/dev/null; then
				export CAIRN_LAMBDA_ENDPOINT="http://127.0.0.1:$invoke_port" CAIRN_LAMBDA_EMULATOR=true
				echo "the Lambda emulator listens at $CAIRN_LAMBDA_ENDPOINT"
				return
			fi
			kill -0 "$rie_pid" 2>/dev/null || break
			sleep 0.1
		done
		stop_emulator
	done
	echo "aws-lambda-rie did not start:"
	cat "$work/rie.log"
	exit 1
}

if [[ -z ${CAIRN_LAMBDA_ENDPOINT:-} ]]; then
	start_emulator
fi

echo "== starting cairn dev in $work"
"$BIN" dev --data-dir "$work/data" --listen "127.0.0.1:0" >"$work/dev.out" 2>"$log" &
dev_pid=$!
# Wait for the credentials file (written once the server listens), then for readiness.
for _ in $(seq 1 300); do
	if [[ -s "$work/data/credentials" ]]; then
		# shellcheck disable=SC1091
		source "$work/data/credentials"
		if CAIRN_SERVER="$CAIRN_SERVER" CAIRN_TOKEN="$CAIRN_TOKEN" "$BIN" workflows list >/dev/null 2>&1; then break; fi
	fi
	if ! kill -0 "$dev_pid" 2>/dev/null; then echo "cairn dev exited:"; cat "$log"; exit 1; fi
	sleep 0.1
done
echo "cairn dev is ready at $CAIRN_SERVER"
cat "$work/dev.out"
export CAIRN_SERVER CAIRN_TOKEN
cairn() { "$BIN" "$@"; }

echo "== deploying every example"
for dir in examples/*/; do
	cairn deploy "$dir"
	echo
done
cairn workflows list
echo

failures=0
results=()
# expect NAME OK DETAIL: records a result line; a failed expectation fails the demo.
expect() {
	if [[ $2 == ok ]]; then
		results+=("$(printf '%-14s ok    %s' "$1" "$3")")
	else
		results+=("$(printf '%-14s FAIL  %s' "$1" "$3")")
		failures=$((failures + 1))
	fi
}

# Start one run of each example and wait for it to end; the first line --wait prints
# is the run ID. The run's step table comes from `cairn run get`.
declare -A run_ids
for dir in examples/*/; do
	name=$(basename "$dir")
	[[ $name == events ]] && continue # driven by events: below
	args=()
	[[ $name == hello || $name == lambda-hello ]] && args=(--input '{"name":"ada"}')
	[[ $name == saga ]] && args=(--input '{"gift":false}')
	echo "== run of $name"
	rc=0
	if [[ $name == wait ]]; then
		# A signal step waits for its signal: start, signal, then follow to the end.
		id=$(cairn run start wait)
		cairn run signal "$id" paid --data '{"amount": 5}' || rc=$?
		out=$(cairn run watch "$id" 2>&1) || rc=$?
	else
		out=$(cairn run start "$name" "${args[@]}" --wait 2>&1) || rc=$?
		id=$(printf '%s\n' "$out" | head -1)
	fi
	run_ids[$name]=$id
	cairn run get "$id" || true
	if [[ $rc -ne 0 && $name != saga ]]; then # saga fails on purpose (checked below)
		expect "$name" fail "the run did not succeed: $(printf '%s\n' "$out" | tail -1)"
	fi
	echo
done

# Expectations beyond "succeeded", from the outputs and the step tables.
# (cairn run get exits non-zero for a run that did not succeed: read its table anyway.)
status_of() { { cairn run get "$1" 2>/dev/null || true; } | awk '$1 == "status" { print $2; exit }'; }
output_of() { cairn run output "$1" "$2" || true; }
for name in "${!run_ids[@]}"; do
	st=$(status_of "${run_ids[$name]}")
	if [[ $name == saga ]]; then
		# ship fails: charge then reserve are compensated, notify runs, the run fails.
		table=$({ cairn run get "${run_ids[$name]}" 2>/dev/null || true; } | awk '$1 == "STEP" { t = 1; next } t && NF >= 2 { print $1 "=" $2 }' | tr '\n' ' ')
		want="reserve=succeeded charge=succeeded gift=skipped ship=failed compensate-charge=succeeded compensate-reserve=succeeded notify=succeeded "
		if [[ $st == failed && $table == "$want" ]]; then expect saga ok "failed, compensated: $table"; else expect saga fail "status $st, steps: $table"; fi
		continue
	fi
	[[ $st == succeeded ]] || { expect "$name" fail "status $st, want succeeded"; continue; }
	case $name in
	hello)
		msg=$(output_of "${run_ids[$name]}" join)
		if [[ $msg == *"Hello, ada!"*"Bonjour, ada!"* ]]; then expect hello ok "join: $msg"; else expect hello fail "join: $msg"; fi
		;;
	retry)
		attempts=$({ cairn run get "${run_ids[$name]}" 2>/dev/null || true; } | awk '$1 == "fail" { print $3 }')
		if [[ $attempts == 3/3 ]]; then expect retry ok "fail step: $attempts attempts"; else expect retry fail "fail step: $attempts attempts, want 3/3"; fi
		;;
	fanout)
		want=0
		for n in 1 2 3 4 5 6 7 8; do want=$((want + n * n)); done
		msg=$(output_of "${run_ids[$name]}" join)
		if [[ $msg == *'"sum": '"$want"[,}]* ]]; then expect fanout ok "join: $msg"; else expect fanout fail "join: $msg, want sum $want"; fi
		;;
	lambda-hello)
		msg=$(output_of "${run_ids[$name]}" hello)
		if [[ $msg == *'"greeting"'*'"hello, ada"'* ]]; then expect lambda-hello ok "hello: $msg"; else expect lambda-hello fail "hello: $msg"; fi
		;;
	wait)
		msg=$(output_of "${run_ids[$name]}" paid)
		if [[ $msg == *'"amount"'*5* ]]; then expect wait ok "paid: $msg"; else expect wait fail "paid: $msg"; fi
		;;
	map)
		msg=$(output_of "${run_ids[$name]}" join)
		if [[ $msg == *'"items": 100000'* && $msg == *'"in_order": true'* && $msg == *'"sum": 4999950000'* ]]; then expect map ok "join: $msg"; else expect map fail "join: $msg"; fi
		;;
	large-output)
		msg=$(output_of "${run_ids[$name]}" measure)
		if [[ $msg == *'"bytes": 5242880'[,}]* ]]; then expect large-output ok "measure: $msg"; else expect large-output fail "measure: $msg, want 5242880 bytes"; fi
		;;
	*)
		expect "$name" ok "succeeded"
		;;
	esac
done

# The events example (docs/events.md), each path end to end: order.created starts a
# run; payment.succeeded of its order_id completes its wait (also when sent before the
# run's step began to wait), and ship ships what was paid; order.cancelled cancels.
# started_run prints the run ID in `cairn event send`'s answer ("started  run ID …").
started_run() { awk '$1 == "started" { print $3; exit }'; }
echo "== events: an order paid after its wait began"
out=$(cairn event send order.created --id demo-created-1 --data '{"order_id": "o-1", "amount": 42}')
printf '%s\n' "$out"
paid_run=$(printf '%s\n' "$out" | started_run)
if [[ -z $paid_run ]]; then
	expect events-paid fail "order.created started no run: $out"
else
	for _ in $(seq 1 100); do # until pay is suspended (so the payment resumes it, not buffered)
		[[ $({ cairn run get "$paid_run" 2>/dev/null || true; } | awk '$1 == "pay" { print $2 }') == suspended ]] && break
		sleep 0.1
	done
	out=$(cairn event send payment.succeeded --id demo-pay-1 --data '{"order_id": "o-1", "amount": 42}')
	printf '%s\n' "$out"
	cairn run watch "$paid_run" >/dev/null 2>&1 || true
	cairn run get "$paid_run" || true
	st=$(status_of "$paid_run")
	msg=$(output_of "$paid_run" ship)
	if [[ $out == *"resumed  run $paid_run step pay"* && $st == succeeded && $msg == *'"shipped": "o-1"'* && $msg == *'"payment": "demo-pay-1"'* ]]; then
		expect events-paid ok "resumed by demo-pay-1, ship: $msg"
	else
		expect events-paid fail "status $st, ship: $msg"
	fi
fi
echo
echo "== events: an order paid at once (its payment resumes pay, or waits buffered until pay begins to wait)"
cairn event send order.created --id demo-created-2 --data '{"order_id": "o-2", "amount": 7}' >"$work/created-2"
cairn event send payment.succeeded --id demo-pay-2 --data '{"order_id": "o-2", "amount": 7}'
early_run=$(started_run <"$work/created-2")
if [[ -z $early_run ]]; then
	expect events-early fail "order.created started no run: $(cat "$work/created-2")"
else
	cairn run watch "$early_run" >/dev/null 2>&1 || true
	st=$(status_of "$early_run")
	msg=$(output_of "$early_run" ship)
	if [[ $st == succeeded && $msg == *'"shipped": "o-2"'* && $msg == *'"payment": "demo-pay-2"'* ]]; then
		expect events-early ok "ship: $msg"
	else
		expect events-early fail "status $st, ship: $msg"
	fi
fi
echo
echo "== events: an order cancelled while it waits for its payment"
out=$(cairn event send order.created --id demo-created-3 --data '{"order_id": "o-3", "amount": 9}')
cancel_run=$(printf '%s\n' "$out" | started_run)
out=$(cairn event send order.cancelled --id demo-cancel-3 --data '{"order_id": "o-3"}')
printf '%s\n' "$out"
cairn run watch "$cancel_run" >/dev/null 2>&1 || true
st=$(status_of "$cancel_run")
if [[ -n $cancel_run && $out == *"canceled run $cancel_run"* && $st == canceled ]]; then
	expect events-cancel ok "canceled by demo-cancel-3"
else
	expect events-cancel fail "run ${cancel_run:-none}: status $st; order.cancelled: $out"
fi
echo
cairn event list
echo

for name in hello retry fanout large-output lambda-hello wait saga map; do
	[[ -n ${run_ids[$name]:-} ]] || expect "$name" fail "no run: examples/$name is missing"
done

echo "== results"
printf '%s\n' "${results[@]}" | sort
if [[ $failures -ne 0 ]]; then
	echo "== $failures expectation(s) not met; the end of the server log:"
	tail -50 "$log"
	exit 1
fi
echo "== every run ended as expected"
