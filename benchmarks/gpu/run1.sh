#!/usr/bin/env bash
# GPU validation, call 1: inventory, fresh captures, tests/gpu, shipped suites, probes, watch cost.
# Run from the repo root on a GPU machine; writes everything to $V (default /tmp/v), one log per step.
V=${V:-/tmp/v}; mkdir -p "$V"
# shellcheck source=benchmarks/gpu/step.sh
source "$(dirname "$0")/step.sh"
{ date -u; uname -a; nvidia-smi; python3 -c "
import torch, pynvml
print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())
p = torch.cuda.get_device_properties(0); print(p, getattr(p, 'pci_bus_id', None))
pynvml.nvmlInit(); h = pynvml.nvmlDeviceGetHandleByIndex(0)
print('pci device id', hex(pynvml.nvmlDeviceGetPciInfo(h).pciDeviceId), 'driver', pynvml.nvmlSystemGetDriverVersion())
print('nvml', pynvml.nvmlSystemGetNVMLVersion(), 'cuda driver', pynvml.nvmlSystemGetCudaDriverVersion())
"; python3 -m pip list 2>/dev/null | grep -iE "^(torch|nvidia-nccl|nvidia-ml-py|pytest|numpy|cupy) "; } > "$V/inventory.txt" 2>&1
nvidia-smi -q > "$V/nvidia-smi-q.txt" 2>&1
nvidia-smi topo -m > "$V/topo-m.txt" 2>&1; echo "rc=$?" >> "$V/topo-m.txt"
nvidia-smi nvlink -s > "$V/nvlink-s.txt" 2>&1; echo "rc=$?" >> "$V/nvlink-s.txt"
nvidia-smi --query-gpu=index,pci.bus_id --format=csv > "$V/query-bus.txt" 2>&1
(lspci -vvv 2>&1 | grep -E "^[0-9a-f]|ACSCtl|ACSCap" | head -200) > "$V/lspci-acs.txt" 2>&1
step platforms 60 python3 -m clustercheck platforms
step gpu-tests 240 python3 -m pytest tests/gpu -m gpu -v -rs -p no:cacheprovider
step run-default 150 python3 -m clustercheck run --out /tmp/cc/default -v
step run-quickgate 120 python3 -m clustercheck run quick-gate-nvlink8 --platform h100-sxm-8x --out /tmp/cc/quick -v
step run-nodehealth 60 python3 -m clustercheck run node-health --out /tmp/cc/health -v
step probe-all 60 python3 -m clustercheck probe all
step watch-cost 100 python3 benchmarks/watch_cost.py --repeats 3 --duration 2
cp -r /tmp/cc "$V/cc" 2>/dev/null
cat "$V/steps.txt"
