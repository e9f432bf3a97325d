# Sourced by scripts: `run_quietly LOG MESSAGE CMD...` runs CMD with its output in LOG and shows
# one short progress line (elapsed time, and ninja's [n/m] when the log has one) until it ends.
# On failure it prints the log's last lines and returns CMD's status.
run_quietly() {
  local log=$1 message=$2
  shift 2
  mkdir -p "$(dirname "$log")"
  "$@" >"$log" 2>&1 &
  local pid=$! start=$SECONDS last=-1 step
  while kill -0 "$pid" 2>/dev/null; do
    local elapsed=$((SECONDS - start))
    step=$(grep -o '\[[0-9]*/[0-9]*\]' "$log" 2>/dev/null | tail -1 || true)
    if [ -t 1 ]; then
      printf '\r%s ... %ds %s   ' "$message" "$elapsed" "$step"
    elif [ $((elapsed / 30)) -ne "$last" ]; then
      last=$((elapsed / 30))
      echo "$message ... ${elapsed}s $step"
    fi
    sleep 1
  done
  local status=0
  wait "$pid" || status=$?
  [ -t 1 ] && printf '\r'
  if [ "$status" -ne 0 ]; then
    echo "$message: failed (exit $status); the end of $log:"
    tail -25 "$log"
    return "$status"
  fi
  echo "$message: done in $((SECONDS - start))s (log: $log)"
}
