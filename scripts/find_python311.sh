#!/usr/bin/env bash
# Print the Python 3.11 interpreter to use ($PYTHON if set, else python3.11 or python3 on
# PATH when it is 3.11); exit 1 when there is none. Shared by the setup scripts.
set -euo pipefail
if [ -n "${PYTHON:-}" ]; then echo "$PYTHON"; exit 0; fi
for candidate in python3.11 python3; do
  if command -v "$candidate" >/dev/null && "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
    echo "$candidate"; exit 0
  fi
done
exit 1
