"""A second worker of the same model reuses the first one's fingerprint, only when provably the
same bytes (issue 34; ``pion.client.weight_files``): its weights lie untouched in private
mappings of the same, unchanged files. Every other case hashes in full and gets the full digest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pion.client import PionPromptCache, fingerprint, weight_files
from pion.client.adapters import transformers as hf_adapter
from tests.client.models import hf_llama, prompt

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def model_dir(tmp_path):
    path = tmp_path / "model"
    hf_llama(seed=1).save_pretrained(str(path))
    return path


@pytest.fixture
def lookups(monkeypatch):
    """What every ``weight_files.lookup`` returned (None: no reuse)."""
    seen: list = []
    real = weight_files.lookup

    def spy(found):
        seen.append(real(found))
        return seen[-1]

    monkeypatch.setattr(weight_files, "lookup", spy)
    return seen


def load(path, dtype=None):
    """What the pion loaders do (``load_model``, ``load_demo``, ``real_model``): load, then map."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype or torch.float32).eval()
    hf_adapter.map_weights(model, path)
    return model


def full_hash(model) -> str:
    """The digest of every byte, computed without any cache (the reference)."""
    fingerprint.forget(model)
    adapter = hf_adapter.TransformersAdapter(model)
    tensors = [(f"p:{n}", t) for n, t in model.named_parameters()] + [(f"b:{n}", t) for n, t in model.named_buffers()]
    return hf_adapter.digest(((n, str(t.dtype), tuple(t.shape), hf_adapter.tensor_bytes(torch, t)) for n, t in tensors),
                             hf_adapter.adapter_state(adapter.model))


def test_a_loaded_model_lies_in_its_file_and_the_next_worker_reuses_its_digest(url, model_dir, lookups):
    first = load(model_dir)
    n_params = len(list(first.named_parameters(remove_duplicate=False)))
    assert hf_adapter.map_weights(first, model_dir) == n_params - 1  # all the file's bytes (lm_head: tied)
    a = PionPromptCache(first, url=url)
    assert a.fingerprint["weights"] == full_hash(first) and lookups == [None]
    record = json.loads((weight_files.worker_state.cache_dir() / weight_files.FILE_NAME).read_text())
    assert len(record) == 1
    b = PionPromptCache(load(model_dir), url=url)
    assert b.fp_hash == a.fp_hash and lookups[-1] == a.fingerprint["weights"]
    ids = prompt(24)
    a.get_or_prefill(ids)
    b.get_or_prefill(ids)
    assert b.stats()["hits"] == 1


@pytest.mark.parametrize("how", ["data", "numpy", "in_place"])
def test_an_edit_after_load_leaves_no_version_trace_but_is_hashed_in_full(url, model_dir, lookups, how):
    assert PionPromptCache(load(model_dir), url=url).fp_hash  # the first worker records its digest
    edited = load(model_dir)
    weight = edited.model.layers[2].self_attn.v_proj.weight
    if how == "data":  # no version counter bump: only the page says it was written
        weight.data[1, 2] += 0.5
    elif how == "numpy":
        weight.detach().numpy()[1, 2] += 0.5
    else:
        with torch.no_grad():
            weight[1, 2] += 0.5
    pc = PionPromptCache(edited, url=url)
    assert pc.fp_hash and lookups[-1] is None
    reference = hf_llama(seed=1)
    with torch.no_grad():
        reference.model.layers[2].self_attn.v_proj.weight[1, 2] += 0.5
    assert pc.fingerprint["weights"] == full_hash(reference) != PionPromptCache(load(model_dir), url=url).fingerprint[
        "weights"]


def test_a_rewritten_file_of_the_same_size_is_another_identity(url, model_dir, lookups):
    before = PionPromptCache(load(model_dir), url=url).fingerprint["weights"]
    hf_llama(seed=2).save_pretrained(str(model_dir))  # same shapes and size, other weights
    after = PionPromptCache(load(model_dir), url=url)
    assert after.fp_hash and lookups[-1] is None and after.fingerprint["weights"] == full_hash(hf_llama(seed=2)) != before


def test_a_touched_file_is_hashed_again_and_gets_the_same_digest(url, model_dir, lookups):
    before = PionPromptCache(load(model_dir), url=url).fingerprint["weights"]
    path = model_dir / "model.safetensors"
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    again = PionPromptCache(load(model_dir), url=url)
    assert again.fingerprint["weights"] == before and lookups[-1] is None
    assert PionPromptCache(load(model_dir), url=url).fingerprint["weights"] == before and lookups[-1] == before


