#!/bin/sh
# Test OS "dumpenv": every script writes its whole environment, sorted, to a file and
# fails on request. Called as: dump.sh SCRIPT [ARGUMENTS...]
script=$1
shift
if [ "$script" = verify ] && [ "$*" != parameters ]; then
  echo "dumpenv: usage: verify parameters (got: $*)" >&2
  exit 2
fi
out=$OSP_DUMP_FILE
if [ -z "$out" ]; then
  if [ -n "$DISK_0_PATH" ]; then
    out="$DISK_0_PATH.$script.env"
  else
    out="${TMPDIR:-/tmp}/dumpenv-${INSTANCE_NAME:-verify}.$script.env"
  fi
fi
env | LC_ALL=C sort > "$out"
[ "$script" = import ] && cat > /dev/null
echo "dumpenv: $script wrote its environment to $out" >&2
if [ "$OSP_FAIL" = yes ] || [ "$OSP_FAIL" = "$script" ]; then
  for n in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do
    echo "dumpenv: failure line $n" >&2
  done
  exit 1
fi
exit 0
