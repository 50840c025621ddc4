#!/usr/bin/python3
"""Load for the fleet test (test/fleet/run.sh), run inside one host.

Sends GET requests back to back, each on a new connection, and never retries: a request that
fails counts as failed. Writes a JSON summary to OUT every half second and a last time, with
"done": true, once STOP exists:
  total, failed, errors (kind -> count), versions (config version header -> first and last time
  seen, time.time()), which the test uses to check the order in which hosts switched.

usage: load.py URL HEADER STOP OUT
"""
import http.client
import json
import os
import sys
import time
import urllib.parse

# A request taking longer than this is a failure (a reload must not stall traffic either).
TIMEOUT_S = 5
# Pause between requests: about 100 requests/s per host, enough to see any gap of a few ms
# without starving the 2 cores the three hosts share.
PAUSE_S = 0.01
# How often the summary is rewritten, so the test can see the load has started.
WRITE_EVERY_S = 0.5


def main():
    url, header, stop, out = sys.argv[1:5]
    u = urllib.parse.urlsplit(url)
    s = {"total": 0, "failed": 0, "errors": {}, "versions": {}, "done": False}
    last_write = 0.0
    while True:
        done = os.path.exists(stop)
        now = time.time()
        if done or now - last_write >= WRITE_EVERY_S:
            s["done"] = done
            with open(out + ".tmp", "w") as f:
                json.dump(s, f)
            os.replace(out + ".tmp", out)
            last_write = now
        if done:
            return
        s["total"] += 1
        try:
            c = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=TIMEOUT_S)
            c.request("GET", u.path or "/")
            r = c.getresponse()
            r.read()
            c.close()
            if r.status != 200:
                raise RuntimeError("HTTP %d" % r.status)
            v = r.getheader(header, "none")
            seen = s["versions"].setdefault(v, {"first": now, "last": now, "count": 0})
            seen["last"] = time.time()
            seen["count"] += 1
        except Exception as e:  # every failure counts; the kind is kept for the report
            s["failed"] += 1
            kind = type(e).__name__ + (": " + str(e) if isinstance(e, RuntimeError) else "")
            s["errors"][kind] = s["errors"].get(kind, 0) + 1
        time.sleep(PAUSE_S)


if __name__ == "__main__":
    main()
