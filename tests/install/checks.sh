# Sourced by the install tests: check "description" command... runs the
# command, counts it passed or prints FAIL; checks_summary prints the counts
# and fails when any check did.
fails=0 passes=0
check() {
  local what=$1; shift
  if "$@"; then passes=$((passes + 1)); else echo "FAIL: $what"; fails=$((fails + 1)); fi
}
checks_summary() {
  echo "$passes passed, $fails failed"
  [ "$fails" -eq 0 ]
}
