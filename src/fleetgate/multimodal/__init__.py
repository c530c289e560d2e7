"""The multimodal pipeline: every modality becomes what the engine needs before the model call.

Sub-packages, each usable on its own:

- ``images``: safe fetching of ``image_url`` parts, bomb-proof decode/resize/re-encode, token
  estimates per model family, a per-tenant content-addressed cache and a compute budget.
- ``audio``: decode (WAV/FLAC/OGG/MP3), 16 kHz resampling, voice-activity segmentation, batch
  transcription through a pluggable backend, and the transcription response formats.
- ``speech``: text-to-speech backends, audio encoders, the phrase chunker and the in-order
  concurrent ``SpeechStreamer`` for chat completions with audio output.
- ``conversations``: the conversation store (SQLAlchemy async; SQLite and PostgreSQL).
- ``prompt``: retrieval index and the prompt assembler with history truncation.

Nothing heavy is imported here; import the sub-package you need.
"""

__all__: list[str] = []
