"""Delivering rings by signed HTTP POST (webhooks); the engine sees only ports.WebhookSender."""
