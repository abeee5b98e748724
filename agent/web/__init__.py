"""The operator's web view: server-rendered HTML pages with inline SVG pictures.

Pages are built on the server (no build step, no client framework); a small static script
refreshes them in place. ``/``, ``/fabric`` and ``/api/findings`` are rendered after each
detection pass (:class:`fabricmon.agent.web.cache.WebCache`), per-finding and per-target
pages on first request and kept until the next pass, so no request does work that grows
with the number of findings.
"""
