# Sourced by run1-5.sh: `step NAME LIMIT CMD...` runs CMD under `timeout LIMIT`, its output in $V/NAME.txt,
# and appends "== NAME rc=RC in S s" to that file and to $V/steps.txt.
step() { local name=$1 limit=$2; shift 2; echo "== $name: $* (limit ${limit}s)"; local t0=$SECONDS
         timeout "$limit" "$@" > "$V/$name.txt" 2>&1; local rc=$?
         echo "== $name rc=$rc in $((SECONDS - t0)) s" | tee -a "$V/$name.txt" >> "$V/steps.txt"; }
