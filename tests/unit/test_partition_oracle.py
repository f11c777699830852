"""`partition_for` against the JDK: which log partition holds a group is Kafka's rule,
abs(String.hashCode) % partitions, so the installed JDK computes the expected values
(tests/unit/KafkaPartition.java, launched as a single-file source program), not this code.

A missing `java` fails the test, as every Java suite does (tests/support/java.py): never a skip.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest

from app.runtime.placement import CACHED_ID_LENGTH, java_string_hash, partition_for
from tests.support.java import JVM_OPTS

ORACLE = Path(__file__).with_name("KafkaPartition.java")
INT_MIN = -(1 << 31)
COUNTS = (1, 2, 3, 4, 7, 50, 64, 1000, 2**31 - 1)  # 50: Kafka's offsets.topic.num.partitions

# ids whose String.hashCode is Integer.MIN_VALUE: Math.abs would keep it negative, Kafka's
# Utils.abs takes it as 0. The last one was found by solving for its three last characters
# (CJK, beside an astral character and its surrogate pair).
INT_MIN_IDS = ("polygenelubricants", "GydZG_", "DESIGNING WORKHOUSES", "组-📈-370-斲鿥不")
FIXED_IDS = (
    "",
    "a",
    "my-group",
    "consumer-group-1",
    "Zähler",
    "日本語グループ",
    "😀",  # one astral character: two UTF-16 code units
    "𝄞-music-🎵-🎶",
    "\U0010ffff",  # the highest code point
    "\uffff\ue000",  # the highest BMP characters, beside the surrogates' range
    "\x00nul and\ttab\nnewline",
    "y" * CACHED_ID_LENGTH,  # the longest id partition_for caches
    "x" * CACHED_ID_LENGTH + "📈",  # the shortest it does not
    "z" * 5000,
)
ALPHABETS = ("abcXYZ019-_.", "äöüßéñ", "αβγЖЯ", "漢字かなカナ한글", "😀📈🎉𝄞𐍈🀄")


def random_ids(n: int) -> list[str]:
    rng = random.Random(43)  # fixed: the same ids on every run
    pool = "".join(ALPHABETS)
    return ["".join(rng.choice(pool) for _ in range(rng.randint(1, 40))) for _ in range(n)]


IDS = (*INT_MIN_IDS, *FIXED_IDS, *random_ids(300))


def utf16_units(s: str) -> int:
    return len(s.encode("utf-16-le")) // 2


@pytest.fixture(scope="module")
def jdk() -> dict[str, tuple[int, int, tuple[int, ...]]]:
    """id -> (UTF-16 length, hashCode, partition per COUNTS), as the JDK computes them."""
    if shutil.which("java") is None:
        pytest.fail(
            "java not found on PATH: this test needs Java 11+ (e.g. apt-get install "
            "openjdk-17-jdk-headless)",
            pytrace=False,
        )
    cmd = ["java", *JVM_OPTS, str(ORACLE), *map(str, COUNTS)]
    stdin = "".join(s.encode().hex() + "\n" for s in IDS)
    r = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{' '.join(cmd)} rc={r.returncode}:\n{r.stdout}\n{r.stderr}"
    rows = [tuple(int(x) for x in line.split()) for line in r.stdout.splitlines()]
    assert len(rows) == len(IDS), r.stdout
    return {s: (row[0], row[1], row[2:]) for s, row in zip(IDS, rows, strict=True)}


def test_the_oracle_saw_the_ids_and_the_int_min_cases(
    jdk: dict[str, tuple[int, int, tuple[int, ...]]],
) -> None:
    """The JDK decoded every id to the same UTF-16 code units, and the INT_MIN cases are
    Integer.MIN_VALUE by its account: otherwise the comparisons below would prove less."""
    assert {s: jdk[s][0] for s in IDS} == {s: utf16_units(s) for s in IDS}
    assert {s: jdk[s][1] for s in INT_MIN_IDS} == dict.fromkeys(INT_MIN_IDS, INT_MIN)
    assert {s: jdk[s][2] for s in INT_MIN_IDS} == dict.fromkeys(INT_MIN_IDS, (0,) * len(COUNTS))


def test_java_string_hash_is_the_jdks_string_hashcode(
    jdk: dict[str, tuple[int, int, tuple[int, ...]]],
) -> None:
    assert {s: java_string_hash(s) for s in IDS} == {s: jdk[s][1] for s in IDS}


@pytest.mark.parametrize("n", COUNTS)
def test_partition_for_is_kafkas_partition(
    jdk: dict[str, tuple[int, int, tuple[int, ...]]], n: int
) -> None:
    """A group's partition is the one Kafka's own coordinator would pick: every node of any
    release must route a group to the partition its records are in."""
    i = COUNTS.index(n)
    expected = {s: jdk[s][2][i] for s in IDS}
    assert {s: partition_for(s, n) for s in IDS} == expected
    assert {s: partition_for(s, n) for s in IDS} == expected  # again, from the cache
