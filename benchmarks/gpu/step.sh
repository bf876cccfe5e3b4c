# Sourced by run1-5.sh: `step NAME LIMIT CMD...` runs CMD under `timeout LIMIT`, its output in $V/NAME.txt,
# and appends "== NAME rc=RC in S s" to that file and to $V/steps.txt.
step() { local name=$1 limit=$2; shift 2; echo "== $name: $* (limit ${limit}s)"; local t0=$SECONDS
         timeout "$limit" "$@" > "$V/$name.txt" 2>&1; local rc=$?
         echo "== $name rc=$rc in $((SECONDS - t0)) s" | tee -a "$V/$name.txt" >> "$V/steps.txt"; }
# Sourced by run10-13.sh: `pack_on_exit NAME` packs $V into $OUT/NAME.tar.gz when the script ends (OUT is set
# on the GPU machine); `install_wheels` installs what travelled in .whl (clustercheck's wheel and the
# dependencies the image lacks).
pack_on_exit() { trap '[ -n "$OUT" ] && tar -C "$V" -czf "$OUT/'"$1"'.tar.gz" .' EXIT; }
install_wheels() { step install 120 python3 -m pip install -q --no-index --no-deps "$R"/.whl/*.whl; }
# Sourced by run12-13.sh: `begin NAME` sets V (default /tmp/NAME) and packs it on exit, unbuffered Python;
# `gpu_facts` records the GPU, driver, CPUs, torch and its NCCL; `watch_ps FILE N` lists clustercheck's
# processes (agents, zygotes, ranks) every 2 s, N times, into $V/FILE.
begin() { V=${V:-/tmp/$1}; mkdir -p "$V"; export PYTHONUNBUFFERED=1; pack_on_exit "$1"; }
gpu_facts() { step facts 60 bash -c 'nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; nproc;
  python3 -c "import torch; print(torch.__version__, torch.cuda.nccl.version())"'; }
watch_ps() { for _ in $(seq "$2"); do sleep 2; echo "-- $(date +%T.%N)"
             ps -eo pid,ppid,pgid,comm,args | grep -E "[c]lustercheck|[c]c-zygote|[p]ython3"; done >> "$V/$1" 2>&1; }
# `build_nccl` builds NCCL 2.30 from the carried .gpu/nccl in /tmp/nccl, sm_90 and the collectives the
# two-agent suite runs only (../shared/gpu-multirank.md; about 70-96 s on 16 CPUs).
build_nccl() {
  step nccl-build 240 bash -c "cp -r '$R/.gpu/nccl' /tmp/nccl && cd /tmp/nccl && make -j16 src.build CUDA_HOME=/usr/local/cuda \
    NVCC_GENCODE='-gencode=arch=compute_90,code=sm_90' \
    ONLY_FUNCS='AllReduce Sum f32 * *|AllReduce Sum bf16 * *|AllGather * *|Broadcast * *|ReduceScatter Sum f32 * *|SendRecv' \
    && ls -l build/lib"; }
