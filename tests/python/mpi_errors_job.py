"""Each error the collective open and the loaders' construction can meet,
caught: writes {"rank": R, "errors": {case: exception type name}} to
OUT/rankR.json (test_distributed.py runs it under mpirun, and alone for
what a single process raises). argv: OUT VOLUME (a valid volume)."""
import json
import os
import sys

import dlfs
import dlfs.torch

out, good = sys.argv[1], sys.argv[2]
here = os.path.dirname(good)
missing = os.path.join(here, "nothere.dlfs")
garbage = os.path.join(here, "garbage.dlfs")
rank = dlfs.distributed.job().rank
if rank == 0 and not os.path.exists(garbage):
    with open(garbage, "wb") as f:
        f.write(os.urandom(64 * 1024))

CASES = {
    "loader-missing": lambda: dlfs.Loader(missing, 8),
    "image-missing": lambda: dlfs.torch.ImageLoader(missing, 8, size=8),
    "dataset-missing": lambda: dlfs.torch.LoaderDataset(missing, 8),
    "mixture-missing": lambda: dlfs.Loader([good, missing], 8),
    "loader-directory": lambda: dlfs.Loader(here, 8),
    "loader-garbage": lambda: dlfs.Loader(garbage, 8),
    "image-garbage": lambda: dlfs.torch.ImageLoader(garbage, 8, size=8),
    "loader-batch-0": lambda: dlfs.Loader(good, 0),
    "loader-unknown-field": lambda: dlfs.Loader(good, 8, fields=["nope"]),
    "loader-bad-engine": lambda: dlfs.Loader(good, 8, engine="warp"),
    "loader-misspelt": lambda: dlfs.Loader(good, 8, shufle=True),
}
errors = {}
for name, make in CASES.items():
    try:
        made = make()
    except Exception as e:  # noqa: BLE001 (the type is what is checked)
        errors[name] = type(e).__name__
    else:
        errors[name] = None
        close = getattr(made, "close", None)
        if close:
            close()
with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
    json.dump({"rank": rank, "errors": errors}, f)
