#!/usr/bin/env bash
# LiteLLM's SDK in a venv of its own (fleetgate never imports it): the client of
# tests/compat/litellm/test_litellm_sdk.py. Reused when present.
set -euo pipefail
VENV="${FLEETGATE_LITELLM_VENV:-/tmp/fleetgate-litellm}"
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import litellm" 2>/dev/null; then
  exit 0
fi
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q litellm
"$VENV/bin/python" -c "import litellm" && echo "litellm installed in $VENV"
