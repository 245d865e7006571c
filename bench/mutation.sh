#!/usr/bin/env bash
# Mutation score of one module against the tests that guard it (issue 32's measure).
#
#   pip install mutmut==3.8.1          # not a project dependency
#   bash bench/mutation.sh cdd_cli/constraints/lexical/rules.py tests/constraints/test_lexical_judges.py [...]
#
# Runs in a scratch clone of HEAD (WORK, default /tmp/cdd-mutation) so the working tree is never
# mutated: mutmut makes one small change at a time (an operator, a constant, a comparison),
# runs the tests that reach the changed function, and counts the change "killed" when a test
# fails. Prints mutmut's summary and the score killed / (killed + survived); `cd WORK && mutmut
# show NAME` shows a survivor. Takes from minutes to hours on 2 cores, by module and tests:
# CHILDREN (default 2) tests run at once; MUTMUT names the mutmut to run (default: the
# project's .venv has it, else PATH). A mutant whose tests run past TIMEOUT_MULTIPLIER x 2
# times their clean CPU time (default 4: 8x; mutmut's own 15 waits 30x, minutes a mutant where
# a mutant sends the ALM or a redraw loop to its cap) is a timeout, reported apart and in a
# second score that counts it as killed (as mutmut does). MUTANTS (names or globs, spaces
# between) runs only those: an earlier run's survivors against new tests, with every mutant of
# the functions changed since (their numbers move); the counts are then of those mutants only.
# Workers come from a fork server:
# forked from mutmut's own process, which has run the tests (torch's and the Rust tokenizers'
# thread pools started), they hung at their first parallel call and read as timeouts.
set -euo pipefail
module=${1:?usage: bench/mutation.sh MODULE.py TEST_FILE...}
shift
tests=("$@")
[ ${#tests[@]} -gt 0 ] || { echo "name the test files that guard $module" >&2; exit 2; }
work=${WORK:-/tmp/cdd-mutation}
repo=$(git rev-parse --show-toplevel)
mutmut=${MUTMUT:-$( [ -x "$repo/.venv/bin/mutmut" ] && echo "$repo/.venv/bin/mutmut" || echo mutmut)}
rm -rf "$work"
git clone -q "$repo" "$work"
# EXTRA (paths, spaces between): working-tree files copied over the clone's, e.g. tests not
# yet committed, to check them against an earlier run's survivors with MUTANTS.
for f in ${EXTRA:-}; do cp "$repo/$f" "$work/$f"; done
quoted=$(printf '"%s", ' "${tests[@]}")
cat >> "$work/pyproject.toml" <<EOF

[tool.mutmut]
timeout_multiplier = ${TIMEOUT_MULTIPLIER:-4}
timeout_constant = 2.0
process_isolation = "forkserver"
source_paths = ["$module"]
also_copy = ["cdd_cli/", "examples/", "constraints.example.yaml", "README.md"]
pytest_add_cli_args_test_selection = [${quoted%, }]
EOF
cd "$work"
# Threads that wait by spinning burn CPU while two workers share the cores, and the timeout is
# CPU time: spinning tripled a test pair's CPU seconds (17.8 -> 70.7) and read as timeouts.
export OMP_WAIT_POLICY=PASSIVE
set -f  # MUTANTS' globs are mutmut's, not the shell's
# shellcheck disable=SC2086  # MUTANTS is a list of names
"$mutmut" run --max-children "${CHILDREN:-2}" ${MUTANTS:-} > mutmut.log 2>&1 || true
"$mutmut" results --all true > all.txt 2>&1 || true
if [ -n "${MUTANTS:-}" ]; then  # only the mutants asked for (the others were never run)
  for name in $MUTANTS; do
    case $name in
      *\*) grep -F "${name%\*}" all.txt || true ;;
      *) grep -F "$name: " all.txt || true ;;  # _mutmut_1 is not _mutmut_10
    esac
  done | sort -u > results.txt
else
  cp all.txt results.txt
fi
killed=$(grep -c ': killed$' results.txt || true)
survived=$(grep -c ': survived$' results.txt || true)
timeouts=$(grep -c ': timeout$' results.txt || true)
other=$(grep -E '__mutmut_[0-9]+: ' results.txt | grep -cvE ': (killed|survived|timeout)$' || true)
echo "$module: $killed killed, $survived survived, $timeouts timeouts, $other other (no tests, errors)"
percent() { echo "$(( 1000 * $1 / $2 / 10 )).$(( 1000 * $1 / $2 % 10 ))%"; }
if [ $((killed + survived)) -gt 0 ]; then
  echo "score: $(percent "$killed" $((killed + survived))) killed / (killed + survived);" \
    "$(percent $((killed + timeouts)) $((killed + timeouts + survived))) with timeouts as killed"
fi
grep ': survived$' results.txt | sed 's/^ *//' || true
