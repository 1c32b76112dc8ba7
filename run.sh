#!/usr/bin/env bash
# The project's two entry points, each doing all of its own set-up:
#   ./run.sh demo   create .venv, install the toolkit, run the main job on embedded data
#   ./run.sh test   create .venv, install the toolkit with its test extras, run the tests
# Extra arguments are passed on (to `hyfdca demo` or to pytest).
set -euo pipefail
cd "$(dirname "$0")"
VENV=${HYFDCA_VENV:-.venv}
PYTHON=${PYTHON:-python3}

setup() {
    local stamp="$VENV/.installed-$1"
    if [ ! -f "$stamp" ] || [ setup.cfg -nt "$stamp" ]; then
        [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
        "$VENV/bin/python" -m pip install --quiet --upgrade pip
        "$VENV/bin/python" -m pip install --quiet -e ".$2"
        touch "$stamp"
    fi
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
    demo) setup demo ""; exec "$VENV/bin/hyfdca" demo "$@" ;;
    test) setup test "[test]"; exec "$VENV/bin/python" -m pytest "$@" ;;
    *) echo "usage: ./run.sh demo|test [args...]" >&2; exit 2 ;;
esac
