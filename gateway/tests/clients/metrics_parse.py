"""Scrapes a node's /metrics and parses it with the reference Python client's
OpenMetrics parser (prometheus_client); prints every sample as one JSON line:
{"samples": [{"name": ..., "labels": {...}, "value": ...}, ...]}."""

import json
import sys
import urllib.request

from prometheus_client.openmetrics.parser import text_string_to_metric_families


def main() -> None:
    with urllib.request.urlopen(sys.argv[1] + "/metrics") as response:
        text = response.read().decode("utf-8")
    samples = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.append(
                {"family": family.name, "type": family.type, "name": sample.name,
                 "labels": dict(sample.labels), "value": sample.value}
            )
    print(json.dumps({"samples": samples}))


if __name__ == "__main__":
    main()
