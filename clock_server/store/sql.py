"""Small helpers every store module uses: error translation, chunking, statement pieces."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from sqlalchemy import exc
from sqlalchemy.engine import Dialect

from clock_server.errors import Unavailable
from clock_server.slot_space import SLOTS, SlotRange


@contextlib.contextmanager
def translate_errors() -> Iterator[None]:
    """Turn lost connections and timeouts into Unavailable (HTTP 503)."""
    try:
        yield
    except (exc.OperationalError, exc.InterfaceError, exc.TimeoutError) as error:
        raise Unavailable(f"database unavailable: {_first_line(error)}") from error
    except exc.DBAPIError as error:
        if error.connection_invalidated:
            raise Unavailable(f"database unavailable: {_first_line(error)}") from error
        raise


def _first_line(error: Exception) -> str:
    text = str(getattr(error, "orig", None) or error)
    return text.splitlines()[0][:200] if text else type(error).__name__


def param_marker(dialect: Dialect) -> str:
    """The driver's placeholder for a statement sent through exec_driver_sql."""
    return "?" if dialect.paramstyle == "qmark" else "%s"


def chunks(items: list, size: int) -> Iterator[list]:  # type: ignore[type-arg]
    """Consecutive slices of at most `size` items, to keep IN lists and statements bounded."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def id_list(ids: Sequence[int]) -> str:
    """Ids written into a statement: cheaper than binding 1,000 parameters, and safe as ints."""
    return ",".join(str(int(alarm_id)) for alarm_id in ids)


def slot_filter(slots: SlotRange) -> str:
    """The condition, after an AND, that keeps the alarms of `slots`: none for all of them."""
    if slots.start <= 0 and slots.stop >= SLOTS:
        return ""
    return f" AND slot >= {int(slots.start)} AND slot < {int(slots.stop)}"
