#!/usr/bin/env bash
# The lerobot_local tests with the optional LeRobot extra (torch + lerobot), in a
# virtualenv of their own so the main one (and `make test`) never depends on torch.
# Builds $LEROBOT_VENV (default .venv-lerobot) from requirements/base.txt, the pytest pins
# of requirements/dev.txt and requirements/lerobot.txt (--no-deps); reinstalls only when
# those files change. Needs no ROS and no network beyond the package index; nothing is
# downloaded at test time (the test builds and saves its own tiny random ACT).
# Extra arguments go to pytest. First run ~1.5 min on 2 cores, later runs ~15 s.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${LEROBOT_VENV:-$ROOT/.venv-lerobot}"
say() { printf '\033[1m[lerobot-extra]\033[0m %s\n' "$*"; }
started=$(date +%s)

PYTHON="${PYTHON:-}"
if [ -z "$PYTHON" ]; then
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null && "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
      PYTHON="$candidate"; break
    fi
  done
fi
[ -n "$PYTHON" ] || { echo "Python 3.11 is required (lerobot 0.4.4 and the CarryOn pins); set PYTHON" >&2; exit 1; }

if [ ! -x "$VENV/bin/python" ]; then
  say "creating virtualenv $VENV"
  "$PYTHON" -m venv "$VENV"
  echo '*' > "$VENV/.gitignore"   # keep it out of git status and ruff
  touch "$VENV/COLCON_IGNORE"
fi
req_hash=$(cat requirements/base.txt requirements/dev.txt requirements/lerobot.txt | sha256sum | cut -d' ' -f1)
if [ "$(cat "$VENV/.carryon-lerobot-stamp" 2>/dev/null)" != "$req_hash" ]; then
  say "installing requirements/base.txt, pytest and requirements/lerobot.txt"
  pip_install() {
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$@" \
      2> >(grep -v "is neither a file nor a directory" >&2)   # noise from unreachable extra indexes
  }
  pip_install -r requirements/base.txt $(grep -E '^pytest(-timeout)?==' requirements/dev.txt)
  pip_install --no-deps -r requirements/lerobot.txt
  echo "$req_hash" > "$VENV/.carryon-lerobot-stamp"
  say "installed in $(( $(date +%s) - started )) s"
fi

say "pytest carryon_policy/test/test_policy_lerobot.py"
# CARRYON_REQUIRE_LEROBOT: a broken install fails these tests instead of skipping them.
CARRYON_REQUIRE_LEROBOT=1 PYTHONPATH="$ROOT/carryon_common:$ROOT/carryon_policy:$ROOT/carryon_bringup" \
  "$VENV/bin/python" -m pytest carryon_policy/test/test_policy_lerobot.py "$@"
