"""How often the engine's process hands the interpreter lock between its threads."""

from __future__ import annotations

import sys

# Beside a backlog, with Python's 5 ms, a drain beside another application's alarms fell in 10
# of 25 runs into a state at about half its rate, the engine and MariaDB spending a third more
# per alarm; with 1 ms in none of 13 (finding 64). Alone, no drain did, and 0.5 ms made one
# 4 % slower (finding 43).
BESIDE_BACKLOG_S = 0.001


class BacklogSwitching:
    """Shortens the interpreter's switch interval while a backlog is due beside other
    applications' alarms, and puts the interval it found back when that ends. The interval is
    the whole process's: only the process that rings should use one (the supervisor's). Told
    by the ring loop's thread alone."""

    def __init__(self, beside_backlog_s: float = BESIDE_BACKLOG_S) -> None:
        self.beside_backlog_s = beside_backlog_s
        self._usual_s = sys.getswitchinterval()
        self._beside = False

    @property
    def beside(self) -> bool:
        return self._beside

    def set_beside_backlog(self, beside: bool) -> None:
        if beside != self._beside:
            self._beside = beside
            sys.setswitchinterval(self.beside_backlog_s if beside else self._usual_s)
