"""The parts of waitress that clock uses beyond `waitress.create_server`, in one place.

waitress documents its settings, not its classes. clock's HTTP edge (`http_channel.py`) and
its shutdown deadline (`http_server.py`) subclass and read these undocumented names:

- `HTTPChannel`: `parser_class`, `task_class` and `error_task_class` replaced by clock's,
  `request` and `will_close` read and set (the header deadline);
- `HTTPRequestParser`: `received(data)` overridden for the body gate, and the state it reads
  and sets once a request's headers are in (`headers_finished`, `completed`, `body_rcv`,
  `headers`, `command`, `path`, `content_length`, `chunked`, `expect_continue`);
- `ErrorTask.execute()` overridden, `response_headers` added to (nosniff on waitress's own
  errors); `WSGITask.get_environment()` overridden (the gate's checks handed to the app);
- `BaseWSGIServer.channel_class` replaced, `task_dispatcher` read, `maintenance(now)`
  replaced on each listener by one that calls it and then looks at `active_channels` for
  late headers; `MultiSocketServer.map` (its listeners);
- `ThreadedTaskDispatcher.shutdown(cancel_pending, timeout)` overridden,
  `set_thread_count(count)` called, `queue_logger` replaced;
- `create_server(..., _dispatcher=)`, the one way to give the server that dispatcher.

Any waitress release may change them: setup.cfg pins waitress to the version they were
checked against (`WAITRESS_VERSION`), and tests/test_waitress_names.py checks each of them
against the waitress installed.
"""

from __future__ import annotations

from typing import NamedTuple

WAITRESS_VERSION = "3.0.2"

CLASS_ATTRIBUTE = "class attribute"  # read or replaced on a subclass
ATTRIBUTE = "attribute"  # set on each instance by waitress's own code
METHOD = "method"  # called, or overridden calling waitress's through super()
PARAMETER = "parameter"  # of a function


class WaitressName(NamedTuple):
    """One undocumented name: `owner` is ``module:Class`` (or ``module:function`` for a
    parameter); `signature` is a method's parameters as ``inspect.signature`` shows them."""

    owner: str
    name: str
    kind: str
    signature: str | None = None


_CHANNEL = "waitress.channel:HTTPChannel"
_PARSER = "waitress.parser:HTTPRequestParser"
_DISPATCHER = "waitress.task:ThreadedTaskDispatcher"

NAMES = (
    WaitressName(_CHANNEL, "parser_class", CLASS_ATTRIBUTE),
    WaitressName(_CHANNEL, "task_class", CLASS_ATTRIBUTE),
    WaitressName(_CHANNEL, "error_task_class", CLASS_ATTRIBUTE),
    WaitressName(_CHANNEL, "request", CLASS_ATTRIBUTE),
    WaitressName(_CHANNEL, "will_close", CLASS_ATTRIBUTE),
    WaitressName(_PARSER, "received", METHOD, "(self, data)"),
    WaitressName(_PARSER, "headers_finished", CLASS_ATTRIBUTE),
    WaitressName(_PARSER, "completed", CLASS_ATTRIBUTE),
    WaitressName(_PARSER, "body_rcv", CLASS_ATTRIBUTE),
    WaitressName(_PARSER, "headers", ATTRIBUTE),
    WaitressName(_PARSER, "command", ATTRIBUTE),
    WaitressName(_PARSER, "path", ATTRIBUTE),
    WaitressName(_PARSER, "content_length", CLASS_ATTRIBUTE),
    WaitressName(_PARSER, "chunked", CLASS_ATTRIBUTE),
    WaitressName(_PARSER, "expect_continue", CLASS_ATTRIBUTE),
    WaitressName("waitress.task:ErrorTask", "execute", METHOD, "(self)"),
    WaitressName("waitress.task:Task", "response_headers", ATTRIBUTE),
    WaitressName("waitress.task:WSGITask", "get_environment", METHOD, "(self)"),
    WaitressName("waitress.server:BaseWSGIServer", "channel_class", CLASS_ATTRIBUTE),
    WaitressName("waitress.server:BaseWSGIServer", "task_dispatcher", ATTRIBUTE),
    WaitressName("waitress.server:BaseWSGIServer", "maintenance", METHOD, "(self, now)"),
    WaitressName("waitress.server:BaseWSGIServer", "active_channels", ATTRIBUTE),
    WaitressName("waitress.server:MultiSocketServer", "map", ATTRIBUTE),
    WaitressName(_DISPATCHER, "shutdown", METHOD, "(self, cancel_pending=True, timeout=5)"),
    WaitressName(_DISPATCHER, "set_thread_count", METHOD, "(self, count)"),
    WaitressName(_DISPATCHER, "queue_logger", CLASS_ATTRIBUTE),
    WaitressName("waitress.server:create_server", "_dispatcher", PARAMETER),
)
