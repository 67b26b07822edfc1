#!/bin/sh
# Runs a program the way a user would and checks how it ended, for the CTest cases of the
# command-line programs on bad input:
#   expect_cli.sh STATUS STDERR_REGEX STDIN COMMAND [ARGS...]
# STATUS: the exit status expected; STDERR_REGEX: an extended regex standard error must match;
# STDIN: a file for standard input ("-" for none). Standard output must be empty: a refused
# input produces no text. A run longer than 20 s fails (timeout's status 124), so a hang cannot
# pass. In the arguments, @FIFO@ stands for a fresh named pipe that nothing writes to, and
# @DIR@ for a fresh directory, @EMPTY@ for the empty string (which CMake cannot pass).
set -u
expected=$1 pattern=$2 input=$3
shift 3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkfifo "$work/fifo"
mkdir "$work/dir"
for arg in "$@"; do
  shift
  case $arg in
    @FIFO@) set -- "$@" "$work/fifo" ;;
    @DIR@) set -- "$@" "$work/dir" ;;
    @EMPTY@) set -- "$@" "" ;;
    *) set -- "$@" "$arg" ;;
  esac
done
[ "$input" = "-" ] && input=/dev/null
timeout 20 "$@" <"$input" >"$work/out" 2>"$work/err"
status=$?
fail=0
if [ "$status" -ne "$expected" ]; then
  echo "exit status $status, expected $expected" && fail=1
fi
if ! grep -Eq -- "$pattern" "$work/err"; then
  echo "standard error does not match /$pattern/" && fail=1
fi
if [ -s "$work/out" ]; then
  echo "standard output is not empty:" && head -c 2000 "$work/out" && echo && fail=1
fi
if [ "$fail" -ne 0 ]; then
  echo "--- standard error:" && head -c 4000 "$work/err"
  exit 1
fi
echo "ok: status $status, standard error matches /$pattern/"
