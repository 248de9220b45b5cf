#!/bin/sh
# Prints the system calls of systemd's syscall groups (SystemCallFilter=),
# one per line, nested groups expanded, as this host's systemd defines them.
#   systemd_syscalls.sh @system-service
set -eu
expand() {
  systemd-analyze syscall-filter "$1" | sed -n '2,$p' | grep -v '^ *#' | awk 'NF { print $1 }' |
    while read -r name; do
      case $name in
        @*) expand "$name" ;;
        *) echo "$name" ;;
      esac
    done
}
for group in "$@"; do expand "$group"; done | sort -u
