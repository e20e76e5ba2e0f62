#!/bin/sh
# Chassis-control program for ipmi_sim's `chassis_control "<cmd>"` directive
# (written into the lab directory by package ipmi). ipmi_sim runs it through
# popen(), i.e. /bin/sh -c, appending:
#   <cmd> get power [boot ...]          -> print "name:value\n" for each name
#   <cmd> set power "0|1"               -> chassis power off/on (cycle = 0, then 1 about 1 s later)
#   <cmd> set reset "1"                 -> chassis power reset (power unchanged)
#   <cmd> set shutdown "1"              -> chassis power soft (power becomes 0)
#   <cmd> set boot "none|pxe|default|cdrom|bios"  (chassis bootdev ...)
# A non-zero exit makes ipmi_sim answer IPMI completion code 0xff.
# State lives in the directory given as $1: power (0/1), boot (a name), and
# calls.log, one "<unix time> <op> <args>" line per call. power and boot are
# replaced atomically (write + rename), so a reader never sees a partial file.
d="$1"; op="$2"; shift 2
mkdir -p "$d"
put() { printf '%s\n' "$2" > "$d/.$1.$$" && mv -f "$d/.$1.$$" "$d/$1"; }
[ -f "$d/power" ] || put power "${INITIAL_POWER:-0}"
[ -f "$d/boot" ]  || put boot none
echo "$(date +%s.%N) $op $*" >> "$d/calls.log"
case "$op" in
get)
  for p in "$@"; do
    case "$p" in
      power) echo "power:$(cat "$d/power")" ;;
      boot)  echo "boot:$(cat "$d/boot")" ;;
      *)     echo "$p:0" ;;
    esac
  done ;;
set)
  while [ $# -ge 2 ]; do
    case "$1" in
      power)    put power "$2" ;;
      shutdown) put power 0 ;;
      boot)     put boot "$2" ;;
      reset)    : ;;
    esac
    shift 2
  done ;;
check) : ;;
*) exit 1 ;;
esac
exit 0
