# shellcheck shell=bash
# Sourced by .ci/run and examples/consumer/run.sh.
# two_at_a_time START FINISH ITEM...: runs `START item` in the background for two items at a
# time (each is one thread's work, and CI's machines have two cores), then, in the items' order,
# `FINISH item status` with the exit status of its START; FINISH may exit the script.
two_at_a_time() {
  local start=$1 finish=$2
  shift 2
  local items=("$@") pids item i j status
  for ((i = 0; i < ${#items[@]}; i += 2)); do
    pids=()
    for item in "${items[@]:i:2}"; do
      "$start" "$item" &
      pids+=($!)
    done
    for j in "${!pids[@]}"; do
      status=0
      wait "${pids[j]}" || status=$?
      "$finish" "${items[i + j]}" "$status"
    done
  done
}
