# Helpers shared by the corral-tiny scripts; sourced, never run.
# corral-tiny installs nothing but a configuration block: the instance boots the tiny guest
# (corral.testbed.guest) as kernel + initrd from the cluster's kvm kernel_path/initrd_path,
# and the guest's init reads its host name and address from the first 4 KiB of its disk.
# The block: the line "corral-tiny-config 1", then key=value lines, then "end", NUL padded.

MAGIC="corral-tiny-config 1"
BLOCK=4096

die() {
  echo "corral-tiny: $*" >&2
  exit 1
}

no_arguments() {
  [ $# -eq 0 ] || die "usage: $(basename "$0") (no arguments; input comes from the environment)"
}

# first_disk: the path of disk 0, which must exist and be writable.
first_disk() {
  [ "${DISK_COUNT:-0}" -gt 0 ] ||
    die "instance $INSTANCE_NAME has no disk; corral-tiny writes the guest's configuration" \
      "on its first disk (use a file, sharedfile or plain disk template)"
  [ -n "$DISK_0_PATH" ] || die "DISK_0_PATH is not set"
  [ -e "$DISK_0_PATH" ] || die "disk 0 of $INSTANCE_NAME ($DISK_0_PATH) does not exist"
  [ -w "$DISK_0_PATH" ] || die "disk 0 of $INSTANCE_NAME ($DISK_0_PATH) is not writable"
  echo "$DISK_0_PATH"
}

# settings: the key=value lines for this instance, from the OS parameters and NIC 0.
settings() {
  echo "hostname=${OSP_HOSTNAME:-$INSTANCE_NAME}"
  if [ -n "$NIC_0_IP" ]; then
    prefix=$OSP_PREFIX
    case "$NIC_0_NETWORK_SUBNET" in
      */*) [ -n "$prefix" ] || prefix=${NIC_0_NETWORK_SUBNET#*/} ;;
    esac
    echo "ip=$NIC_0_IP/${prefix:-24}"
  fi
  gateway=${OSP_GATEWAY:-$NIC_0_NETWORK_GATEWAY}
  [ -z "$gateway" ] || echo "gw=$gateway"
}

# write_config DISK: write the configuration block at the start of DISK, then read it back.
write_config() {
  work=$(mktemp -d) || die "cannot create a temporary directory"
  { echo "$MAGIC"; settings; echo end; } > "$work/block"
  size=$(wc -c < "$work/block")
  if [ "$size" -gt "$BLOCK" ]; then
    rm -rf "$work"
    die "the configuration ($size bytes) does not fit in $BLOCK bytes"
  fi
  truncate -s "$BLOCK" "$work/block"
  if ! dd if="$work/block" of="$1" bs="$BLOCK" count=1 conv=notrunc status=none 2>"$work/err"
  then
    cat "$work/err" >&2
    rm -rf "$work"
    die "could not write the configuration to $1"
  fi
  rm -rf "$work"
  [ "$(head -c "$BLOCK" "$1" | head -n 1)" = "$MAGIC" ] ||
    die "the configuration written to $1 does not read back"
}

# summary: the settings on one line, for the log.
summary() {
  settings | tr '\n' ' ' | sed 's/ $//'
}

if [ "${DEBUG_LEVEL:-0}" -gt 0 ]; then
  set -x
fi
