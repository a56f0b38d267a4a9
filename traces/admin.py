"""The trace console's pages are registered by ``chat.console``: a run's page composes what its
lifecycle, its webhooks and its tools stored, and its actions call the chat services."""
