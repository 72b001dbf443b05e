"""Opts: how one kernel is lowered (threads, tiles, grouping, vectors, unrolling): what
optimize.py chooses for a scheduled kernel and every lowering strategy reads (lowerer.py says
what each strategy does with them)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Opts:
  local: int = 1        # threads per workgroup (dimension 0)
  upcast: int = 1       # consecutive outputs per thread (unrolled)
  group: int = 0        # >0: threads of one workgroup that share each output's reduction
  tile: tuple = ()      # (R, C): each thread computes an R x C block of two output axes:
  tile_axes: tuple = ()  # which two (default: the last two of size > 1)
  subgroups: tuple = ()  # dtype names whose grouped reductions combine per subgroup first
  stage: tuple = ()     # (TR, TC, BK): tile through workgroup memory (wgtile.py): TR x TC
                        # threads (2-D workgroup), reduction steps of BK; needs tile, tile_axes
  group_unroll: int = 1  # grouped reductions: each lane's loop unrolled this many times
  group_vec: int = 1    # grouped reductions: consecutive elements a lane reads per step
  group_chunk: bool = False  # grouped reductions: each lane reads one run of consecutive
                        # elements, not every group-th step (CPU adapters: see optimize.py)
  upcast_vec: bool = False  # runs of loads and stores as vectors (a register tile: aligned reads)
  seq_vec: int = 0      # a thread per output of a matvec: its reductions over one axis read
                        # this many consecutive elements per step (vector loads; lower.py SEQ_VEC)
  fma: bool = False     # register tiles (matmul-like) accumulate float products with MULACC
  row_lanes: int = 0    # row kernels (ScheduleItem.rows, rows.py): 1 a thread per row, G > 1 a
                        # workgroup of G lanes per row (0: unset, lowered as 1)
  tile_inner: int = 0   # register tiles: unroll the trailing reduced axes of at most this many
                        # elements (0: TILE_INNER; a whole 5x5 window: optimize._window_tile)
  reduce_inner: int = 0  # plain reductions over several axes: the trailing reduced axes of at
                        # most this many elements unrolled in each step (optimize.py, option
                        # reduce_inner: a packed weight's words, 8 values per load)
  reduce_unroll: int = 1  # reduce_inner: the loop over the leading reduced axes unrolled this
                        # many times (lowering/threads.py's stepped q4 matvec)
  row_online: bool = False  # a thread per row: softmax's max and exp-sum in one loop (the online
                        # softmax, reductions.online_accumulate; render/wgsl/adapters.py measures
                        # it)
  tile_unroll: int = 0  # register tiles: the reduction loop unrolled this many times (0:
                        # TILE_UNROLL), a row operand's runs of loads as vector loads (regtile.py)
  slide: tuple = ()     # (R, C): a thread slides a window down R output rows of C columns, each
                        # input row read once (slide.py: depthwise convs; needs tile_axes)
  keys: int = 0         # fused attention (attention.py): keys per trip of the key loop (0: its
                        # default, ATTENTION_KEYS or fewer for many rows)
  tile_chunk: int = 0   # register tiles over a symbolic axis (a run-time grid): its blocks in runs
                        # of this many, innermost (tile_grid.tile_threads; variants.py)
  quad: bool = False    # register tiles: loads the 4 lanes of a quad share, a quarter per lane
                        # and QUAD_BROADCAST (quad_share.py; options quad_weights and subgroups)
  capped: bool = False  # a choice was cut down to fit a one-off run's compile budget (not read by
                        # lowering: compile_cost.py; realize may swap in the uncapped kernel)

  def shares_quads(self) -> bool:
    """Register tiles whose quads share loads (quad_share.py; not staged, slid or grouped)."""
    return self.quad and bool(self.tile) and not (self.stage or self.slide or self.group)
