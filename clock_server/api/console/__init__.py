"""The operator's console at /console: static pages and scripts over the JSON API, and the
overview endpoint that only the console needs (docs/console.md)."""
