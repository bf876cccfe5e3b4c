#!/usr/bin/env bash
# GPU call 13 (2026-11-27): the end of a run tells the ranks to leave and writes the reports while they go
# (c0e5113), measured against the code before it (c669e96, in .whl/before) on the same machine, minutes apart:
# one `clustercheck run gpu-smoke -k gemm --timings` (where the last seconds go), then
# benchmarks/gpu/startup.py --rounds 3 --before /tmp/before. Logs in $V, packed into $OUT/v13.tar.gz.
R=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=benchmarks/gpu/step.sh
source "$R/benchmarks/gpu/step.sh"
begin v13
install_wheels
step install-before 60 python3 -m pip install -q --no-index --no-deps --target /tmp/before "$R"/.whl/before/*.whl
W=$(mktemp -d); cd "$W" || exit 1
step timings 60 clustercheck run gpu-smoke -k gemm --timings --out "$W/t"
step startup 240 python3 "$R/benchmarks/gpu/startup.py" --rounds "${ROUNDS:-3}" --before /tmp/before
cat "$V/steps.txt"; sed -n '/clustercheck timings/,$p' "$V/timings.txt"; grep -v "^  " "$V/startup.txt" | tail -14
