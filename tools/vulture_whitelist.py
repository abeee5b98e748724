"""Names vulture cannot see used (read as config fields by name, or called by a framework).

``scripts/test`` runs ``vulture agent collectors tests bench tools dashboards`` with this file;
anything else vulture reports is dead code and fails the run. Each line uses a name, so vulture
counts it as used; the file is never imported.
"""
# ruff: noqa: B018, F821

# exporter-toolkit web config keys accepted for compatibility (Go TLS/HTTP2 switches with no
# Python equivalent): validated, then ignored by design.
prefer_server_cipher_suites
http2
# ssl.SSLContext.sni_callback's signature: (sslobj, server_name, context).
server_name
# Collector option fields read through the options model by name (spec.options / getattr).
hostname
device_name
qos_counters_path
roce_counters_path
pfc_watchdog_path
roce_status_path
lldp_path
link_stats_path
# pytest hook parameters (passed by keyword) and the exit status a hook sets.
exitstatus
_.exitstatus
# aiohttp reads web_response.SERVER_SOFTWARE for every response's Server header (agent/exporter/connections.py).
_.SERVER_SOFTWARE
# io.RawIOBase protocol of the recording reader's gzip member stream (agent/recording.py), called by io.BufferedReader.
readable
readinto
# Imported by the fake commands of tests/fakebin_faults (executables without a .py name).
spawn
# asyncio.DatagramProtocol callbacks of the hostile SNMP agent (tests/snmp_hostile.py), called by the event loop.
connection_made
datagram_received
