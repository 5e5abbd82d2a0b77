#!/usr/bin/env bash
# Tests of an optional extra, in a virtualenv of its own so the main one (and `make test`)
# never depends on torch:
#   lerobot  the policy's lerobot_local backend   (.venv-lerobot, requirements/lerobot.txt)
#   text     the shield's text_prompted grounder and perception's open_vocab backend
#            (.venv-text, requirements/text.txt + requirements/perception.txt for Open3D)
# Each venv gets requirements/base.txt, the pytest and hypothesis pins of requirements/dev.txt
# (conftest.py imports both) and the extra's files installed with --no-deps (the files list
# full pinned closures); it is reinstalled only when those files change. Needs no ROS;
# nothing is downloaded at test time (the tests build their own tiny random models). Extra
# arguments go to pytest; `--install-only` builds the virtualenv and stops.
# First run ~2-3 min on 2 cores (Open3D is a large wheel), later runs ~15-60 s.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
EXTRA="${1:?usage: scripts/test_extra.sh lerobot|text [pytest args]}"
shift
case "$EXTRA" in
  lerobot) TESTS=(carryon_policy/test/test_policy_lerobot.py carryon_sim/test/test_learned_policy.py)
    REQUIRE=CARRYON_REQUIRE_LEROBOT
    FILES=(requirements/lerobot.txt requirements/assets.txt) ;;
  text) TESTS=(carryon_shield/test/test_shield_text_model.py carryon_perception/test/test_perception_open_vocab.py)
    REQUIRE=CARRYON_REQUIRE_TEXT_MODEL; FILES=(requirements/text.txt requirements/perception.txt) ;;
  *) echo "unknown extra '$EXTRA' (lerobot, text)" >&2; exit 2 ;;
esac
VENV_VAR="$(echo "$EXTRA" | tr '[:lower:]' '[:upper:]')_VENV"
VENV="${!VENV_VAR:-$ROOT/.venv-$EXTRA}"
say() { printf '\033[1m[%s-extra]\033[0m %s\n' "$EXTRA" "$*"; }
started=$(date +%s)

PYTHON="$(bash "$ROOT/scripts/find_python311.sh")" || { echo "Python 3.11 is required; set PYTHON" >&2; exit 1; }

if [ ! -x "$VENV/bin/python" ]; then
  say "creating virtualenv $VENV"
  "$PYTHON" -m venv "$VENV"
  echo '*' > "$VENV/.gitignore"   # keep it out of git status and ruff
  touch "$VENV/COLCON_IGNORE"
fi
req_hash=$(cat requirements/base.txt requirements/dev.txt "${FILES[@]}" | sha256sum | cut -d' ' -f1)
if [ "$(cat "$VENV/.carryon-extra-stamp" 2>/dev/null)" != "$req_hash" ]; then
  say "installing requirements/base.txt, pytest and ${FILES[*]}"
  pip_install() {
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$@" \
      2> >(grep -v "is neither a file nor a directory" >&2)   # noise from unreachable extra indexes
  }
  # shellcheck disable=SC2046
  pip_install -r requirements/base.txt $(grep -E '^(pytest(-timeout)?|hypothesis)==' requirements/dev.txt)
  for file in "${FILES[@]}"; do pip_install --no-deps -r "$file"; done
  echo "$req_hash" > "$VENV/.carryon-extra-stamp"
  say "installed in $(( $(date +%s) - started )) s"
fi

# The checkout's packages run from PYTHONPATH here (no colcon build), so their metadata is made
# as colcon's build makes it: entry points (the policy backends carryon_sim registers, the
# `carryon` commands) are found through it. Cheap; made again every run so it follows setup.py.
META="$VENV/carryon-metadata"
rm -rf "$META" && mkdir -p "$META"
for setup in "$ROOT"/carryon_*/setup.py; do
  (cd "$(dirname "$setup")" && "$VENV/bin/python" setup.py --quiet egg_info --egg-base "$META" >/dev/null 2>&1) \
    || { echo "egg_info failed for $setup" >&2; exit 1; }
done

if [ "${1:-}" = "--install-only" ]; then exit 0; fi   # scripts/learned_policy.sh: the virtualenv only

say "pytest ${TESTS[*]}"
# $REQUIRE: a broken install fails these tests instead of skipping them.
# The packages from the checkout (no colcon build here); headless rendering; never the Hub.
PACKAGES="$META:$(printf '%s:' "$ROOT"/carryon_*/ | sed 's|/:|:|g; s|:$||')"
env "$REQUIRE=1" PYTHONPATH="$PACKAGES" MUJOCO_GL="${MUJOCO_GL:-egl}" HF_HUB_OFFLINE=1 \
  "$VENV/bin/python" -m pytest "${TESTS[@]}" "$@"
