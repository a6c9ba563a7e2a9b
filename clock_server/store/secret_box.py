"""Webhook signing secrets encrypted at rest, with the keys of CLOCK_SECRET_KEYS.

A stored value is either "fernet:" and a Fernet token (AES-128-CBC and HMAC-SHA256, from the
cryptography package), or, from before a key was configured, the secret itself ("whsec_...").
Both are read. With keys, every write encrypts with the first key, and any of them decrypts
(MultiFernet); `reseal` brings a value under the first key, which `clock-server
reencrypt-secrets` does for every stored secret. Without keys, secrets are written as they
are, and an encrypted value cannot be read (SecretUnreadable).
"""

from __future__ import annotations

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

SEALED_PREFIX = "fernet:"


class SecretUnreadable(Exception):
    """A stored secret encrypted with none of the configured keys (or with keys unset)."""


class SecretBox:
    """Seals secrets for the database and opens them again. Thread-safe."""

    def __init__(self, keys: tuple[str, ...] = ()) -> None:
        fernets = [Fernet(key) for key in keys]
        self._first = fernets[0] if fernets else None
        self._any = MultiFernet(fernets) if fernets else None

    @classmethod
    def from_setting(cls, value: str) -> SecretBox:
        """The box of CLOCK_SECRET_KEYS: comma-separated keys (the settings checked them)."""
        return cls(tuple(key.strip() for key in value.split(",") if key.strip()))

    @property
    def encrypts(self) -> bool:
        return self._first is not None

    def seal(self, secret: str | None) -> str | None:
        """The value to store for `secret`: encrypted with the first key, if any."""
        if secret is None or self._first is None:
            return secret
        return SEALED_PREFIX + self._first.encrypt(secret.encode("utf-8")).decode("ascii")

    def open(self, stored: str | None) -> str | None:
        """The secret a stored value holds; SecretUnreadable when no key decrypts it."""
        if stored is None or not stored.startswith(SEALED_PREFIX):
            return stored
        if self._any is None:
            raise SecretUnreadable("a webhook secret is encrypted and CLOCK_SECRET_KEYS is unset")
        try:
            return self._any.decrypt(stored.removeprefix(SEALED_PREFIX)).decode("utf-8")
        except InvalidToken:
            raise SecretUnreadable(
                "a webhook secret is encrypted with a key not in CLOCK_SECRET_KEYS"
            ) from None

    def is_current(self, stored: str | None) -> bool:
        """Whether `stored` is as a write would store it now: NULL, plain without keys, or
        encrypted with the first key."""
        if stored is None:
            return True
        sealed = stored.startswith(SEALED_PREFIX)
        if self._first is None or not sealed:
            return self._first is None and not sealed
        try:
            self._first.decrypt(stored.removeprefix(SEALED_PREFIX))
        except InvalidToken:
            return False
        return True

    def reseal(self, stored: str | None) -> str | None:
        """`stored` as a write would store it now (see is_current): what a key rotation
        writes back. SecretUnreadable when no key decrypts it."""
        if self.is_current(stored):
            return stored
        return self.seal(self.open(stored))
