# Sourced by scripts/demo and scripts/test: make .venv and install the project into it.
# Idempotent: reinstalls only when pyproject.toml or constraints.txt changed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

find_python() {
  for candidate in "${PYTHON:-}" python3.13 python3.12 python3.11 python3; do
    [ -n "$candidate" ] || continue
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
      echo "$candidate"; return 0
    fi
  done
  echo "error: Python 3.11 or newer is needed (set PYTHON=/path/to/python3.11)" >&2
  return 1
}

bootstrap() {  # $1: extras, e.g. "test" or ""
  local extras="${1:-}" spec="." stamp want
  [ -n "$extras" ] && spec=".[$extras]"
  if [ ! -x .venv/bin/python ]; then
    local py; py="$(find_python)"
    echo "creating .venv with $py" >&2
    "$py" -m venv .venv
  fi
  stamp=.venv/.mother-installed
  local hash have
  hash="$(cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)"
  want="$hash $extras"
  have="$(cat "$stamp" 2>/dev/null || true)"
  # an install with the test extras serves the demo too (they include the demo's): ./scripts/demo after
  # ./scripts/test installs nothing, and neither script installs again while pyproject.toml and
  # constraints.txt are unchanged
  if [ "$have" = "$want" ] || { [ "${have%% *}" = "$hash" ] && [ "${have#* }" = "test" ]; }; then
    return 0
  fi
  echo "installing mother-harness into .venv (pinned by constraints.txt)..." >&2
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e "$spec"
  echo "$want" > "$stamp"
}
