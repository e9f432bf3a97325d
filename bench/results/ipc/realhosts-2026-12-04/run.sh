#!/usr/bin/env bash
# One device call for s35-realhosts: build, the relay gtests, hosts (2x2 + faults incl. release),
# then the module and FSDP2 parity over ipc with emulated hosts, in what time is left.
set -u
start=$(date +%s)
B=build-ipc
left() { echo $(( ${BUDGET:-185} - ($(date +%s) - start) )); }
(
  OUT=$OUT/b BUILD_DIR=$B STEPS=build EXTRA_TARGETS="tide_cuda_sequence_tests" bash scripts/device/ipc.sh
  echo "build done at $(( $(date +%s) - start ))s"
  timeout 40 $B/tests/exec/tide_cuda_sequence_tests --gtest_filter='AbortRelay*:*Messages*:*Watch*:RendezvousTransport.*' > $OUT/gtest.txt 2>&1
  echo "gtest rc=$? at $(( $(date +%s) - start ))s"
  OUT=$OUT/h BUILD_DIR=$B STEPS=hosts HOST_SPLITS="2x2" timeout $(left) bash scripts/device/ipc.sh
  echo "hosts done at $(( $(date +%s) - start ))s"
  t=$(left); [[ $t -gt 20 ]] && OUT=$OUT/f BUILD_DIR=$B STEPS="module fsdp" FSDP_SELECT=emulated_hosts FSDP_TIMEOUT=$((t - 5)) timeout $t bash scripts/device/ipc.sh
  echo "fsdp done at $(( $(date +%s) - start ))s"
) > $OUT/driver.txt 2>&1
tar czf $OUT/all.tgz -C $OUT b h f 2>/dev/null; rm -rf $OUT/b $OUT/h $OUT/f
cat $OUT/driver.txt | tail -40
