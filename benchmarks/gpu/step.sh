# Sourced by run1-5.sh: `step NAME LIMIT CMD...` runs CMD under `timeout LIMIT`, its output in $V/NAME.txt,
# and appends "== NAME rc=RC in S s" to that file and to $V/steps.txt.
step() { local name=$1 limit=$2; shift 2; echo "== $name: $* (limit ${limit}s)"; local t0=$SECONDS
         timeout "$limit" "$@" > "$V/$name.txt" 2>&1; local rc=$?
         echo "== $name rc=$rc in $((SECONDS - t0)) s" | tee -a "$V/$name.txt" >> "$V/steps.txt"; }
# Sourced by run10-11.sh: `pack_on_exit NAME` packs $V into $OUT/NAME.tar.gz when the script ends (OUT is set
# on the GPU machine); `install_wheels` installs what travelled in .whl (clustercheck's wheel and the
# dependencies the image lacks).
pack_on_exit() { trap '[ -n "$OUT" ] && tar -C "$V" -czf "$OUT/'"$1"'.tar.gz" .' EXIT; }
install_wheels() { step install 120 python3 -m pip install -q --no-index --no-deps "$R"/.whl/*.whl; }
