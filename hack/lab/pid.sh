# pid.sh: sourced by the lab scripts (bash).
#
# recorded_pid PIDFILE MARKER: prints the PID recorded in PIDFILE if that process still
# runs with MARKER in its command line, so a recycled PID is never touched. A process
# that is just being started (between fork and exec, or inside execve) can show another
# or an empty command line for a moment: while it exists, look again for up to half a
# second.
recorded_pid() {
  local p i
  p=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$p" ] || return 1
  for i in 1 2 3 4 5 6 7 8 9 10; do
    [ -e "/proc/$p" ] || return 1
    if tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline" | grep -qF -- "$2"; then
      echo "$p"
      return 0
    fi
    sleep 0.05
  done
  return 1
}