def test_a_model_not_backed_by_files_records_nothing(url):
    model = hf_llama(seed=1)
    assert PionPromptCache(model, url=url).fp_hash
    assert not (weight_files.worker_state.cache_dir() / weight_files.FILE_NAME).exists()


def test_a_converted_dtype_keeps_its_copy_and_is_hashed_in_full(url, model_dir, lookups):
    model = load(model_dir, torch.bfloat16)  # converted on load: not the file's bytes
    assert hf_adapter.map_weights(model, model_dir) == 0
    assert PionPromptCache(model, url=url).fingerprint["weights"] == full_hash(model) and lookups == []


def test_an_unmerged_peft_adapter_on_a_mapped_model_is_another_fingerprint(url, model_dir, lookups):
    peft = pytest.importorskip("peft")
    base = PionPromptCache(load(model_dir), url=url)
    assert base.fp_hash
    config = peft.LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    wrapped = peft.get_peft_model(load(model_dir), config).eval()
    assert PionPromptCache(wrapped, url=url).fp_hash != base.fp_hash and lookups[-1] is None


def test_a_worker_process_reuses_the_digest_across_processes(url, model_dir, tmp_path):
    script = (
        "import json, sys, time\n"
        "from pion.client import PionPromptCache, weight_files\n"
        "from transformers import AutoModelForCausalLM\n"
        "from pion.client.adapters.transformers import map_weights\n"
        "model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype='float32').eval()\n"
        "assert map_weights(model, sys.argv[1]) > 0\n"
        "found = []\n"
        "real = weight_files.lookup\n"
        "weight_files.lookup = lambda plan: found.append(real(plan)) or found[-1]\n"
        "pc = PionPromptCache(model, url=sys.argv[2])\n"
        "print(json.dumps({'fp': pc.fp_hash, 'reused': found[-1] is not None,"
        " 'ms': pc.stats()['fingerprint_ms']}))\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}

    def worker() -> dict:
        out = subprocess.run([sys.executable, "-c", script, str(model_dir), url], env=env, capture_output=True,
                             text=True, timeout=120, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    first, second = worker(), worker()
    assert not first["reused"] and second["reused"] and second["fp"] == first["fp"]
    assert PionPromptCache(hf_llama(seed=1), url=url).fp_hash == first["fp"]  # the full digest of the same weights


# -- the second worker's cheap proof, and every mismatch it must still see (issue 34) ------------


def _file_ranges(model):
    return [(t.data_ptr(), t.numel() * t.element_size()) for t in model.parameters()]


def test_the_kernel_queries_agree_with_the_proc_files(model_dir):
    """PROCMAP_QUERY finds the mappings /proc/self/maps lists; PAGEMAP_SCAN and the pagemap read
    agree on an untouched model and on one written through ``.data``."""
    model = load(model_dir)
    ranges = _file_ranges(model)
    addresses = [a for a, _ in ranges]
    queried = weight_files._query_mappings(addresses)
    if queried is None:
        pytest.skip("this kernel has no PROCMAP_QUERY (Linux 6.11)")
    parsed = weight_files._mappings(min(addresses), max(a + n for a, n in ranges))
    assert sorted(queried) == sorted(m for m in parsed if any(m[0] <= a < m[1] for a in addresses))
    assert any(path.endswith("model.safetensors") for *_, path in queried)
    scanned = weight_files._scan_untouched(ranges)
    if scanned is None:
        pytest.skip("this kernel has no PAGEMAP_SCAN (Linux 6.7)")
    assert scanned is True and weight_files._read_untouched(ranges) is True
    model.model.layers[1].mlp.up_proj.weight.data[0, 0] += 1.0
    assert weight_files._scan_untouched(ranges) is False and weight_files._read_untouched(ranges) is False


def test_without_the_ioctls_the_proof_falls_back_to_the_proc_files(url, model_dir, lookups, monkeypatch):
    monkeypatch.setattr(weight_files, "_HAVE", {"query": False, "scan": False})
    first = PionPromptCache(load(model_dir), url=url).fingerprint["weights"]
    assert PionPromptCache(load(model_dir), url=url).fingerprint["weights"] == first and lookups[-1] == first
    edited = load(model_dir)
    edited.model.layers[0].self_attn.k_proj.weight.data[0, 1] -= 0.25
    assert PionPromptCache(edited, url=url).fingerprint["weights"] == full_hash(edited) != first
    assert len(lookups) == 2  # the written page refused the plan: nothing was even looked up


def test_a_changed_sample_with_the_same_size_and_mtime_is_another_identity(tmp_path):
    """Content changed in a sampled region, size and mtime put back: the sample says so (and
    the ctime, which no utime can put back)."""
    path = tmp_path / "w.bin"
    path.write_bytes(bytes(range(256)) * 40_000)
    before = weight_files.file_identity(str(path))
    st = path.stat()
    with open(path, "r+b") as fh:
        fh.seek(10)  # inside the first sample
        fh.write(b"\xff")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = weight_files.file_identity(str(path))
    assert after["size"] == before["size"] and after["mtime_ns"] == before["mtime_ns"]
    assert after["sample_crc32"] != before["sample_crc32"]


def test_a_file_of_another_size_with_the_same_weights_is_hashed_in_full(url, model_dir, lookups):
    from safetensors.torch import load_file, save_file

    before = PionPromptCache(load(model_dir), url=url).fingerprint["weights"]
    path = model_dir / "model.safetensors"
    size = path.stat().st_size
    save_file(load_file(str(path)), str(path), metadata={"format": "pt", "note": "x" * 64})
    assert path.stat().st_size != size
    again = PionPromptCache(load(model_dir), url=url)
    assert lookups[-1] is None and again.fingerprint["weights"] == before  # same bytes, hashed again


def test_a_model_in_memory_with_the_files_weights_never_uses_the_file_record(url, model_dir, lookups):
    recorded = PionPromptCache(load(model_dir), url=url).fingerprint["weights"]
    in_memory = hf_llama(seed=1)  # the same values, not the file's pages (a fine-tune would be this too)
    assert PionPromptCache(in_memory, url=url).fingerprint["weights"] == full_hash(in_memory) == recorded
    assert lookups == [None]  # only the first worker asked: the in-memory model had nothing to look up


def test_a_tensor_copied_out_of_its_file_is_not_described_by_the_file(url, model_dir, lookups):
    assert PionPromptCache(load(model_dir), url=url).fp_hash
    model = load(model_dir)
    weight = model.model.layers[3].self_attn.o_proj.weight
    weight.data = weight.data.clone()  # heap memory now: no page can vouch for it
    weight.data[2, 2] += 0.125
    pc = PionPromptCache(model, url=url)
    assert lookups[-1] is None and pc.fingerprint["weights"] == full_hash(model)


@pytest.mark.parametrize("kind", ["tied", "peft"])
def test_one_walk_gives_named_parameters_and_buffers_in_their_order(kind):
    model = hf_llama(seed=3)
    if kind == "peft":
        peft = pytest.importorskip("peft")
        model = peft.get_peft_model(model, peft.LoraConfig(r=2, target_modules=["q_proj"]))
    tensors, lora = hf_adapter.named_tensors(torch, model)
    expected = [(f"p:{n}", t) for n, t in model.named_parameters()] + [(f"b:{n}", t) for n, t in model.named_buffers()]
    assert [(n, id(t)) for n, t in tensors] == [(n, id(t)) for n, t in expected]
    assert hf_adapter.adapter_state(model, lora) == hf_adapter.adapter_state(model)
    assert bool(hf_adapter.adapter_state(model)) == (kind == "peft")


# -- the kernel's write tracking (userfaultfd write-protect, asynchronous) ------------------------


def test_an_armed_mapping_answers_by_the_write_tracking_and_sees_every_write(model_dir):
    """``map_weights`` arms the kernel's write tracking on its mapping before any tensor points at
    it; the page-table walk then says what the per-page anonymous test says: untouched after the
    load, written after one element changed through ``.data`` or numpy (no version trace)."""
    model = load(model_dir)
    ranges = _file_ranges(model)
    if not weight_files._HAVE.get("uffd") or weight_files._scan_untouched(ranges) is None:
        pytest.skip("this kernel has no asynchronous userfaultfd write-protect (Linux 6.7) or PAGEMAP_SCAN")
    assert weight_files._scan_written(ranges) is True and weight_files._scan_untouched(ranges) is True
    model.model.layers[1].mlp.up_proj.weight.data[3, 0] += 1.0
    assert weight_files._scan_written(ranges) is False and weight_files._scan_untouched(ranges) is False
    other = load(model_dir)
    other.model.norm.weight.detach().numpy()[5] = 2.0
    assert weight_files._scan_written(_file_ranges(other)) is False and not weight_files.untouched(_file_ranges(other))


def test_ranges_outside_an_armed_mapping_are_not_proven_by_it(model_dir):
    model = load(model_dir)
    heap = torch.ones(4096)
    assert weight_files._scan_written([(heap.data_ptr(), heap.nbytes)]) is False
    if not weight_files._HAVE.get("uffd"):
        pytest.skip("no asynchronous userfaultfd write-protect here")
    ptr = model.model.embed_tokens.weight.data_ptr()
    mine = [start for start, (end, *_) in weight_files._TRACKED.items() if start <= ptr < end]
    assert len(mine) == 1
    del model
    import gc

    gc.collect()
    assert mine[0] not in weight_files._TRACKED  # the mapping went with its tensors, and its entry


def test_without_write_tracking_the_page_test_proves_the_same(url, model_dir, lookups, monkeypatch):
    monkeypatch.setattr(weight_files, "_HAVE", {"uffd": False})
    monkeypatch.setattr(weight_files, "_UFFD", [])
    monkeypatch.setattr(weight_files, "_TRACKED", {})
    first = PionPromptCache(load(model_dir), url=url).fingerprint["weights"]
    assert not weight_files._TRACKED
    assert PionPromptCache(load(model_dir), url=url).fingerprint["weights"] == first and lookups[-1] == first
    edited = load(model_dir)
    edited.model.layers[0].self_attn.q_proj.weight.data[1, 1] *= 2
    assert PionPromptCache(edited, url=url).fingerprint["weights"] == full_hash(edited) != first


def test_one_byte_rewritten_outside_the_samples_with_size_and_mtime_put_back_is_another_identity(tmp_path):
    """The sampled hash does not cover this byte, and size and mtime are as before: the ctime
    (which no ``utime`` can put back) makes it another identity, so the next worker hashes in
    full. Not detected: a change that also leaves the ctime as it was (writing the block device,
    or the clock set back): that takes root."""
    path = tmp_path / "w.bin"
    path.write_bytes(os.urandom(4 << 20))
    size = path.stat().st_size
    step = (size - weight_files.SAMPLE_BYTES) // (weight_files.SAMPLES - 1)
    where = weight_files.SAMPLE_BYTES + (step - weight_files.SAMPLE_BYTES) // 2  # between samples 0 and 1
    assert weight_files.SAMPLE_BYTES < where < step
    before = weight_files.file_identity(str(path))
    st = path.stat()
    with open(path, "r+b") as fh:
        fh.seek(where)
        old = fh.read(1)
        fh.seek(where)
        fh.write(bytes([old[0] ^ 0x40]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = weight_files.file_identity(str(path))
    assert after["sample_crc32"] == before["sample_crc32"] and after["mtime_ns"] == before["mtime_ns"]
    assert after["size"] == before["size"] and after["ino"] == before["ino"]
    assert after["ctime_ns"] != before["ctime_ns"] and after != before


def test_a_weight_rewritten_in_place_with_the_mtime_put_back_changes_the_next_fingerprint(url, model_dir, lookups):
    before = PionPromptCache(load(model_dir), url=url).fingerprint["weights"]
    path = model_dir / "model.safetensors"
    with open(path, "rb") as fh:
        (length,) = __import__("struct").unpack("<Q", fh.read(8))
        header = json.loads(fh.read(length))
    at = 8 + length + header["model.layers.1.mlp.down_proj.weight"]["data_offsets"][0] + 4 * 7 + 1
    st = path.stat()
    with open(path, "r+b") as fh:  # in place: the same inode, size and (put back) mtime
        fh.seek(at)
        old = fh.read(1)
        fh.seek(at)
        fh.write(bytes([old[0] ^ 0x01]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    changed = load(model_dir)
    pc = PionPromptCache(changed, url=url)
    assert lookups[-1] is None and pc.fingerprint["weights"] == full_hash(changed) != before


def test_a_forked_child_forgets_the_parents_write_tracking(model_dir):
    """The child's mappings lose the registration and its inherited userfaultfd would act on the
    parent's address space: the child starts without either (and proves by the page test)."""
    model = load(model_dir)
    if not weight_files._HAVE.get("uffd"):
        pytest.skip("no asynchronous userfaultfd write-protect here")
    ranges = _file_ranges(model)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running the parent's cleanup
        try:
            answer = f"{len(weight_files._UFFD)} {len(weight_files._TRACKED)} {weight_files.untouched(ranges)}"
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            answer = repr(exc)
        os.write(write, answer.encode())
        os._exit(0)
    os.close(write)
    got = os.read(read, 200).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert got == "0 0 True"  # nothing inherited; the pages proven by the anonymous-page test
    assert weight_files._TRACKED and weight_files._scan_written(ranges) is True  # the parent keeps its own


# -- the description: one pass, the armed mappings' own record of their files ------------------


def _items(model):
    """``plan``'s items as ``TransformersAdapter.weights_hash`` makes them (every tensor here is
    contiguous and on the CPU)."""
    return [(n, t.dtype, t.shape, t.data_ptr(), t.nbytes) for n, t in hf_adapter.named_tensors(torch, model)[0]]


def _own(model):
    tensors = hf_adapter.named_tensors(torch, model)[0]
    return lambda i: fingerprint.own_digest(hf_adapter.tensor_bytes(torch, tensors[i][1]))


def test_a_model_in_memory_has_no_byte_hashed_for_the_description():
    """Nothing lies in a file: no description, and no tensor's own bytes hashed for it (the full
    hash that follows reads every byte once, not twice)."""
    model = hf_llama(seed=1)
    asked: list = []
    assert weight_files.plan(_items(model), lambda i: asked.append(i) or "x", None) is None
    assert asked == []


def test_the_armed_mappings_name_the_files_as_the_kernel_does(model_dir, monkeypatch):
    """``map_file`` recorded the inode and the kernel's name of each file it mapped: the proof
    finds the tensors' files from that without a system call, and the description, the files and
    the page ranges are the kernel's (``PROCMAP_QUERY``, else ``/proc/self/maps``)."""
    model = load(model_dir)
    if not weight_files._armed_mappings():
        pytest.skip("no asynchronous userfaultfd write-protect here: nothing is armed")
    asked: list = []
    real = weight_files._query_mappings
    monkeypatch.setattr(weight_files, "_query_mappings", lambda addresses: asked.append(1) or real(addresses))
    armed = weight_files.plan(_items(model), _own(model), {"x": 1})
    assert armed is not None and asked == []  # the armed mappings answered
    monkeypatch.setattr(weight_files, "_armed_mappings", lambda: [])
    kernel = weight_files.plan(_items(model), _own(model), {"x": 1})
    assert asked == [1] and kernel is not None
    assert (armed.key, armed.files, armed.ranges) == (kernel.key, kernel.files, kernel.ranges)
    assert weight_files.plan(_items(model), _own(model), {"x": 2}).key != armed.key  # extra is part of it


def _armed_plan_counting_kernel_queries(model_dir, monkeypatch):
    """The loaded model, its plan from the armed mappings, and a list that grows by one each time
    the proof asks the kernel for the mappings (PROCMAP_QUERY) from then on."""
    model = load(model_dir)
    if not weight_files._armed_mappings():
        pytest.skip("no asynchronous userfaultfd write-protect here: nothing is armed")
    before = weight_files.plan(_items(model), _own(model), None)
    asked: list = []
    real = weight_files._query_mappings
    monkeypatch.setattr(weight_files, "_query_mappings", lambda addresses: asked.append(1) or real(addresses))
    return model, before, asked


def test_files_found_from_the_armed_mappings_are_proven_by_the_write_tracking_only(model_dir, monkeypatch):
    """Where the armed mappings' record named the files, the pages must be proven by the write
    tracking (a range mapped again since is not armed); without that proof the kernel names the
    mappings again, and only then may the per-page test prove the pages."""
    model, before, asked = _armed_plan_counting_kernel_queries(model_dir, monkeypatch)
    monkeypatch.setattr(weight_files, "_scan_written", lambda ranges: False)
    after = weight_files.plan(_items(model), _own(model), None)
    assert asked == [1] and after is not None and after.key == before.key


def test_a_large_tensor_outside_the_armed_mappings_makes_the_proof_ask_the_kernel(model_dir, monkeypatch):
    """A tensor in no armed mapping larger than ``OWN_BYTES`` may lie in another file mapping:
    the kernel is asked then, and the description is the same (the rotary buffer is heap memory)."""
    model, before, asked = _armed_plan_counting_kernel_queries(model_dir, monkeypatch)
    monkeypatch.setattr(weight_files, "OWN_BYTES", 0)
    after = weight_files.plan(_items(model), _own(model), None)
    assert asked == [1] and after.key == before.key


def test_a_changed_tensor_shape_or_location_is_another_description(model_dir):
    model = load(model_dir)
    items = _items(model)
    base = weight_files.plan(items, _own(model), None)
    name, dtype, shape, ptr, nbytes = items[1]
    moved = items[:1] + [(name, dtype, shape, ptr + 4, nbytes)] + items[2:]
    reshaped = items[:1] + [(name, dtype, torch.Size([nbytes // 4]), ptr, nbytes)] + items[2:]
    assert len({base.key, weight_files.plan(moved, _own(model), None).key,
                weight_files.plan(reshaped, _own(model), None).key}) == 3
