"""Conversations: stored turns so a client can send only the new turn and a conversation id."""

from fleetgate.multimodal.conversations.sql import SqlConversationStore, build_tables
from fleetgate.multimodal.conversations.store import ConversationStore, StoredTurn

__all__ = ["ConversationStore", "SqlConversationStore", "StoredTurn", "build_tables"]
