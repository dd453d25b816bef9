# Helpers shared by the corral-file ExtStorage scripts; sourced, never run.
# Everything comes from the environment (see ganeti-extstorage-interface(7)):
# VOL_NAME, VOL_SIZE, VOL_NEW_SIZE, VOL_METADATA, VOL_SNAPSHOT_NAME, EXTP_*.
#
# A volume is a sparse file VOLUME_DIR/VOL_NAME. VOLUME_DIR is the disk parameter
# 'dir' (EXTP_DIR) when given, else the value the optional file 'settings' next to
# these scripts sets (shell syntax: VOLUME_DIR=/some/dir), else
# /var/lib/corral-file/volumes. For instances to migrate or fail over, every node
# must see the same directory (a shared mount). With the parameter loop=yes a volume
# is attached through a loop device (losetup); otherwise attach gives the file.

here=$(cd "$(dirname "$0")" && pwd)
action=$(basename "$0")

die() {
  echo "corral-file $action: $*" >&2
  exit 1
}

case "${1:-}" in
  -h|--help)
    echo "usage: $action (no arguments; input comes from the environment, see ganeti-extstorage-interface(7))"
    exit 0 ;;
esac
[ $# -eq 0 ] || die "usage: $action (no arguments; input comes from the environment)"

VOLUME_DIR=/var/lib/corral-file/volumes
if [ -f "$here/settings" ]; then
  . "$here/settings"
fi
VOLUME_DIR=${EXTP_DIR:-$VOLUME_DIR}

# volume_file NAME: the file of volume NAME (refusing names that leave the directory).
volume_file() {
  case "$1" in
    ""|*/*|.|..) die "invalid volume name '$1'" ;;
  esac
  echo "$VOLUME_DIR/$1"
}

use_loop() {
  case "${EXTP_LOOP:-no}" in
    yes|true|1|on) return 0 ;;
    no|false|0|off|"") return 1 ;;
    *) die "parameter loop must be yes or no, not '$EXTP_LOOP'" ;;
  esac
}

# loop_devices FILE: the loop devices attached to FILE, one per line.
loop_devices() {
  losetup -j "$1" 2>/dev/null | cut -d: -f1
}

[ -n "${VOL_NAME:-}" ] || die "VOL_NAME is not set"
file=$(volume_file "$VOL_NAME")
