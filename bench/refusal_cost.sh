#!/bin/bash
# Instructions per refused request of one or more source trees (bench/refusal_cost.py):
#   bash bench/refusal_cost.sh REFUSALS SRC...      e.g.  bash bench/refusal_cost.sh 2000 . ../main
# CONNECTIONS=1 for one request at a time (default 16).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
refusals=$1; shift
py=${PYTHON:-$here/../.venv/bin/python}
collected() {  # SRC REFUSALS -> callgrind's instruction count for the whole process
    (cd "$1" && PYTHONPATH="$1" valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        "$py" "$here/refusal_cost.py" --refusals "$2" \
        --connections "${CONNECTIONS:-16}" 2>&1 \
        | sed -n 's/.*Collected : //p')
}
for src in "$@"; do
    src=$(cd "$src" && pwd)
    base=$(collected "$src" 0)
    total=$(collected "$src" "$refusals")
    echo "$src: $(( (total - base) / refusals )) instructions per refusal"
done
