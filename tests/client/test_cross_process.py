"""Hits from another process, and after the server was killed with SIGKILL and restarted."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from pion.client import PionPromptCache
from tests.client import models
from tests.support.servers import ProcessServer

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def run_worker(runtime: str, url: str, n: int) -> dict:
    out = subprocess.run([sys.executable, "-m", "tests.client.worker", runtime, url, str(n)], cwd=ROOT,
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def local_logits(pc: PionPromptCache, n: int) -> np.ndarray:
    cache = pc.adapter.prefill(models.prompt(n))
    return pc.adapter.forward(models.prompt(3, offset=1), cache)


@pytest.mark.parametrize("runtime", [
    pytest.param("hf", marks=pytest.mark.hf), pytest.param("hf-lfm2", marks=pytest.mark.hf),
    pytest.param("mlx", marks=pytest.mark.mlx),
])
def test_a_prefix_stored_by_one_process_is_a_hit_in_another(server, runtime):
    pytest.importorskip("mlx_lm" if runtime == "mlx" else "transformers")
    url = f"pion://127.0.0.1:{server.port}"
    model = {"hf": models.hf_llama, "mlx": models.mlx_llama, "hf-lfm2": models.hf_lfm2}[runtime]()
    pc = PionPromptCache(model, url=url)
    pc.get_or_prefill(models.prompt(33))
    result = run_worker(runtime, url, 33)
    assert result["stats"]["hits"] == 1 and result["stats"]["misses"] == 0
    assert np.array_equal(np.array(result["logits"], dtype=np.float32), local_logits(pc, 33))


@pytest.mark.hf
def test_a_prefix_survives_kill_9_and_restart(tmp_path):
    pytest.importorskip("transformers")
    srv = ProcessServer(tmp_path / "data").start()
    try:
        url = f"pion://127.0.0.1:{srv.port}"
        pc = PionPromptCache(models.hf_llama(), url=url)
        pc.get_or_prefill(models.prompt(29))
        srv.kill9()
        srv.start()
        result = run_worker("hf", url, 29)
        assert result["stats"]["hits"] == 1, srv.log()[-2000:]
        assert np.array_equal(np.array(result["logits"], dtype=np.float32), local_logits(pc, 29))
    finally:
        srv.stop()
