"""The bodies the API answers, as typed dicts: a route builds its answer as one (or, where a
dict of the vocabulary's `to_json` is the answer, one describes it), and api/openapi
generates the document's response schemas from them with pydantic."""
