"""Publishing ring messages: the Publisher interface the engine uses, and RabbitMQ behind it.

Only this package imports pika."""
