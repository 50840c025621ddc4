# Shared by test/e2e/run.sh and test/fleet/run.sh (sourced, after they set $work, passed=0 and
# failed=0): one PASS/FAIL line per step, "N passed, N failed" at the end, and the helpers every
# step uses.

# step NAME FUNCTION [ARGS...]: runs FUNCTION in a subshell (so that fail ends it), prints PASS or
# FAIL with NAME; on failure, the step's output follows, indented. A function may print
# "detail: TEXT" to append TEXT to the line. setup_step does the same in this shell, for the
# steps whose variables the others use; those return instead of calling fail.
step() {
	("${@:2}") >"$work/step.log" 2>&1
	report "$1" $?
}

setup_step() {
	"${@:2}" >"$work/step.log" 2>&1
	report "$1" $?
}

# report NAME RC: counts and prints one step's outcome (REPORT_TAIL lines of a failure's output).
report() {
	local name=$1 rc=$2 out detail
	out=$work/step.$((passed + failed)).log
	mv "$work/step.log" "$out"
	detail=$(sed -n 's/^detail: //p' "$out" | awk 'NR > 1 {printf "; "} {printf "%s", $0}')
	if [ $rc -eq 0 ]; then
		passed=$((passed + 1))
		echo "PASS $name${detail:+ ($detail)}"
	else
		failed=$((failed + 1))
		echo "FAIL $name${detail:+ ($detail)}"
		grep -v '^detail: ' "$out" | tail -n "${REPORT_TAIL:-40}" | sed 's/^/    /'
	fi
	return $rc
}

skip() { # skip NAME REASON: a step that could not run counts as failed
	failed=$((failed + 1))
	echo "FAIL $1 (not run: $2)"
}

fail() {
	echo "$*" >&2
	exit 1
}

# wait_for SECONDS CMD...: poll CMD every 0.2s until it succeeds; fail after SECONDS.
wait_for() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@" >/dev/null 2>&1; do
		[ $SECONDS -lt $deadline ] || return 1
		sleep 0.2
	done
}

# has_lines FILE N: FILE has at least N lines (a load client's answers).
has_lines() {
	[ "$(wc -l <"$1")" -ge "$2" ]
}
