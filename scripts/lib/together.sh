# together NAME1 "CMD1" NAME2 "CMD2": run two commands at once (each through `eval`, so environment assignments
# such as CUDA_VISIBLE_DEVICES=1 apply to that one only); when one fails, the other is killed at once (no orphan
# keeps a GPU busy) and its exit code is returned; Ctrl-C or TERM stops both. 0 when both succeed.
together() {
  local -A name=()
  local pid rc=0
  eval "$2" & name[$!]=$1
  eval "$4" & name[$!]=$3
  trap 'kill ${!name[*]} 2>/dev/null; wait 2>/dev/null; trap - INT TERM; return 130' INT TERM
  while [ ${#name[@]} -gt 0 ]; do
    for pid in "${!name[@]}"; do
      kill -0 "$pid" 2>/dev/null && continue
      if wait "$pid"; then
        unset "name[$pid]"
      else
        rc=$?
        echo "[together] ${name[$pid]} failed (exit $rc): stopping the other" >&2
        unset "name[$pid]"
        for pid in "${!name[@]}"; do kill "$pid" 2>/dev/null; pkill -P "$pid" 2>/dev/null; done
        wait 2>/dev/null
        trap - INT TERM
        return $rc
      fi
    done
    sleep 1
  done
  trap - INT TERM
  return 0
}
