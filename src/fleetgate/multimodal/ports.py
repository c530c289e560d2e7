"""The port the multimodal pipeline provides when it is on (`fleetgate.core.Port`)."""

from __future__ import annotations

from fleetgate.core import Port
from fleetgate.multimodal.runtime import MultimodalRuntime

__all__ = ["MULTIMODAL"]

MULTIMODAL: Port[MultimodalRuntime] = Port("multimodal")
"""Transcription, documents and prompt assembly (the audio and document routes)."""
