# Helpers shared by the corral-ext4 scripts; sourced, never run.
# Everything comes from the OS API environment (see ganeti-os-interface(7)).

die() {
  echo "corral-ext4: $*" >&2
  exit 1
}

no_arguments() {
  [ $# -eq 0 ] || die "usage: $(basename "$0") (no arguments; input comes from the environment)"
}

check_variant() {
  case "${OS_VARIANT:-default}" in
    default|minimal) ;;
    *) die "unknown variant '$OS_VARIANT'; known variants: default, minimal" ;;
  esac
}

first_disk() {
  [ "${DISK_COUNT:-0}" -gt 0 ] ||
    die "instance $INSTANCE_NAME has no disk; this OS needs one to hold its filesystem"
  [ -n "$DISK_0_PATH" ] || die "DISK_0_PATH is not set"
  echo "$DISK_0_PATH"
}

# write_names DISK NAME: store NAME in the hostname file (and /etc/hosts for the
# default variant) of the ext4 filesystem on DISK, with debugfs (no mount needed).
write_names() {
  file=${OSP_HOSTNAME_FILE:-/etc/hostname}
  work=$(mktemp -d) || die "cannot create a temporary directory"
  printf '%s\n' "$2" > "$work/hostname"
  printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n' "$2" > "$work/hosts"
  dir=""
  for part in $(dirname "$file" | tr / ' '); do
    dir="$dir/$part"
    echo "mkdir \"$dir\""
  done > "$work/commands"
  printf 'rm "%s"\nwrite "%s" "%s"\n' "$file" "$work/hostname" "$file" >> "$work/commands"
  if [ "${OS_VARIANT:-default}" = default ]; then
    printf 'mkdir /etc\nrm /etc/hosts\nwrite "%s" /etc/hosts\n' "$work/hosts" >> "$work/commands"
  fi
  debugfs -w -f "$work/commands" "$1" > "$work/output" 2>&1
  written=$(debugfs -R "cat \"$file\"" "$1" 2>/dev/null)
  if [ "$written" != "$2" ]; then
    cat "$work/output" >&2
    rm -rf "$work"
    die "could not write $file into the filesystem on $1"
  fi
  rm -rf "$work"
}

if [ "${DEBUG_LEVEL:-0}" -gt 0 ]; then
  set -x
fi
