"""Process-wide set-up that only an entry point does: logging, and the garbage collector."""

from __future__ import annotations

import gc
import logging
import re
import sys

# A path followed by its query string: "/hooks/x?token=..." in "POST /hooks/x?token=... HTTP/1.1".
_QUERY = re.compile(r"(/[^\s?#\"']*)\?[^\s\"'#]*")
# urllib3's loggers that name a request's URL (the webhook calls): at DEBUG its pool logs
# each request line, query string included, where a receiver's URL often holds a credential.
URL_LOGGERS = ("urllib3.connectionpool", "urllib3.connection", "urllib3.util.retry",
               "urllib3.poolmanager", "urllib3.response")  # fmt: skip


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s [%(threadName)s] %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("pika").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    hide_queries()


class HideQueries(logging.Filter):
    """Writes a record's message with every URL's query string as "?***"."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        hidden = _QUERY.sub(r"\1?***", message)
        if hidden != message:
            record.msg, record.args = hidden, None
        return True


def hide_queries() -> None:
    """No URL that urllib3 logs keeps its query string, at any level."""
    for name in URL_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, HideQueries) for f in logger.filters):
            logger.addFilter(HideQueries())


def freeze_startup_objects() -> None:
    """Keep what start-up built out of the garbage collector's full passes.

    Modules, Flask, SQLAlchemy's metadata and the like are about 100,000 objects that live as
    long as the process. A full collection walked them all holding the interpreter lock for
    50-75 ms, the worst lateness of a steady run; frozen, they are never walked again.
    """
    gc.collect()
    gc.freeze()
