#!/usr/bin/env bash
# Entrypoint of the switchyard image: the first argument picks the program.
#
#   controlplane ARGS...    exec switchyard-controlplane ARGS...
#   dataplane ARGS...       exec switchyard-dataplane ARGS...
#   probe controlplane      exit 0 when the control plane's GET /status answers 200
#   probe dataplane         exit 0 when the dataplane's GET /health answers 200
#   --help | help           this text
#   anything else           exec'd as a command (e.g. bash for debugging)
#
# The daemons are exec'd, so they run as the container's pid 1 and get its
# SIGTERM directly (they drain and exit on it).
#
# Probes (Kubernetes exec probes): the admin API asks for a bearer token
# when controlplane.admin_token_file is set, and the token must not be
# written into the pod spec (an httpGet probe would need it in plain text).
# So the probe reads the token file inside the container:
#   SWITCHYARD_ADMIN_URL          default http://127.0.0.1:8081
#   SWITCHYARD_ADMIN_TOKEN_FILE   default none (no Authorization header)
#   SWITCHYARD_DATAPLANE_URL      default http://127.0.0.1:8080
#   SWITCHYARD_PROBE_TIMEOUT      seconds, default 2
set -euo pipefail

usage() {
    sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'
}

probe() {
    local what=${1:-} url token_file header=()
    local timeout=${SWITCHYARD_PROBE_TIMEOUT:-2}
    case "$what" in
    controlplane)
        url=${SWITCHYARD_ADMIN_URL:-http://127.0.0.1:8081}/status
        token_file=${SWITCHYARD_ADMIN_TOKEN_FILE:-}
        if [ -n "$token_file" ]; then
            local token
            # The daemon ignores trailing whitespace and newlines: so do we.
            token=$(tr -d '[:space:]' <"$token_file")
            header=(-H "Authorization: Bearer $token")
        fi
        ;;
    dataplane)
        url=${SWITCHYARD_DATAPLANE_URL:-http://127.0.0.1:8080}/health
        ;;
    *)
        echo "switchyard-entrypoint: probe controlplane|dataplane" >&2
        return 2
        ;;
    esac
    curl -fsS -o /dev/null --max-time "$timeout" "${header[@]}" "$url"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
controlplane) exec /usr/local/bin/switchyard-controlplane "$@" ;;
dataplane) exec /usr/local/bin/switchyard-dataplane "$@" ;;
probe) probe "$@" ;;
"" | help | --help | -h) usage ;;
*) exec "$cmd" "$@" ;;
esac
