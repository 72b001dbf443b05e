"""One scheduled kernel (graph/schedule.py) to a UOp graph for one Target: optimize.py chooses the
launch options (Opts) from the Target's facts, lower.py builds the kernel with the strategy they
ask for (lowerer.py the base; rows.py, attention.py, regtile.py, wgtile.py, tensorcore.py,
sortnet.py, gather.py and the helpers index_math.py, vector.py, reductions.py, tileplan.py,
combine.py, loop_split.py, tile_grid.py; optimize.py's tile_probe.py, tile_shape.py,
tile_budget.py, stage_choice.py).
It reads a Target's facts (render/target.py) and imports nothing of a target language."""
