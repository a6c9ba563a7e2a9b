"""The process's log: one handler on the root logger, writing text or JSON lines
(CLOCK_LOG_FORMAT) to standard error, every line with an `action`.

- A record with no action of its own, a library's (pika, waitress, urllib3, alembic,
  APScheduler, Python's warnings), gets the action `library`; clock's own records each name
  theirs (tests/test_log_actions.py checks it).
- A record made while the API serves a request carries the request's `request_id`
  (`clock_server.log_context`), whatever logger made it.
- pika's own records are written at DEBUG, whatever level pika gave them: a broker outage
  made it log dozens of ERROR lines about one event, which clock reports once per change of
  state of each connection (`broker/connection_log.py`).
- No URL that urllib3 logs keeps its query string.

JSON lines are written by python-json-logger's formatter, which turns a record's fields,
the `extra` of each log call included, into one JSON object per line.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
from collections.abc import Iterable
from types import TracebackType
from typing import IO, Any

from pythonjsonlogger.json import JsonFormatter

from clock_server.log_context import REQUEST_ID

DEFAULT_ACTION = "library"
# Loggers whose records are written at DEBUG, whatever their level.
DEMOTED = ("pika",)
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(threadName)s] action=%(action)s %(message)s"
# The attributes every LogRecord has: the others are a log call's `extra`.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message", "asctime", "action"}  # fmt: skip
_BARE = re.compile(r"[^\s\"=]+")
# A path followed by its query string: "/hooks/x?token=..." in "POST /hooks/x?token=... HTTP/1.1".
_QUERY = re.compile(r"(/[^\s?#\"']*)\?[^\s\"'#]*")
# urllib3's loggers that name a request's URL (the webhook calls): at DEBUG its pool logs
# each request line, query string included, where a receiver's URL often holds a credential.
URL_LOGGERS = ("urllib3.connectionpool", "urllib3.connection", "urllib3.util.retry",
               "urllib3.poolmanager", "urllib3.response")  # fmt: skip

log = logging.getLogger(__name__)


def configure_logging(level: str, log_format: str = "text") -> None:
    """Set the level, and, as logging.basicConfig does, install the handler on the root logger
    when it has none yet; then uncaught exceptions and Python's warnings are logged too."""
    root = logging.getLogger()
    root.setLevel(level.upper())
    for name in ("pika", "alembic", "apscheduler", "urllib3"):
        logging.getLogger(name).setLevel(logging.WARNING)
    hide_queries()
    if not root.handlers:
        root.addHandler(log_handler(level, log_format, sys.stderr))
        logging.captureWarnings(True)
        sys.excepthook = _log_uncaught
        threading.excepthook = _log_uncaught_in_thread


def log_handler(level: str, log_format: str, stream: IO[str]) -> logging.Handler:
    """The handler the process writes its log with, at `level`, in `log_format`."""
    handler = logging.StreamHandler(stream)
    handler.addFilter(Stamp())
    handler.addFilter(Demote(DEMOTED, logging.getLevelName(level.upper())))
    handler.setFormatter(json_formatter() if log_format == "json" else TextFormatter())
    return handler


def json_formatter() -> logging.Formatter:
    """One JSON object per line: time (ISO 8601, UTC), level, logger, process id, thread,
    action, message, then the record's own fields, and `exc_info` with the traceback of an
    error."""
    return JsonFormatter(
        "{levelname}{name}{process}{threadName}{action}{message}",
        style="{",
        rename_fields={"levelname": "level", "name": "logger", "threadName": "thread"},
        timestamp="time",
        json_ensure_ascii=False,
    )


class TextFormatter(logging.Formatter):
    """`time level logger [thread] action=<action> message key=value ...`: the record's own
    fields follow the message, a value quoted when it holds a space, a quote or `=`."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)
        fields = " ".join(
            f"{key}={_text_value(value)}" for key, value in own_fields(record) if value is not None
        )
        return f"{line} {fields}" if fields else line


def own_fields(record: logging.LogRecord) -> Iterable[tuple[str, Any]]:
    """The fields a log call gave the record (its `extra`), but the action."""
    return ((key, value) for key, value in vars(record).items() if key not in _STANDARD)


def _text_value(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if _BARE.fullmatch(text) else json.dumps(text, ensure_ascii=False)


class Stamp(logging.Filter):
    """Gives a record without an action the action `library`, and a record made while a
    request is served that request's id."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "action"):
            record.action = DEFAULT_ACTION
        request_id = REQUEST_ID.get()
        if request_id is not None and not hasattr(record, "request_id"):
            record.request_id = request_id
        return True


class Demote(logging.Filter):
    """Writes the records of the loggers named (and their children) at DEBUG, keeping the
    level they came with as `library_level`, and drops them below `threshold`."""

    def __init__(self, names: Iterable[str], threshold: int) -> None:
        super().__init__()
        self.names = tuple(names)
        self.threshold = threshold

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno <= logging.DEBUG or record.name.partition(".")[0] not in self.names:
            return True
        record.library_level = record.levelname
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return self.threshold <= logging.DEBUG


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


def _log_uncaught(
    kind: type[BaseException], error: BaseException, traceback: TracebackType | None
) -> None:
    log.critical("uncaught %s", kind.__name__, exc_info=(kind, error, traceback),
                 extra={"action": "uncaught_exception"})  # fmt: skip


def _log_uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit or args.exc_value is None:
        return
    name = args.thread.name if args.thread is not None else "?"
    log.error("uncaught %s in thread %s", args.exc_type.__name__, name,
              exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
              extra={"action": "uncaught_exception"})  # fmt: skip
