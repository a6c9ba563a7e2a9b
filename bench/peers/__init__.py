"""Peer comparison (performance scenario 6): Celery ETA tasks and APScheduler 3 on this machine.

Each peer module (``celery_eta``, ``apscheduler3``) exposes ``run_steady(rate_per_s, duration_s)``
and ``run_burst(count)``, returning JSON-able dicts, and runs alone as
``python -m bench.peers.<module> --steady 1000 --duration 60`` or ``--burst 100000``.
"""
