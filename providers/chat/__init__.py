"""Chat backends for the approval card: Slack, and the console for the embedded default."""

from lifeboat_dr.providers.chat.base import ApprovalCard, CardRef, Chat

__all__ = ["ApprovalCard", "CardRef", "Chat"]
