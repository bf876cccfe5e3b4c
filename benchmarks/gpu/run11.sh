#!/usr/bin/env bash
# GPU call 11 (2026-11-27): signed evidence from a GPU run (docs/evidence.md said "no GPU run was signed").
# The wheel installed as run6.sh does, with securesystemslib, cryptography, cffi and pycparser carried in
# .whl (the image lacks them), then from an empty directory:
#   an Ed25519 key pair made by openssl; gpu-smoke and the one-GPU quick gate run with --sign, each
#   verified with the public key (every metric and verdict re-judged from the record);
#   a forged copy of the gpu-smoke run: the GEMM's TFLOP/s doubled in run.jsonl (metric, rows and verdict),
#   the reports rendered again and the run signed again with the same key; verify must fail, naming the GEMM.
# Logs in $V, packed into $OUT/v11.tar.gz when OUT is set.
V=${V:-/tmp/v11}; mkdir -p "$V"
R=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=benchmarks/gpu/step.sh
source "$R/benchmarks/gpu/step.sh"
export PYTHONUNBUFFERED=1
pack_on_exit v11
install_wheels
W=$(mktemp -d); cd "$W" || exit 1
openssl genpkey -algorithm ed25519 -out seller.pem && chmod 600 seller.pem && openssl pkey -in seller.pem -pubout -out seller.pub
step smoke-signed 120 clustercheck run gpu-smoke --sign seller.pem --out "$W/s"
step smoke-verify 60 clustercheck verify "$W/s/latest" --key seller.pub
step gate-signed 120 clustercheck run quick-gate-nvlink8 --platform h100-sxm-1x --sign seller.pem --out "$W/q"
step gate-verify 60 clustercheck verify "$W/q/latest" --key seller.pub
cp -rL "$W/s/latest" "$W/forged"
python3 - "$W/forged/run.jsonl" <<'PY' > "$V/forge.txt" 2>&1
import json, sys
path = sys.argv[1]
lines = open(path).read().splitlines()
for i, line in enumerate(lines):
    entry = json.loads(line)
    if entry.get("type") == "result" and entry.get("check") == "gemm" and entry.get("metrics"):
        for m in entry["metrics"].values():
            if m.get("unit") == "TFLOP/s":
                m["value"] *= 2
        for row in entry.get("rows") or []:
            for k in list(row):
                if "tflops" in k and isinstance(row[k], (int, float)):
                    row[k] *= 2
        for v in entry.get("verdicts") or []:
            if v.get("metric") == "tflops":
                v["measured"] *= 2
                v["margin"] = (v["measured"] - v["limit"]) / v["limit"]
        lines[i] = json.dumps(entry, sort_keys=True)
        print("forged line", i + 1, "rows keys", sorted((entry.get("rows") or [{}])[0]))
open(path, "w").write("\n".join(lines) + "\n")
PY
step forged-report 60 clustercheck report "$W/forged"
step forged-sign 60 clustercheck sign "$W/forged" --key seller.pem
step forged-verify 60 clustercheck verify "$W/forged" --key seller.pub
cp "$W"/s/latest/run.jsonl "$V/smoke-run.jsonl"; cp "$W"/s/latest/attestation.json "$V/smoke-attestation.json"
cat "$V/steps.txt"
for f in smoke-verify gate-verify forge forged-verify; do echo "### $f"; tail -25 "$V/$f.txt"; done
