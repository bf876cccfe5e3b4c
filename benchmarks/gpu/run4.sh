#!/usr/bin/env bash
# GPU validation, call 4: host<->device copies, clustercheck's against the independent reference, alternated
# on one machine (a fresh lent VM measured h2d 47.25 GB/s where the first ones measured 54.7).
V=${V:-/tmp/v4}; mkdir -p "$V"
for i in 1 2 3; do
  timeout 60 python3 benchmarks/gpu/copy_reference.py > "$V/ref$i.json" 2>&1
  timeout 90 python3 -m clustercheck run gpu-smoke -k host-device --out /tmp/cc4 > "$V/cc$i.txt" 2>&1
  python3 -c "import json;d=json.load(open('/tmp/cc4/latest/results.json'));r=[x for x in d['results'] if x['check']=='host-device'][0];print('clustercheck', {m['metric']:(round(m['min'],2),round(m['median'],2),round(m['max'],2)) for m in r['rows']})" >> "$V/summary.txt" 2>&1
  python3 -c "import json;d=json.load(open('$V/ref$i.json'));print('reference   ', {k:[round(s,2) for s in d[k]['samples']] for k in ('h2d','d2h')})" >> "$V/summary.txt" 2>&1
done
nvidia-smi -q | grep -A3 -i "Link Width\|PCIe Generation" >> "$V/summary.txt"
cat "$V/summary.txt"
