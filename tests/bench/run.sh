#!/usr/bin/env bash
# make bench / bench-quick / bench-pd / bench-pd-quick: runs benchmark
# sections, then the report. Usage:
#
#   tests/bench/run.sh BUILD_DIR full|quick [all|SECTION...]
#
# A section is a file tests/bench/sections/NN-NAME.sh (NN: the order they
# run in); it only measures, and writes its figures to DATA/NAME.csv (and
# raw files to DATA/NAME/). The report (tests/bench/report/report.sh) reads
# DATA and writes the page and its plots. Adding a section means adding a
# file there, and, for its text in the page, tests/bench/report/NN-NAME.sh.
#
# Where things go:
#   full:  the page docs/benchmarks.md and its plots docs/bench-*.png; data
#          in BUILD_DIR/bench-full/data.
#   quick: a smoke run; page, plots and data under BUILD_DIR/bench-quick/,
#          never over docs/.
# With all sections the page is written whole; with some (e.g. `pd`, as
# make bench-pd does) only their parts of the existing page are replaced,
# each saying when and how it was measured (a page that does not exist yet
# is written with those parts only).
#
# Environment knobs of the sections are read by them (e.g. PD_RATES,
# PD_WORKLOADS, PD_LONG_REPS: see sections/60-pd.sh).
#
# Every comparison runs its contenders in this same run, on this machine,
# and is reported as a ratio. Every server listens on 127.0.0.1 on a free
# port; every process a section starts is stopped when it ends, failure
# and interruption included.
set -euo pipefail
usage() {
    echo "usage: $0 BUILD_DIR full|quick [all|SECTION...]; sections: $available" >&2
    exit 2
}
here=$(cd "$(dirname "$0")" && pwd)
available=""
for f in "$here"/sections/[0-9][0-9]-*.sh; do
    n=${f##*/} n=${n#*-}
    available="$available ${n%.sh}"
done
available=${available# }
[ $# -ge 2 ] || usage
build=$1 mode=$2
shift 2
case $mode in full | quick) ;; *) usage ;; esac
[ $# -eq 0 ] && set -- all
requested="$*"
if [ "$requested" = all ]; then
    run_sections=$available
else
    run_sections=""
    for s in $available; do
        case " $requested " in *" $s "*) run_sections="$run_sections $s" ;; esac
    done
    run_sections=${run_sections# }
    for s in $requested; do
        case " $available " in *" $s "*) ;; *) usage ;; esac
    done
fi
partial=no
[ "$run_sections" = "$available" ] || partial=yes

# The make target that runs this, named in the page.
case $mode/$requested in
full/all) target=bench ;;
quick/all) target=bench-quick ;;
full/pd) target=bench-pd ;;
quick/pd) target=bench-pd-quick ;;
full/*) target="bench BENCH_SECTIONS=\"$requested\"" ;;
*) target="bench-quick BENCH_SECTIONS=\"$requested\"" ;;
esac
if [ "$mode" = full ]; then
    page=docs/benchmarks.md plots=docs data=$build/bench-full/data
else
    page=$build/bench-quick/benchmarks.md plots=$build/bench-quick data=$build/bench-quick/data
fi
mkdir -p "$data" "$plots"

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
# The outputs of a previous run do not make the tree dirty.
dirty=no
git status --porcelain --untracked-files=no -- . ':!docs/benchmarks.md' ':!docs/bench-*.png' \
    2>/dev/null | grep -q . && dirty=yes
load_at_start=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date +%s)

deploy/install-deps.sh bench

# A section runs in the background so that an INT or TERM reaches this
# script's trap at once (bash defers traps while a foreground child runs);
# the trap passes TERM on, and the section stops what it started.
section_pid=""
on_signal() {
    if [ -n "$section_pid" ]; then
        kill -TERM "$section_pid" 2>/dev/null || true
        wait "$section_pid" 2>/dev/null || true
    fi
    exit 130
}
trap on_signal INT TERM

# Every section may hold many connections: the soft fd limit up to the hard
# one (the streams section raises the hard one too when it can).
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
export BENCH_BUILD=$build BENCH_MODE=$mode BENCH_DATA=$data
if [ "$partial" = no ]; then rm -rf "$data" && mkdir -p "$data"; fi
meta=$data/meta.csv
echo "key,value" >"$meta.tmp"
for s in $run_sections; do
    t0=$(date +%s)
    bash "$here"/sections/[0-9][0-9]-"$s".sh &
    section_pid=$!
    rc=0
    wait "$section_pid" || rc=$?
    section_pid=""
    if [ "$rc" -ne 0 ]; then
        echo "bench: section $s failed (exit $rc)" >&2
        exit "$rc"
    fi
    echo "section_${s}_elapsed_s,$(($(date +%s) - t0))" >>"$meta.tmp"
done

{
    echo "target,$target"
    echo "build,$build"
    echo "mode,$mode"
    echo "requested,$requested"
    echo "sections,$run_sections"
    echo "partial,$partial"
    echo "elapsed_s,$(($(date +%s) - started))"
    echo "date,$(date -u +%Y-%m-%dT%H:%MZ)"
    echo "commit,$commit"
    echo "dirty,$dirty"
    echo "load_at_start,$load_at_start"
    echo "cores,$(nproc)"
    echo "cpu,$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //; s/,/ /g')"
    echo "mem_gib,$(free -g | awk '/Mem:/ {print $2}')"
    echo "kernel,$(uname -sr)"
    echo "tool_nginx,$(nginx -v 2>&1 | sed 's/.*: //')"
    echo "tool_wrk,$(wrk -v 2>&1 | head -1 | awk '{print $2}')"
    echo "tool_gnuplot,$(gnuplot --version)"
} >>"$meta.tmp"
mv "$meta.tmp" "$meta"

"$here/report/report.sh" "$data" "$page" "$plots"
