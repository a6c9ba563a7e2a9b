"""Answers of bounded size: a list of JSON items written one by one, ended at a byte cap.

An alarm's payload may be 64 KiB, and JSON writes a control character as six bytes
(`\\u0001`), so a page of 1,000 alarms could be 375 MiB. A page instead holds its items
until the next one would take it past CLOCK_PAGE_MAX_BYTES; it then ends early and hands
back the cursor of its last item (it always holds at least one). The rows are read in
chunks sized by what the page still has room for, never more than the cap's worth of
payloads at their limit, and each is serialized as it comes, so that neither the rows nor
the answer are ever held beyond about the cap.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import orjson
from flask import Response

from clock_server.model import Alarm, AlarmFilter
from clock_server.settings import Settings
from clock_server.store.alarm_search import order_of, position

# Room kept for what closes the answer: the cursor (a business_id of 128 characters of up to
# 4 bytes each, as JSON in base64) and the brackets.
TAIL_BYTES = 1_024


class JsonList:
    """`{"<key>":[item,...]` built from each item's bytes, refusing an item that would take it
    past `max_bytes` (but never the first)."""

    def __init__(self, key: str, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._parts = [b'{"' + key.encode() + b'":[']
        self._size = len(self._parts[0]) + TAIL_BYTES
        self._items_bytes = 0
        self.count = 0

    @property
    def room(self) -> int:
        """Bytes left before the cap."""
        return max(self.max_bytes - self._size, 0)

    @property
    def average_bytes(self) -> int:
        """The items' mean size so far; 0 before the first."""
        return self._items_bytes // self.count if self.count else 0

    def add(self, item: dict[str, Any]) -> bool:
        """Append `item` unless it would not fit; False when the list is full."""
        data = orjson.dumps(item)
        if self.count and self._size + len(data) + 1 > self.max_bytes:
            return False
        if self.count:
            self._parts.append(b",")
        self._parts.append(data)
        self._size += len(data) + 1
        self._items_bytes += len(data) + 1
        self.count += 1
        return True

    def response(self, **rest: Any) -> Response:
        """The answer: the list, then `rest`'s fields; its parts are sent as they are."""
        tail = b"]"
        for name, value in rest.items():
            tail += b',"' + name.encode() + b'":' + orjson.dumps(value)
        parts = [*self._parts, tail + b"}\n"]
        length = sum(len(part) for part in parts)
        return Response(parts, mimetype="application/json", headers={"Content-Length": str(length)})


def rows_per_read(settings: Settings, page: JsonList, left: int) -> int:
    """How many alarms to read next: as many as the page's room seems to hold (judged by the
    items so far, or before any by an alarm at its limits, escaped) and one more, to learn
    whether the page is full; never more than the cap's worth of payloads at their limit."""
    most = max(1, settings.page_max_bytes // settings.payload_max_bytes)
    guess = page.average_bytes or settings.single_body_max_bytes
    return max(1, min(left, most, page.room // guess + 1))


Search = Callable[[AlarmFilter, int, tuple[Any, ...] | None], Sequence[Alarm]]


def alarm_page(
    search: Search,
    where: AlarmFilter,
    limit: int,
    after: tuple[Any, ...] | None,
    settings: Settings,
    encode_cursor: Callable[[tuple[Any, ...]], str],
) -> Response:
    """GET /v1/alarms: up to `limit` alarms matching `where` after `after`, and at most
    CLOCK_PAGE_MAX_BYTES; `next_cursor` once the page is full by either, else null."""
    order = order_of(where)
    page = JsonList("alarms", settings.page_max_bytes)
    last: Alarm | None = None
    full = False
    while not full and page.count < limit:
        wanted = rows_per_read(settings, page, limit - page.count)
        chunk = search(where, wanted, after)
        for alarm in chunk:
            if not page.add(alarm.to_json()):
                full = True
                break
            last = alarm
        if len(chunk) < wanted:
            break
        after = position(order, chunk[-1])
    more = full or page.count == limit
    cursor = encode_cursor(position(order, last)) if more and last is not None else None
    return page.response(next_cursor=cursor)
