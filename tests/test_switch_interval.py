"""The engine's process hands the interpreter lock over more often only while contended."""

from __future__ import annotations

import sys

from clock_server.runtime.process import SwitchInterval


def test_contended_shortens_the_switch_interval_and_uncontended_restores_it() -> None:
    default = sys.getswitchinterval()
    switch = SwitchInterval(contended_s=0.0005)
    try:
        switch(False)
        assert sys.getswitchinterval() == default
        switch(True)
        assert sys.getswitchinterval() == 0.0005
        switch(True)
        assert sys.getswitchinterval() == 0.0005
        switch(False)
        assert sys.getswitchinterval() == default
    finally:
        sys.setswitchinterval(default)
