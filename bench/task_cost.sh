#!/bin/bash
# Instructions per task of one or more source trees, alternately (bench/task_cost.py):
#   bash bench/task_cost.sh KIND TASKS SRC...      e.g.  bash bench/task_cost.sh jsonrpc 400 . ../main
# CONNECTIONS=1 for one request at a time (default 64).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kind=$1; tasks=$2; shift 2
py=${PYTHON:-$here/../.venv/bin/python}
collected() {  # SRC TASKS -> callgrind's instruction count for the whole process
    (cd "$1" && PYTHONPATH="$1" valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        "$py" "$here/task_cost.py" --kind "$kind" --tasks "$2" \
        --connections "${CONNECTIONS:-64}" 2>&1 \
        | sed -n 's/.*Collected : //p')
}
for src in "$@"; do
    src=$(cd "$src" && pwd)
    base=$(collected "$src" 0)
    total=$(collected "$src" "$tasks")
    echo "$src $kind: $(( (total - base) / tasks )) instructions per task"
done
