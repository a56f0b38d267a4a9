"""Webhook secrets and signatures, per the Standard Webhooks specification.

A secret is ``whsec_`` and 32 random bytes in base64. It is shown once, when it is created, and
stored sealed (Fernet, with a key derived from ``WEBHOOK_SECRETS_KEY`` or else the Django
secret key), because the sender needs it again to sign. Signatures come from the
``standardwebhooks`` library: ``v1,<base64 HMAC-SHA256 of "id.timestamp.body">``, one per
secret still valid — after a rotation the previous secret keeps signing beside the new one
until its grace period ends, so receivers can switch without losing an event.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from collections.abc import Sequence
from datetime import datetime

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings
from standardwebhooks.webhooks import Webhook

PREFIX = "whsec_"


class SecretUnreadable(Exception):
    """A stored secret cannot be unsealed (the key it was sealed with has changed)."""


def new_secret() -> str:
    return PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def _fernet() -> Fernet:
    key = str(settings.WEBHOOK["SECRETS_KEY"] or settings.SECRET_KEY)
    return Fernet(base64.urlsafe_b64encode(hashlib.sha256(b"sba-webhook-secrets\0" + key.encode()).digest()))


def seal(secret: str) -> str:
    return _fernet().encrypt(secret.encode()).decode()


def unseal(sealed: str) -> str:
    try:
        return _fernet().decrypt(sealed.encode()).decode()
    except InvalidToken:
        raise SecretUnreadable() from None


def headers(*, message_id: str, timestamp: datetime, body: str, secrets_: Sequence[str]) -> dict[str, str]:
    """The three Standard Webhooks headers of one attempt."""
    signatures = " ".join(Webhook(secret).sign(message_id, timestamp, body) for secret in secrets_)
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(int(timestamp.timestamp())),
        "webhook-signature": signatures,
    }
