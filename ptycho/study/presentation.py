"""How the study's models, XLA modes and precisions look to a reader: one table each of
their words, colours, markers, line styles and hatching, read by the arms' labels, the
figures, the tables and the report.

The science defines each mode and precision by one record (:data:`ptycho.nets.xla.MODES`,
:data:`ptycho.nets.precision.PRECISIONS`); a row here only chooses how it looks. A
registered name without a row still renders: a mode reads ``XLA <name>`` in the next
Okabe-Ito colour no mode has, a precision reads as its name with the next free marker
fill and hatching, a model as its name with the next free marker, line style and
hatching. So adding a mode or a precision is its one record; its row here is a choice.

The channels (``ptycho.study.figures.style`` draws with them):

* colour is the mode's (Okabe-Ito, colour-blind safe): ``off`` (no XLA) vermillion,
  ``jit`` blue, ``auto`` bluish green, ``physics`` reddish purple;
* the model is told apart by line style, marker and hatching, never by colour;
* the precision is a third channel: float32 is drawn exactly as before the precision
  axis; a reduced precision lightens its mode's colour, hollows (bfloat16) or half-fills
  (float16) the model's marker, and adds its own hatching to the model's. Colour is taken
  by the mode and line style, marker shape and diagonal hatching by the model, so the
  precision gets what is left of each glyph: a lighter tint (in colour, "the same mode,
  paler"), and a cue that needs no colour at all, so it survives greyscale print and
  every colour-vision deficiency. Where a glyph's hatching already means something else
  (the parts of a train step), the precision is in the row's words and the tint.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NamedTuple

from ptycho.nets.models import MODEL_KINDS
from ptycho.nets.precision import PRECISIONS
from ptycho.nets.xla import MODES, REFERENCE

#: Okabe & Ito (2008) colour-blind-safe qualitative palette.
OKABE_ITO = ("#000000", "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7")
#: A name that is no registered mode (or a colour past the palette's spares).
UNKNOWN_COLOUR = "#999999"


class ModeLook(NamedTuple):
    words: str  #: in legends, labels and sentences ("XLA jit")
    colour: str  #: the mode's colour in every figure


class ModelLook(NamedTuple):
    words: str  #: "PINN"
    linestyle: str  #: its lines
    marker: str  #: its points (a reduced precision changes the marker's fill, not its shape)
    hatch: str  #: its bars and boxes


class PrecisionLook(NamedTuple):
    words: str  #: "bfloat16"
    lighten: float  #: how much white is mixed into the mode's colour (0: the colour itself)
    fillstyle: str  #: Matplotlib fill style of the model's marker on lines and points ("none": hollow)
    hatch: str  #: hatching added to the model's on bars and boxes


#: One row per mode: its words and its colour (Okabe-Ito vermillion, blue, bluish green, reddish purple).
MODE_LOOKS: dict[str, ModeLook] = {
    "off": ModeLook("no XLA (off)", "#D55E00"),
    "jit": ModeLook("XLA jit", "#0072B2"),
    "auto": ModeLook("XLA auto", "#009E73"),
    "physics": ModeLook("XLA physics", "#CC79A7"),
}
#: One row per model.
MODEL_LOOKS: dict[str, ModelLook] = {
    "pinn": ModelLook("PINN", "-", "o", ""),
    "baseline": ModelLook("Baseline", "--", "s", "///"),
}
#: One row per precision: float32, the reference, is plain (drawn as before the axis).
PRECISION_LOOKS: dict[str, PrecisionLook] = {
    "float32": PrecisionLook("float32", 0.0, "full", ""),
    "mixed_bfloat16": PrecisionLook("bfloat16", 0.4, "none", "...."),
    "mixed_float16": PrecisionLook("float16", 0.4, "bottom", "---"),
}

#: What a registered name without a row gets, in order of the registry (first free first).
_SPARE_COLOURS = ("#E69F00", "#56B4E9", "#F0E442", "#000000")  # the Okabe-Ito colours no mode has
_SPARE_MARKERS = ("^", "D", "v", "P")
_SPARE_LINESTYLES = (":", "-.")
_SPARE_FILLS = ("left", "right", "top")
_SPARE_HATCHES = ("xxx", "|||", "+++")


def _spare(name: str, registry: Iterable[str], rows: Mapping[str, Any], spares: tuple, fallback: Any) -> Any:
    """The spare of ``name``, a registered name without a row: the ``k``-th, ``k`` its place
    among those names, past the spares ``fallback``."""
    k = [n for n in registry if n not in rows].index(name)
    return spares[k] if k < len(spares) else fallback


def mode_look(mode: str) -> ModeLook:
    """A mode's row; a registered mode without one: ``XLA <name>`` in the next free colour;
    a name that is no mode: itself, in grey."""
    if mode in MODE_LOOKS:
        return MODE_LOOKS[mode]
    if mode not in MODES:
        return ModeLook(str(mode), UNKNOWN_COLOUR)
    words = mode if mode == REFERENCE else f"XLA {mode}"
    return ModeLook(words, _spare(mode, MODES, MODE_LOOKS, _SPARE_COLOURS, UNKNOWN_COLOUR))


def model_look(model: str) -> ModelLook:
    """A model's row; a model without one: its name, with the next free line style, marker
    and hatching; a name that is no model: itself, drawn plain."""
    if model in MODEL_LOOKS:
        return MODEL_LOOKS[model]
    if model not in MODEL_KINDS:
        return ModelLook(str(model), "-", "o", "")
    return ModelLook(
        model,
        _spare(model, MODEL_KINDS, MODEL_LOOKS, _SPARE_LINESTYLES, "-"),
        _spare(model, MODEL_KINDS, MODEL_LOOKS, _SPARE_MARKERS, "o"),
        _spare(model, MODEL_KINDS, MODEL_LOOKS, _SPARE_HATCHES, ""),
    )


def precision_look(precision: str) -> PrecisionLook:
    """A precision's row; a registered precision without one: its name, paler, with the next
    free marker fill and hatching; a name that is no precision: itself, drawn plain."""
    if precision in PRECISION_LOOKS:
        return PRECISION_LOOKS[precision]
    if precision not in PRECISIONS:
        return PrecisionLook(str(precision), 0.0, "full", "")
    return PrecisionLook(
        precision,
        0.4,
        _spare(precision, PRECISIONS, PRECISION_LOOKS, _SPARE_FILLS, "full"),
        _spare(precision, PRECISIONS, PRECISION_LOOKS, _SPARE_HATCHES, ""),
    )


class _Column(Mapping):
    """One column of a look table over every registered name, read when asked (a name
    registered later is in it too, with its default look); a name that is not registered
    is a KeyError, so ``.get(name, default)`` keeps its default."""

    def __init__(self, names: Callable[[], Iterable[str]], look: Callable[[str], NamedTuple], field: str | None):
        self._names, self._look, self._field = names, look, field

    def __getitem__(self, name: str):
        if name not in list(self._names()):
            raise KeyError(name)
        look = self._look(name)
        return look if self._field is None else getattr(look, self._field)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._names()))

    def __len__(self) -> int:
        return len(list(self._names()))

    def __repr__(self) -> str:
        return repr(dict(self))


def _modes() -> Iterable[str]:
    return MODES


def _models() -> Iterable[str]:
    return MODEL_KINDS


def _precisions() -> Iterable[str]:
    return PRECISIONS


#: How figures and tables call a model, a mode and a precision (every registered one).
MODEL_WORDS: Mapping[str, str] = _Column(_models, model_look, "words")
MODE_WORDS: Mapping[str, str] = _Column(_modes, mode_look, "words")
PRECISION_WORDS: Mapping[str, str] = _Column(_precisions, precision_look, "words")
#: Each mode's colour, in every figure.
MODE_COLOURS: Mapping[str, str] = _Column(_modes, mode_look, "colour")
#: Each model's line style, marker and hatching.
MODEL_LINESTYLES: Mapping[str, str] = _Column(_models, model_look, "linestyle")
MODEL_MARKERS: Mapping[str, str] = _Column(_models, model_look, "marker")
MODEL_HATCHES: Mapping[str, str] = _Column(_models, model_look, "hatch")
#: How each precision is drawn (:class:`PrecisionLook`: lighten, fillstyle, hatch).
PRECISION_STYLES: Mapping[str, PrecisionLook] = _Column(_precisions, precision_look, None)
#: No XLA (``off``) and whole-step XLA (``jit``): the two ends of the comparison, e.g. the
#: "slower" and "faster" sides of a ratio axis.
NOXLA_COLOUR = MODE_LOOKS[REFERENCE].colour
XLA_COLOUR = MODE_LOOKS["jit"].colour
