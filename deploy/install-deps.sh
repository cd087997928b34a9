#!/usr/bin/env bash
# Installs the Debian 12 packages that building, testing, running and
# benchmarking switchyard need — only those missing. Needs root to install;
# without root it prints the exact command and fails.
set -euo pipefail

packages=(
    build-essential pkg-config clang clang-format
    libmicrohttpd-dev libcurl4-openssl-dev libprotobuf-c-dev protobuf-c-compiler
    libyaml-dev libcmocka-dev libjansson-dev libxxhash-dev libgnutls28-dev nettle-dev
    libzmq3-dev libmsgpack-dev
    curl procps util-linux openssl
)
# Extra packages for one purpose, requested by name: deploy/install-deps.sh bench
case "${1:-}" in
bench) packages+=(nginx-light wrk gnuplot-nox) ;;
# deploy: make check-deploy (promtool, systemd-analyze, the manifest checker's
# YAML parser for Debian's /usr/bin/python3, shellcheck).
deploy) packages+=(prometheus systemd python3 python3-yaml shellcheck) ;;
# browser: the status page's end-to-end test renders it in headless Chromium.
browser) packages+=(chromium) ;;
esac

missing=()
for p in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
    [ "$status" = installed ] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
    echo "switchyard: missing packages: ${missing[*]}" >&2
    echo "switchyard: run as root: $cmd" >&2
    exit 1
fi
echo "switchyard: installing ${missing[*]}" >&2
# A new machine's package lists may be empty or stale: always update first.
apt-get update -q
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
