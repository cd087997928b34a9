# shellcheck shell=bash
# The benchmarks' data files and the arithmetic on their figures, sourced by
# the sections (tests/bench/sections/*.sh), which write the files, and by the
# report (tests/bench/report/*.sh), which reads them. Kept apart from lib.sh
# (processes, ports, configs) because the report starts no process.
#
# A data file is CSV, one figure a row: a header "key,value", then
# "KEY,VALUE". Keys are unique words; a value is a number, "n/a" or a few
# words (never a comma). Later rows win, so a figure can be corrected by
# appending it again.

# data_file: the file put and value use ($BENCH_DATA/SECTION.csv in a
# section, the concatenation of every section's file in the report).
data_file=${data_file:-}

# data_init FILE: starts FILE empty (header only) and makes it data_file.
data_init() {
    data_file=$1
    echo "key,value" >"$data_file"
}

# put KEY VALUE: appends a figure, and echoes it to stderr (the run's log).
put() {
    echo "$1 $2" >&2
    echo "$1,$2" >>"$data_file"
}

# value KEY: its value, or n/a when absent or empty.
value() {
    awk -F, -v k="$1" 'NR > 1 && $1 == k {v = $2} END {print (v == "" ? "n/a" : v)}' "$data_file"
}
v() { value "$1"; }

# ratio A B [digits]: A/B, or n/a.
ratio() {
    awk -v a="$1" -v b="$2" -v d="${3:-2}" 'BEGIN {
        if (a == "n/a" || b == "n/a" || b + 0 == 0) print "n/a"; else printf "%.*f\n", d, a / b }'
}
diff_us() {
    awk -v a="$1" -v b="$2" 'BEGIN { if (a == "n/a" || b == "n/a") print "n/a"; else printf "%.0f\n", a - b }'
}
# median / runs_max / runs_range: of the numbers on stdin, one a line (n/a
# skipped): their median, their largest, their range "lo–hi".
median() { sort -g | awk '$1 != "n/a" {v[++n] = $1} END {print (n ? v[int((n + 1) / 2)] : "n/a")}'; }
runs_max() { awk '$1 != "n/a" {if (n++ == 0 || $1 + 0 > m) m = $1 + 0} END {print (n ? m : "n/a")}'; }
runs_range() {
    awk '$1 != "n/a" {v = $1 + 0; if (n++ == 0 || v < lo) lo = v; if (v > hi) hi = v}
        END {if (n) printf "%.0f–%.0f\n", lo, hi; else print "n/a"}'
}
fmt_int() { awk -v x="$1" 'BEGIN { if (x == "n/a") print x; else printf "%.0f\n", x }'; }
mb() { awk -v x="$1" 'BEGIN { if (x == "n/a" || x == "") print "n/a"; else printf "%.1f\n", x / 1024 }'; }
# thousands N: N with thousands separators (1536 -> 1,536).
thousands() { sed ':a; s/\B[0-9]\{3\}\>/,&/; ta' <<<"$1"; }
# spec_val SPEC KEY: KEY's value in a workload spec ("key=value ...").
spec_val() { tr ' ' '\n' <<<"$1" | awk -F= -v k="$2" '$1 == k {print $2}'; }
