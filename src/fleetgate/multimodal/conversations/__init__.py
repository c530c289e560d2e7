"""Conversations: stored turns so a client can send only the new turn and a conversation id."""

from fleetgate.multimodal.conversations.sql import SqlConversationStore
from fleetgate.multimodal.conversations.store import ConversationStore, StoredTurn

__all__ = ["ConversationStore", "SqlConversationStore", "StoredTurn"]
