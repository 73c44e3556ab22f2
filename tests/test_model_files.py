"""A damaged, truncated or hand-edited trained model is one line naming the file and the
fix, not a Keras traceback (7816575: 'ValueError: File not found' for a file that exists,
and 52 lines of traceback for a model.json whose kind was edited)."""

from __future__ import annotations

import json

import pytest

from ptycho.errors import PtychoError
from ptycho.nets.infer import load_network
from ptycho.nets.state import load_meta

META = {"model": {"kind": "pinn"}, "train": {"xla": "off", "seed": 0}, "n": 64, "physics": {}}


@pytest.mark.parametrize("content", [b"PK\x03\x04 truncated zip", b"not a model at all", b""])
def test_a_truncated_or_foreign_model_keras_is_one_line(tmp_path, content):
    (tmp_path / "model.keras").write_bytes(content)
    with pytest.raises(PtychoError) as err:
        load_network(tmp_path)
    text = str(err.value)
    assert "\n" not in text and "model.keras" in text and "train it again" in text and len(text) < 400


@pytest.mark.parametrize(
    ("meta", "match"),
    [
        ({**META, "model": {"kind": "resnet"}}, "model kind 'resnet' is not one of pinn, baseline"),
        ({**META, "model": "pinn"}, "model kind None"),
        ([1, 2], "model kind None"),
        ({k: v for k, v in META.items() if k != "physics"}, "no physics recorded"),
    ],
)
def test_a_hand_edited_model_json_is_one_line(tmp_path, meta, match):
    (tmp_path / "model.json").write_text(json.dumps(meta))
    with pytest.raises(PtychoError, match=match) as err:
        load_meta(tmp_path)
    assert "\n" not in str(err.value)


def test_a_well_formed_model_json_loads(tmp_path):
    (tmp_path / "model.json").write_text(json.dumps(META))
    assert load_meta(tmp_path) == META
