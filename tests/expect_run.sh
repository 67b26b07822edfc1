#!/bin/sh
# Runs a program the way a user would and checks how it ended, for the CTest cases of the
# command-line flags:
#   expect_run.sh STATUS STDOUT_REGEX STDERR_REGEX STDIN COMMAND [ARGS...]
# STATUS: the exit status expected. Each REGEX is an extended regex that the whole of that
# stream must contain ('.' also matches newlines, so "a.*b" spans lines); "-" checks nothing,
# "EMPTY" requires the stream to be empty, and a leading "!" requires no match. STDIN: a file for
# standard input ("-" for none). A run longer than 60 s fails (timeout's status 124).
set -u
expected=$1 out_pattern=$2 err_pattern=$3 input=$4
shift 4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[ "$input" = "-" ] && input=/dev/null
timeout 60 "$@" <"$input" >"$work/out" 2>"$work/err"
status=$?
fail=0
[ "$status" -ne "$expected" ] && echo "exit status $status, expected $expected" && fail=1
check() {  # NAME PATTERN FILE
  case $2 in
    -) ;;
    EMPTY) [ -s "$3" ] && echo "$1 is not empty" && fail=1 ;;
    !*) grep -Ezq -- "${2#!}" "$3" && echo "$1 matches /${2#!}/, and must not" && fail=1 ;;
    *) grep -Ezq -- "$2" "$3" || { echo "$1 does not match /$2/"; fail=1; } ;;
  esac
  return 0
}
check "standard output" "$out_pattern" "$work/out"
check "standard error" "$err_pattern" "$work/err"
if [ "$fail" -ne 0 ]; then
  echo "--- standard output:" && head -c 3000 "$work/out" && echo
  echo "--- standard error:" && head -c 3000 "$work/err"
  exit 1
fi
echo "ok: status $status"
