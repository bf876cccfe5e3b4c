#!/usr/bin/env bash
# GPU call 14 (2026-11-27): the code at 133b1a5 (a signal at start ends the zygote, the ranks leave while the
# reports are written) under tests/gpu, then the whole-process A/B left open by call 13: the code before
# c0e5113 (c669e96, in .whl/before) against this one, minutes apart on the same machine, with 5 rounds
# instead of 3. Logs in $V, packed into $OUT/v14.tar.gz.
R=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=benchmarks/gpu/step.sh
source "$R/benchmarks/gpu/step.sh"
begin v14
gpu_facts
install_wheels
step install-before 60 python3 -m pip install -q --no-index --no-deps --target /tmp/before "$R"/.whl/before/*.whl
[ -z "$NO_TESTS" ] && step gpu-tests 240 python3 -m pytest -m gpu -v -rs -p no:cacheprovider "$R/tests/gpu"
W=$(mktemp -d); cd "$W" || exit 1
step timings 60 clustercheck run gpu-smoke -k gemm --timings --out "$W/t"
step startup 300 python3 "$R/benchmarks/gpu/startup.py" --rounds "${ROUNDS:-5}" --before /tmp/before
cat "$V/steps.txt"; grep -E "passed|failed|error" "$V/gpu-tests.txt" | tail -3
sed -n '/clustercheck timings/,$p' "$V/timings.txt"; grep -v "^  " "$V/startup.txt" | tail -16
