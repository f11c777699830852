"""tests/integration/consumer_proc.py with a short metadata refresh for kafka-python
(metadata_max_age_ms, default 5 min), so a kafka-python group leader notices partitions added
by `PATCH /topics/{name}` within seconds, as librdkafka does with the
topic.metadata.refresh.interval.ms that consumer_proc already sets. Same arguments and events.
"""

from __future__ import annotations

import os
import runpy
from pathlib import Path

import kafka

kafka.KafkaConsumer.DEFAULT_CONFIG["metadata_max_age_ms"] = int(
    os.environ.get("E2E_METADATA_MAX_AGE_MS", "1000")
)
runpy.run_path(
    str(Path(__file__).resolve().parents[1] / "integration" / "consumer_proc.py"),
    run_name="__main__",
)
