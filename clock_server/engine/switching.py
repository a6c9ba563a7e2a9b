"""How often the engine's process hands the interpreter lock between its threads."""

from __future__ import annotations

import sys
import threading

# Beside a backlog: the express connection's IO thread, woken at each of another application's
# moments, waits for the interpreter lock behind the backlog's busy threads, up to one switch
# interval each (finding 64).
BESIDE_BACKLOG_S = 0.001


class BacklogSwitching:
    """Shortens the interpreter's switch interval while a backlog is due beside other
    applications' alarms, and puts the interval it found back when that ends. The interval is
    the whole process's: only the process that rings should use one (the supervisor's)."""

    def __init__(self, beside_backlog_s: float = BESIDE_BACKLOG_S) -> None:
        self.beside_backlog_s = beside_backlog_s
        self._usual_s = sys.getswitchinterval()
        self._beside = False
        self._lock = threading.Lock()

    @property
    def beside(self) -> bool:
        return self._beside

    def set_beside_backlog(self, beside: bool) -> None:
        if beside == self._beside:
            return
        with self._lock:
            self._beside = beside
            sys.setswitchinterval(self.beside_backlog_s if beside else self._usual_s)
