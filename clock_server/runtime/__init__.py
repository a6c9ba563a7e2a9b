"""Running the service: building the parts from settings, serving HTTP, processes, signals.

The top layer: it may import every other package, and nothing imports it."""
