# shellcheck shell=bash
# Sourced by the report's fragments (tests/bench/report/NN-SECTION.sh): the
# figures of every section (data.sh's value and v read the concatenation of
# the data files that report.sh prepared) and the run's description
# (meta.csv, written by run.sh) as the page words it.
# shellcheck source=tests/bench/data.sh
. "$(dirname "${BASH_SOURCE[0]}")/../data.sh"
set -euo pipefail
data_file=${BENCH_REPORT_ALL:?run by tests/bench/report/report.sh}
# Where the fragment's plots go (next to the page, which links them by
# name) and scratch space for their data.
plots=${BENCH_PLOTS:?} tmp=${BENCH_REPORT_TMP:?}
export plots tmp
# commit_text: the commit, marked when the tree had uncommitted changes.
commit_text() {
    if [ "$(v dirty)" = yes ]; then echo "$(v commit) (with uncommitted changes)"; else v commit; fi
}
# run_cmd: the run.sh command line of the run.
run_cmd() {
    if [ "$(v partial)" = yes ]; then
        echo "tests/bench/run.sh $(v build) $(v mode) $(v requested)"
    else
        echo "tests/bench/run.sh $(v build) $(v mode)"
    fi
}
is_quick() { [ "$(v mode)" = quick ]; }
# measured_alone SECTION: when the run measured only some sections, which
# replace their parts of an existing page, says when and how this one was
# measured (the page's top names the run of the others).
measured_alone() {
    [ "$(v partial)" = yes ] || return 0
    echo "Measured alone by \`make $(v target)\` (\`$(run_cmd)\`, $(v "section_${1}_elapsed_s") s) on"
    echo "$(v date), commit $(commit_text), load average at start $(v load_at_start); the"
    echo "other sections of this page come from the run named at its top."
    echo
}
# plot_or_warn NAME: runs gnuplot on stdin; a plot it cannot draw (e.g.
# every figure n/a after failed runs) is reported and the page still written.
plot_or_warn() {
    gnuplot || echo "bench report: gnuplot could not draw $1" >&2
}
