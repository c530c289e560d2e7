"""Settings of the engine simulator: one frozen-ish dataclass built by the CLI or a test.

Example::

    config = SimConfig(model="tiny", prefill_ms_per_token=0.05, decode_ms_per_step=10.0)
    app = create_sim_app(config)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from fleetgate.errors import ConfigError

__all__ = ["EcRole", "FaultConfig", "SchedulingPolicy", "SimConfig", "SimMode"]

SimMode = Literal["echo", "random"]
SchedulingPolicy = Literal["fcfs", "priority"]
EcRole = Literal["ec_producer", "ec_consumer"]


@dataclass
class FaultConfig:
    """Fault-injection rates (probabilities in 0..1) and their parameters.

    Changeable at runtime with ``POST /sim/faults`` (a JSON object with any of these fields).

    - ``error_rate``: answer ``error_status`` (with ``Retry-After: retry_after`` on 429/503)
    - ``spike_rate``: wait ``spike_ms`` extra milliseconds before the first token
    - ``hang_rate``: never answer (until the client gives up)
    - ``reset_rate``: abort the TCP connection without an answer
    - ``garbage_rate``: answer 200 with a body that is not JSON
    - ``midstream_rate``: a stream breaks (connection aborted) after ``midstream_after`` chunks
    """

    error_rate: float = 0.0
    error_status: int = 500
    retry_after: float = 1.0
    spike_rate: float = 0.0
    spike_ms: float = 0.0
    hang_rate: float = 0.0
    reset_rate: float = 0.0
    garbage_rate: float = 0.0
    midstream_rate: float = 0.0
    midstream_after: int = 3

    def validate(self) -> None:
        """Raise ``ConfigError`` naming the first bad field."""
        for name in ("error_rate", "spike_rate", "hang_rate", "reset_rate", "garbage_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"{name} must be within 0..1, got {value}", param=name)
        if not 0.0 <= self.midstream_rate <= 1.0:
            raise ConfigError("midstream_rate must be within 0..1", param="midstream_rate")
        if not 400 <= self.error_status <= 599:
            raise ConfigError("error_status must be a 4xx or 5xx status", param="error_status")
        if self.spike_ms < 0 or self.retry_after < 0 or self.midstream_after < 0:
            raise ConfigError("spike_ms, retry_after and midstream_after must be >= 0")


@dataclass
class SimConfig:
    """Everything the simulator needs; see ``fleetgate sim --help`` for the flags.

    Timing model (one scheduler step):
    ``step = prefill_ms_per_token * prefill_tokens_in_step
    + decode_ms_per_step * (1 + decode_batch_factor * (decoding - 1))`` (decode part only when
    at least one request is decoding). Each decoding request gets one token per step; a
    request's prefill covers only its prompt tokens not found in the prefix cache and is
    chunked by ``max_num_batched_tokens`` per step. With both ms values 0 the simulator is in
    *instant* mode: requests bypass the step loop and are answered as fast as possible.
    """

    model: str = "tiny"
    mode: SimMode = "random"
    # echo mode: this fraction of prompts is answered wrongly (the same prompts every time)
    corrupt_fraction: float = 0.0
    # ... and a corrupted answer is right for its first this many tokens (0: wrong from the start)
    corrupt_after_tokens: int = 0
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int = 32768
    prefill_ms_per_token: float = 0.0
    decode_ms_per_step: float = 0.0
    decode_batch_factor: float = 0.01
    kv_blocks: int = 8192
    block_size: int = 16
    seed: int = 0
    output_len: int = 128
    image_tokens: int = 1200
    embedding_dim: int = 384
    # vLLM's --scheduling-policy: ``priority`` orders the waiting queue by the request's
    # ``priority`` (lower first, then arrival) and, when KV blocks run out, preempts the least
    # important running request (not the newest); a full batch (max_num_seqs) is never
    # preempted for a waiting request, as in vLLM v1. ``fcfs`` refuses a non-zero ``priority``.
    scheduling_policy: SchedulingPolicy = "fcfs"
    # ``priority`` only: also preempt the least important running request for a more important
    # waiting one while the batch is full by count (vLLM V0's priority policy; not vLLM v1's,
    # where vllm-project/vllm#54530 proposes it).
    preempt_for_priority: bool = False
    # vLLM's --kv-events-config: publish KV-cache events on this ZMQ PUB endpoint (e.g.
    # ``tcp://127.0.0.1:5557``), replay missed batches on ``kv_events_replay_endpoint``.
    kv_events_endpoint: str | None = None
    kv_events_replay_endpoint: str | None = None
    kv_events_topic: str = ""
    # Disaggregated decode (kv_transfer_params with do_remote_prefill): the time to pull the
    # prompt's KV from the prefill engine, per prompt token (0.0025 ms: ~1 GB/8k tokens, 50 GB/s).
    kv_transfer_ms_per_token: float = 0.0025
    # The vision encoder (sim/encoder.py): time per image token to encode an image not in the
    # encoder cache (0: free, the old behaviour), that cache's size in images, vLLM's
    # ``ec_role`` (--ec-transfer-config) for encoder disaggregation, and the time a consumer
    # takes to pull a remotely encoded image, per encoder token.
    encode_ms_per_image_token: float = 0.0
    encoder_cache_items: int = 256
    ec_role: EcRole | None = None
    ec_transfer_ms_per_token: float = 0.001
    faults: FaultConfig = field(default_factory=FaultConfig)
    # sleep mode: seconds ``POST /wake_up`` takes to bring a sleeping engine back
    wake_up_s: float = 0.0

    @property
    def instant(self) -> bool:
        """True when neither prefill nor decode takes simulated time."""
        return self.prefill_ms_per_token <= 0 and self.decode_ms_per_step <= 0

    def validate(self) -> None:
        """Raise ``ConfigError`` naming the first bad field."""
        positive = ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "kv_blocks")
        for name in (*positive, "block_size", "output_len", "embedding_dim"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1", param=name)
        for name in (
            "prefill_ms_per_token",
            "decode_ms_per_step",
            "decode_batch_factor",
            "wake_up_s",
            "encode_ms_per_image_token",
            "ec_transfer_ms_per_token",
            "kv_transfer_ms_per_token",
        ):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0", param=name)
        if self.image_tokens < 0:
            raise ConfigError("image_tokens must be >= 0", param="image_tokens")
        if self.encoder_cache_items < 0:
            raise ConfigError("encoder_cache_items must be >= 0", param="encoder_cache_items")
        if self.ec_role not in (None, "ec_producer", "ec_consumer"):
            raise ConfigError(
                f"ec_role must be ec_producer or ec_consumer, got {self.ec_role!r}",
                param="ec_role",
            )
        if not 0.0 <= self.corrupt_fraction <= 1.0:
            raise ConfigError("corrupt_fraction must be within 0..1", param="corrupt_fraction")
        if self.corrupt_after_tokens < 0:
            raise ConfigError("corrupt_after_tokens must be >= 0", param="corrupt_after_tokens")
        if self.mode not in ("echo", "random"):
            raise ConfigError(f"mode must be echo or random, got {self.mode!r}", param="mode")
        if self.scheduling_policy not in ("fcfs", "priority"):
            raise ConfigError(
                f"scheduling_policy must be fcfs or priority, got {self.scheduling_policy!r}",
                param="scheduling_policy",
            )
        self.faults.validate()
