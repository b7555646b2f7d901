"""Session fixtures: the hubzoo module, tiny random checkpoints, their transformers twins.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

import _util  # noqa: E402

torch.set_num_threads(2)
torch.manual_seed(0)


def pytest_sessionfinish(session, exitstatus):
    out = _util.write_parity_errors()
    if out is not None:
        print(f"\nparity max abs errors written to {out}")


@pytest.fixture(scope="session")
def hz():
    """The installed hubzoo package (scripts/setup.sh: pip install . into this checkout's .venv)."""
    try:
        import hubzoo
    except ImportError as e:
        pytest.fail(f"import hubzoo failed (scripts/setup.sh installs it into .venv): {e}", pytrace=False)
    return hubzoo


@pytest.fixture(scope="session")
def hubzoo_bin():
    if not _util.HUBZOO_BIN.is_file():
        pytest.fail(f"{_util.HUBZOO_BIN} not built", pytrace=False)
    return _util.HUBZOO_BIN


@pytest.fixture(scope="session")
def tiny_paths(tmp_path_factory):
    """Every tiny variant built once: {variant: checkpoint dir}."""
    root = tmp_path_factory.mktemp("tiny")
    return {v: _util.tiny_models.build(v, root / v) for v in _util.tiny_models.VARIANTS}


@pytest.fixture(scope="session")
def hf_tiny(tiny_paths):
    """variant -> transformers model (fp32, eager), loaded once."""
    cache = {}

    def get(variant):
        if variant not in cache:
            cache[variant] = _util.tiny_models.load_hf(tiny_paths[variant])
        return cache[variant]

    return get


@pytest.fixture(scope="session")
def our_tiny(hz, tiny_paths):
    """variant -> hubzoo.CausalLM (fp32), loaded once."""
    cache = {}

    def get(variant):
        if variant not in cache:
            cache[variant] = hz.CausalLM.from_pretrained(str(tiny_paths[variant]), dtype="float32")
        return cache[variant]

    return get


@pytest.fixture(scope="session")
def smollm2_path():
    path = _util.SMOLLM2
    if not (path / "config.json").is_file():
        pytest.fail(f"{path} missing: run scripts/prepare_models.py", pytrace=False)
    return path
