"""Prompt assembly: system prompt, profile, retrieved context, truncated history, images."""

from fleetgate.multimodal.prompt.assembler import AssembledPrompt, PromptAssembler
from fleetgate.multimodal.prompt.config import PromptConfig, RetrievalConfig
from fleetgate.multimodal.prompt.retrieval import DocumentIndex, RetrievedChunk
from fleetgate.multimodal.prompt.tokens import ApproxTokenCounter, TokenCounter

__all__ = [
    "ApproxTokenCounter",
    "AssembledPrompt",
    "DocumentIndex",
    "PromptAssembler",
    "PromptConfig",
    "RetrievalConfig",
    "RetrievedChunk",
    "TokenCounter",
]
