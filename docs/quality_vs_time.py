"""Draw docs/quality-vs-time.png from the measured points in docs/quality-vs-time.json.

    .venv/bin/python docs/quality_vs_time.py

Each point is one PINN training of the default data (``ptycho simulate`` with the
default preset's simulation keys), evaluated on the test split after that many epochs
(``train --resume`` continues the same run), with two trainings at once on the 2 cores,
1 thread each, as the pipeline runs them. The JSON holds the commands.
"""

import json
from pathlib import Path

from ptycho.study.figures.quality import quality_vs_time
from ptycho.study.figures.style import save_png

here = Path(__file__).resolve().parent
record = json.loads((here / "quality-vs-time.json").read_text())
save_png(quality_vs_time(record["points"]), here / "quality-vs-time.png")
print(here / "quality-vs-time.png")
