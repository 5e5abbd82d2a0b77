#!/usr/bin/env bash
# The lerobot_local tests with the optional LeRobot extra: see scripts/test_extra.sh.
exec "$(dirname "${BASH_SOURCE[0]}")/test_extra.sh" lerobot "$@"
