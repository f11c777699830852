"""Cluster ids follow Kafka's `Uuid.randomUuid()`: Kafka's tools must accept them as arguments."""

import re

from storage.sql.cluster import random_cluster_id


def test_cluster_ids_never_start_with_a_dash() -> None:
    # One id in 64 would start with "-" by chance; kafka-storage's parser then reads it as an
    # option and formatting fails (CI failed this way). 2,000 draws all but surely meet one.
    ids = {random_cluster_id() for _ in range(2000)}
    assert len(ids) == 2000
    assert all(re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_-]{21}", i) for i in ids)
