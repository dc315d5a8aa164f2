"""A broker's Prometheus metrics as the tests read them: :func:`scrape` its /metrics
endpoint, :func:`sample` one series."""

from __future__ import annotations

import re
import urllib.request

_SAMPLE = re.compile(r'^([a-z_]+)(?:\{(.*)\})? (\S+)$')


def scrape(broker) -> dict:
    """{(name, frozenset of label pairs): value} of the broker's /metrics, over HTTP."""
    text = urllib.request.urlopen(
        f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m is None:
            continue
        labels = frozenset(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def sample(samples: dict, name: str, **labels) -> float | None:
    """The value of one series (None when it has no sample)."""
    return samples.get((name, frozenset((k, str(v)) for k, v in labels.items())))
