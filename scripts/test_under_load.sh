#!/usr/bin/env bash
# The whole suite (`make test`, or the make target given as $TARGET) with one busy process per core
# beside it, RUNS times: what CI meets on a busy machine. Tests whose outcome depends on which rank,
# process or thread the scheduler wakes first fail here and pass alone. Not part of CI (each run takes
# about twice the suite's time); run it once per change to launching, timeouts or error collection.
# Each run's log goes to out/test-under-load-<i>.log; the last line says how many runs passed.
set -uo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-1}
TARGET=${TARGET:-test}
BUSY=${BUSY:-$(nproc)}
mkdir -p out
busy=()
stop_busy() { for p in "${busy[@]}"; do kill "$p" 2>/dev/null; done; busy=(); }
trap 'stop_busy; exit 130' INT TERM
trap stop_busy EXIT
passed=0
for i in $(seq 1 "$RUNS"); do
  for _ in $(seq 1 "$BUSY"); do sh -c 'while :; do :; done' & busy+=($!); done
  start=$(date +%s)
  make --no-print-directory "$TARGET" > "out/test-under-load-$i.log" 2>&1; rc=$?
  stop_busy
  took=$(( $(date +%s) - start ))
  summary=$(grep -E "^[0-9]+ (passed|failed)|[0-9]+ (passed|failed).* in [0-9.]+s" "out/test-under-load-$i.log" | tr '\n' ' ')
  echo "test-under-load: run $i of $RUNS, $BUSY busy process(es): make $TARGET exit $rc in $((took / 60)) min $((took % 60)) s; $summary"
  [ "$rc" -eq 0 ] && passed=$((passed + 1))
  [ "$rc" -ne 0 ] && grep -E "^(FAILED|ERROR) " "out/test-under-load-$i.log"
done
echo "test-under-load: $passed of $RUNS run(s) passed under load"
[ "$passed" -eq "$RUNS" ]
