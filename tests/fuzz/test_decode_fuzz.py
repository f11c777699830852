"""The decoding edge under fuzzing (README: Limits and hostile clients).

A child process replays the corpus of past crashes, then decodes mutated frames of every API
and version for a while, under an address-space limit: a native abort, or an allocation the
frame's size does not justify, ends it. The input it was decoding is kept in the corpus.
`make fuzz` runs the same for longer.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

from tests.fuzz.frames import CORPUS

ROOT = Path(__file__).resolve().parents[2]
SECONDS = float(os.environ.get("COORD_FUZZ_SECONDS", "45"))


def fuzz(tmp_path: Path, seconds: float, seed: int) -> subprocess.CompletedProcess[str]:
    current = tmp_path / "current.bin"
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.fuzz.frames",
            f"--seconds={seconds}",
            f"--seed={seed}",
            f"--current={current}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=seconds + 120,
    )


def test_corpus_holds_the_frame_that_used_to_abort_the_node() -> None:
    assert (CORPUS / "describe_groups_v5_count_2pow35.bin").exists()


def test_no_frame_crashes_the_decoder(tmp_path: Path) -> None:
    seed = random.randrange(1 << 30)
    done = fuzz(tmp_path, SECONDS, seed)
    current = tmp_path / "current.bin"
    if done.returncode != 0:
        kept = None
        if current.exists():
            kept = CORPUS / f"crash-{int(time.time())}-{seed}.bin"
            kept.write_bytes(current.read_bytes())
        raise AssertionError(
            f"the decoder crashed (exit {done.returncode}, seed {seed}); input kept as {kept}\n"
            f"{done.stdout[-2000:]}{done.stderr[-4000:]}"
        )
    assert "fuzzed" in done.stdout
