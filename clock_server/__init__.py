"""clock: an alarm-clock service that stores timed alarms and rings them to RabbitMQ."""

__version__ = "0.2.0.dev0"
