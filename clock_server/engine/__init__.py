"""Claiming alarms as they come near, holding them in a bounded heap, ringing them when due.

No SQL and no AMQP here: the engine reaches the database through store.ports, the broker
through broker.publisher, and time through the Clock."""
