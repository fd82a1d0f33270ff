"""The allocator around the byte budget (providers/storage/buffers.py), in a child Python: its
heap is the thing measured."""

import json
import subprocess
import sys

import pytest


@pytest.mark.processes
def test_freed_heap_pages_go_back_to_the_os_once_a_phase_is_done():
    """What a copy's plan freed stays in the process (free() keeps the heap below a block
    still in use) until `release_freed` hands the pages back (#31: ~7 MiB at 100,000 files)."""
    code = (
        "import json\n"
        "from lifeboat_dr.providers.storage.buffers import release_freed, tune_allocator\n"
        "def rss():\n"
        "    with open('/proc/self/status') as f:\n"
        "        return next(int(line.split()[1]) for line in f if line.startswith('VmRSS')) >> 10\n"
        "tune_allocator()\n"
        "blocks = [bytes(64 << 10) for _ in range(1000)]  # 64 MiB, under the mmap threshold\n"
        "pin = bytes(64 << 10)  # allocated last: the heap's top stays in use\n"
        "del blocks\n"
        "held = rss()\n"
        "release_freed()\n"
        "print(json.dumps([held, rss()]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    held, after = json.loads(out.stdout.strip().splitlines()[-1])
    assert held - after > 32, f"{held} MiB before, {after} MiB after release_freed"
