"""--weights auto: the default preset (and any .gguf file) runs on its GGUF blocks times 8-bit activations where
quench's native kernels build; everything else keeps the dequantized weights."""

import platform

import pytest

from quench.errors import QuenchError
from quench.models.loading import check_weights, resolve_weights
from quench.models.presets import DEFAULT_PRESET
from quench.native_target import compiler

BUILDS = platform.system() == "Linux" and compiler() is not None


@pytest.mark.parametrize("model, dtype, device, expected", [
    (DEFAULT_PRESET, "auto", "cpu", "gguf-int8" if BUILDS else "dequantized"),
    ("some/model.gguf", "float32", "cpu", "gguf-int8" if BUILDS else "dequantized"),
    (DEFAULT_PRESET, "bfloat16", "cpu", "dequantized"),  # a --dtype the GGUF modes do not run
    (DEFAULT_PRESET, "auto", "cuda", "dequantized"),
    ("some/hf-directory", "auto", "cpu", "dequantized"),  # not a GGUF model
])
def test_auto_picks_the_integer_gguf_mode_where_it_runs(model, dtype, device, expected):
    assert resolve_weights("auto", model, dtype, device) == expected


@pytest.mark.parametrize("weights", ["dequantized", "gguf", "gguf-int8"])
def test_an_explicit_mode_is_kept(weights):
    assert resolve_weights(weights, DEFAULT_PRESET, "auto", "cpu") == weights


def test_the_gguf_modes_are_refused_for_other_models_and_dtypes():
    check_weights("auto", "bfloat16", "some/hf-directory")  # auto never refuses
    with pytest.raises(QuenchError, match="not a GGUF model"):
        check_weights("gguf-int8", "auto", "some/hf-directory")
    with pytest.raises(QuenchError, match="float32 activations"):
        check_weights("gguf-int8", "bfloat16", DEFAULT_PRESET)
    with pytest.raises(QuenchError, match="unknown weights"):
        check_weights("int4", "auto", DEFAULT_PRESET)
