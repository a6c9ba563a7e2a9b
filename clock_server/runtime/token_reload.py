"""CLOCK_TOKENS_FILE read again while the server runs: when the file changes, and on SIGHUP.

A thread looks at the file every TOKENS_FILE_POLL_S (its modification time, size, inode and
device, so that an edit in place, a rename over it and a Kubernetes secret's swapped symlink
are all seen) and, when it changed or a reload was asked (`request`, from the SIGHUP
handler), reads it with the same rules as at start. A file that cannot be read or holds a bad
entry changes nothing: the tokens in force stay, and the error is logged, naming the setting
and the entry, never a token. A file that holds no token is such a file, so a reload never
turns authentication off. With inline CLOCK_TOKENS, or none, there is nothing to read again.
"""

from __future__ import annotations

import logging
import os
import threading

from clock_server.api.tokens import LiveTokens, load_tokens
from clock_server.errors import ConfigError

log = logging.getLogger(__name__)

TOKENS_FILE_POLL_S = 2.0

_Stamp = tuple[int, int, int, int] | None
# The file as the first look finds it differs from this: it is read once more then, in case
# it changed between the start's reading and the look.
_UNSEEN: _Stamp = (-1, -1, -1, -1)


class TokenReloads:
    """Keeps `tokens` as `path` says; `start` the thread, or step it with `run_once`."""

    def __init__(self, path: str, tokens: LiveTokens, interval_s: float = TOKENS_FILE_POLL_S):
        self.path = path
        self.tokens = tokens
        self.interval_s = interval_s
        self._asked = threading.Event()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._stamp = _UNSEEN
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.path and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="clock-tokens", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(1.0)

    def request(self) -> None:
        """Read the file again at once (SIGHUP). Only sets events: safe in a signal handler."""
        if not self.path:
            log.info("SIGHUP: tokens come from CLOCK_TOKENS or are off; nothing to read again",
                     extra={"action": "tokens_not_reloaded"})  # fmt: skip
            return
        self._asked.set()
        self._wake.set()

    def run_once(self) -> bool:
        """Read the file if it changed or a reload was asked; True when new tokens are in
        force."""
        asked = self._asked.is_set()
        self._asked.clear()
        stamp = _stamp(self.path)
        if not asked and stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            table = load_tokens("", self.path)
        except ConfigError as error:
            log.error("tokens not reloaded, the %d in force stay: %s", len(self.tokens),
                      error.message, extra={"action": "tokens_reload_failed"})  # fmt: skip
            return False
        if table == self.tokens.table:
            if asked:
                log.info("tokens read again from CLOCK_TOKENS_FILE: unchanged, %d bearer tokens",
                         len(table), extra={"action": "tokens_reloaded"})  # fmt: skip
            return False
        self.tokens.replace(table)
        log.info("tokens reloaded from CLOCK_TOKENS_FILE: %d bearer tokens", len(table),
                 extra={"action": "tokens_reloaded"})  # fmt: skip
        return True

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stopping.is_set():
                return
            try:
                self.run_once()
            except Exception:  # the next look tries again; the tokens in force stay
                log.exception("reading CLOCK_TOKENS_FILE failed",
                              extra={"action": "tokens_reload_failed"})  # fmt: skip


def _stamp(path: str) -> _Stamp:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino, st.st_dev)
