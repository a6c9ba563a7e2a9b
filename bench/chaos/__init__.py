"""The chaos run: every promise checked at once, under faults of every kind.

Three clock servers of two web processes each share a MariaDB of the run's own and a
three-node RabbitMQ cluster with quorum queues; clients create, reschedule, cancel and count
alarms of AMQP, webhook and pull applications, while a nemesis kills, stalls and restarts
things on a schedule drawn from the seed. Afterwards an independent checker judges every
alarm from what clients were told and what consumers received.

    python -m bench.chaos --minutes 10 --seed 7
    python -m bench.chaos.checker <work directory>      # judge a run's records again
"""
