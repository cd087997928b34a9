#!/usr/bin/env bash
# make check-deploy: checks everything under deploy/ as far as a machine
# without systemd as PID 1, a container engine or a cluster allows.
# Usage: deploy/check-deploy.sh BUILD_DIR   (needs the built binaries and
# BUILD_DIR/libswitchyard.a; the Makefile target builds them and installs
# the tools with deploy/install-deps.sh deploy first).
#
#   systemd     systemd-analyze verify of both units (any warning fails),
#               systemd-analyze security --offline (exposure <= 2.5),
#               systemd-sysusers on a temporary root, shellcheck of the helper
#   configs     every example and Kubernetes switchyard config loads with the
#               daemons' own loader (deploy/check/cfgcheck.c)
#   kubernetes  every document parses; fields and cross references
#               (deploy/check/check_kubernetes.py); the same for the
#               discovery example (deploy/kubernetes/discovery/) and its RBAC
#   container   every package the Containerfile installs exists in Debian 12;
#               the runtime stage has the package of every shared library the
#               built binaries link directly and the build stage the -dev
#               package of every pkg-config module of the Makefile; COPY
#               sources exist; the entrypoint passes shellcheck
#   prometheus  promtool check config (both scrape configs), check rules,
#               test rules; every metric the rules and the dashboard use is
#               documented, and the dashboard's PromQL parses
#   grafana     the dashboard is valid JSON
# Prints one line per check and "check-deploy: N passed, N failed".
set -uo pipefail
build=${1:-build}
cd "$(dirname "$0")/.." || exit 1
py=/usr/bin/python3 # Debian's, with python3-yaml (not a pyenv/venv one)
tmp=$(mktemp -d /tmp/sy-check-deploy-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

# run NAME CMD...: runs CMD with its output in a log; prints ok/FAIL (and the log).
run() {
    local name=$1
    shift
    local log
    log="$tmp/$(echo "$name" | tr -c 'A-Za-z0-9\n' '_').log"
    if "$@" >"$log" 2>&1; then
        passed=$((passed + 1))
        echo "ok   $name"
    else
        failed=$((failed + 1))
        echo "FAIL $name"
        sed 's/^/     /' "$log"
    fi
}

# ---- systemd ---------------------------------------------------------------------
# verify needs every ExecStart=/ExecReload= binary to exist: a copy of the
# units with the install paths pointed at the build and the repo.
mkdir -p "$tmp/units"
for u in deploy/systemd/*.service; do
    sed -e "s#/usr/local/bin/#$PWD/$build/#g" \
        -e "s#/usr/local/lib/switchyard/#$PWD/deploy/systemd/#g" "$u" >"$tmp/units/$(basename "$u")"
done
# verify exits 0 on unknown keys and unparsable values (it only warns): any
# output at all is a failure.
verify_units() {
    local out
    out=$(cd "$tmp/units" && systemd-analyze verify --man=no ./*.service 2>&1)
    local rc=$?
    [ -n "$out" ] && echo "$out"
    [ $rc -eq 0 ] && [ -z "$out" ]
}
run "systemd: systemd-analyze verify" verify_units
security_units() {
    local u rc=0
    for u in "$tmp"/units/*.service; do
        systemd-analyze security --offline=true --threshold=25 "$u" | tail -1 || rc=1
    done
    return $rc
}
run "systemd: systemd-analyze security --offline (exposure <= 2.5)" security_units
sysusers() {
    mkdir -p "$tmp/root/etc" &&
        systemd-sysusers --root="$tmp/root" - <deploy/systemd/switchyard.sysusers.conf &&
        grep -q '^switchyard:' "$tmp/root/etc/passwd"
}
run "systemd: sysusers creates user switchyard" sysusers
run "systemd: shellcheck dataplane-reload" shellcheck deploy/systemd/dataplane-reload
# The reload helper with stand-ins for the new dataplane: one refused at once
# (bad config) must fail the reload and leave no pid file; one that keeps
# running must end up in the pid file.
reload_helper() {
    local fake="$tmp/fake-dataplane" pidfile="$tmp/dataplane.pid" rc=0 pid
    printf '#!/bin/sh\necho "config: bad" >&2\nexit 3\n' >"$fake" && chmod +x "$fake"
    SWITCHYARD_DATAPLANE=$fake SWITCHYARD_RELOAD_SETTLE_MS=300 \
        deploy/systemd/dataplane-reload /dev/null "$pidfile" && {
        echo "a refused hot restart did not fail the reload"
        return 1
    }
    [ ! -e "$pidfile" ] || {
        echo "a refused hot restart left $pidfile"
        return 1
    }
    printf '#!/bin/sh\nexec sleep 30\n' >"$fake"
    SWITCHYARD_DATAPLANE=$fake SWITCHYARD_RELOAD_SETTLE_MS=300 \
        deploy/systemd/dataplane-reload /dev/null "$pidfile" || rc=1
    pid=$(cat "$pidfile" 2>/dev/null)
    if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
        echo "the pid file does not name the running new process"
        rc=1
    fi
    [ -n "$pid" ] && kill "$pid" 2>/dev/null
    return $rc
}
run "systemd: reload helper fails a refused hot restart, hands a started one to PIDFile=" \
    reload_helper

# ---- configs -------------------------------------------------------------------
mkdir -p "$tmp/k8s"
run "kubernetes: manifests parse and cross-check" \
    "$py" deploy/check/check_kubernetes.py "$tmp/k8s" deploy/kubernetes/*.yaml
run "kubernetes: discovery example (RBAC, ServiceAccount) parses and cross-checks" \
    "$py" deploy/check/check_kubernetes.py --one-workload "$tmp/k8s" deploy/kubernetes/discovery/*.yaml
cfgcheck() {
    local libs
    read -ra libs <<<"$(pkg-config --libs libmicrohttpd libcurl libprotobuf-c yaml-0.1 jansson libxxhash)"
    cc -D_GNU_SOURCE -I. -I"$build" -std=c11 -Wall -Wextra -Werror deploy/check/cfgcheck.c \
        "$build/libswitchyard.a" \
        "${libs[@]}" -lm \
        -o "$tmp/cfgcheck" &&
        "$tmp/cfgcheck" deploy/examples/*.yaml "$tmp"/k8s/*.yaml
}
run "configs: examples and ConfigMap load with the daemons' loader" cfgcheck

# ---- container -----------------------------------------------------------------
containerfile=deploy/container/Containerfile
# Package names per stage: "STAGE PKG" lines from the apt-get install commands.
stage_packages() {
    awk '
        /^FROM / { stage = $NF }
        { line = line $0 }
        /\\$/ { sub(/\\$/, "", line); next }
        {
            n = split(line, w, /[ \t]+/)
            inst = 0
            for (i = 1; i <= n; i++) {
                if (w[i] == "&&" || w[i] == ";") inst = 0
                else if (w[i] == "install" && w[i-1] ~ /apt-get/) inst = 1
                else if (inst && w[i] !~ /^-/ && w[i] != "") print stage, w[i]
            }
            line = ""
        }' "$containerfile"
}
stage_packages >"$tmp/packages"
packages_exist() {
    grep -q 'VERSION_ID="12"' /etc/os-release || {
        echo "not Debian 12: cannot check package names"
        return 1
    }
    local missing=0 pkg
    [ -s "$tmp/packages" ] || {
        echo "no apt-get install found in $containerfile"
        return 1
    }
    # apt-cache needs package lists: a fresh machine may have none.
    if ! apt-cache show --no-all-versions libc6 >/dev/null 2>&1; then
        [ "$(id -u)" -eq 0 ] && apt-get update -q >/dev/null
    fi
    # One apt-cache call (each costs about a second): the names it knows.
    local wanted
    wanted=$(awk '{print $2}' "$tmp/packages" | sort -u)
    # shellcheck disable=SC2086 # one package name per word
    apt-cache show --no-all-versions $wanted 2>/dev/null |
        sed -n 's/^Package: //p' | sort -u >"$tmp/known-packages"
    while read -r pkg; do
        if ! grep -qx "$pkg" "$tmp/known-packages"; then
            echo "$containerfile: package $pkg does not exist in Debian 12"
            missing=1
        fi
    done <<<"$wanted"
    return $missing
}
run "container: every installed package exists in Debian 12" packages_exist
# The package owning a file (following /lib -> /usr/lib), "pkg" without :arch.
owner_of() {
    local f
    f=$(readlink -f "$1")
    dpkg -S "$f" 2>/dev/null || dpkg -S "${f#/usr}" 2>/dev/null
}
runtime_has_libs() {
    local rc=0 bin lib path pkg
    for bin in "$build/switchyard-controlplane" "$build/switchyard-dataplane"; do
        for lib in $(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
            path=$(ldconfig -p | awk -v l="$lib" '$1 == l && /x86-64|x86_64/ {print $NF; exit}')
            [ -n "$path" ] || path=$(ldconfig -p | awk -v l="$lib" '$1 == l {print $NF; exit}')
            pkg=$(owner_of "$path" | head -1 | cut -d: -f1)
            [ "$pkg" = libc6 ] && continue # in every Debian image (Essential)
            if ! grep -qx "runtime $pkg" "$tmp/packages"; then
                echo "$containerfile: runtime stage lacks $pkg (provides $lib for $(basename "$bin"))"
                rc=1
            fi
        done
    done
    return $rc
}
run "container: runtime stage installs every linked shared library" runtime_has_libs
build_has_dev() {
    local rc=0 mod pc pkg
    local mods
    read -ra mods <<<"$(sed -n 's/^PKGS := //p' Makefile)"
    for mod in "${mods[@]}"; do
        pc=$(pkg-config --variable=pcfiledir "$mod")/$mod.pc
        pkg=$(owner_of "$pc" | head -1 | cut -d: -f1)
        if [ -z "$pkg" ] || ! grep -qx "build $pkg" "$tmp/packages"; then
            echo "$containerfile: build stage lacks ${pkg:-the package of $pc} (pkg-config $mod)"
            rc=1
        fi
    done
    grep -qx "build protobuf-c-compiler" "$tmp/packages" || {
        echo "$containerfile: build stage lacks protobuf-c-compiler (protoc-c)"
        rc=1
    }
    return $rc
}
run "container: build stage installs every -dev package the Makefile needs" build_has_dev
copy_sources() {
    local rc=0 src
    while read -r src; do
        [ -e "$src" ] || {
            echo "$containerfile: COPY source $src does not exist"
            rc=1
        }
    done < <(awk '/^COPY / && !/--from=/ { for (i = 2; i < NF; i++) print $i }' "$containerfile")
    # The Kubernetes exec probes call the entrypoint by this name.
    grep -q '^COPY deploy/container/entrypoint.sh /usr/local/bin/switchyard-entrypoint$' \
        "$containerfile" || {
        echo "$containerfile: the entrypoint must be /usr/local/bin/switchyard-entrypoint"
        rc=1
    }
    return $rc
}
run "container: COPY sources exist" copy_sources
# The build stage copies only some folders: every header the daemons include
# must come from one of them (a full build of that set took 13 s here; this
# static look is instant).
copy_set_builds() {
    local rc=0 dirs dir inc
    dirs=$(awk '/^COPY / && !/--from=/ && $2 != "Makefile" && $2 !~ /^deploy\// { print $2 }' \
        "$containerfile")
    # shellcheck disable=SC2086 # one folder per word
    while read -r inc; do
        dir=${inc%%/*}
        grep -qx "$dir" <<<"$dirs" || {
            echo "$containerfile: the build stage does not COPY $dir/ (included as $inc)"
            rc=1
        }
    done < <(grep -rhoE '^#include "[^"]+/[^"]+"' $dirs | sed 's/#include "\(.*\)"/\1/' | sort -u)
    return $rc
}
run "container: the build stage copies every folder the daemons include from" copy_set_builds
run "container: entrypoint passes bash -n and shellcheck" \
    bash -c 'bash -n deploy/container/entrypoint.sh && shellcheck deploy/container/entrypoint.sh'
run "scripts: shellcheck deploy/*.sh" shellcheck deploy/*.sh

# ---- prometheus and grafana ------------------------------------------------------
promtool_config() {
    local cfg rc=0
    for cfg in deploy/prometheus/prometheus*.yml; do
        mkdir -p "$tmp/prom/$(basename "$cfg")"
        "$py" deploy/check/prometheus_config_for_promtool.py "$cfg" "$tmp/prom/$(basename "$cfg")" &&
            promtool check config "$tmp/prom/$(basename "$cfg")/$(basename "$cfg")" || rc=1
    done
    return $rc
}
run "prometheus: promtool check config" promtool_config
run "prometheus: promtool check rules" promtool check rules deploy/prometheus/switchyard-rules.yml
run "prometheus: promtool test rules" \
    bash -c 'cd deploy/prometheus && promtool test rules switchyard-rules.test.yml'
run "grafana: dashboard is valid JSON" "$py" -m json.tool deploy/grafana/switchyard-dashboard.json
dashboard_promql() {
    "$py" deploy/check/check_metrics.py "$tmp/dashboard-rules.yml" \
        docs/metrics.md docs/admin-api.md docs/mockworker.md -- \
        deploy/grafana/switchyard-dashboard.json deploy/prometheus/switchyard-rules.yml &&
        promtool check rules "$tmp/dashboard-rules.yml"
}
run "prometheus+grafana: every metric is documented, dashboard PromQL parses" dashboard_promql

echo "check-deploy: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
