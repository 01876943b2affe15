"""The pipelined self-speculative sampler's host-side records (LoopSpec's ``PipelineLane`` and its tree): lanes,
their branches and where each one's K/V sit. Plain Python; the batch (:mod:`recdiff.samplers.loopspec`) runs the
model over the lanes and hands the readouts' tokens back here.

A *lane* is one input token going through the recurrence: lane ``index = i`` processes committed token ``c_{i-1}``
(or a guess for it) at position ``prompt + i - 1`` and predicts ``c_i``. Every cycle runs ``K`` recurrences of every
live lane. A readout at depth ``K`` (q1) or ``K·X`` (q2) proposes the next token, which starts a child lane at once;
the readout at full depth ``S`` commits it. The committed token keeps the child started from the same token at the
same readout (its recurrence is already under way) and drops every lane that does not descend from it; when no
child guessed it, a fresh lane starts from it.

Where K/V go: a lane writes at its position (its *home*) in its sequence's cache row when no other live lane holds
that place, else at a side place past the block (a q2 child and a q1 child share a position on different branches).
A lane sees the committed prefix and its own uncommitted ancestors, nothing else (:meth:`Tree.visible`); a committed
lane at a side place moves home (:meth:`Tree.commit` returns the move), so that the committed prefix is always the
home places below ``prompt + len(tokens)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Schedule:
    """S (full depth), K (first readout), K·X (second readout, or None) and what derives from them."""

    S: int
    K: int
    K2: int | None = None

    @property
    def readouts(self) -> dict[int, int]:
        """The last recurrence (0-based) of each readout → its coda plane: 0 (q1), 1 (q2), 2 (final)."""
        out = {self.K - 1: 0, self.S - 1: 2}
        if self.K2 is not None:
            out[self.K2 - 1] = 1
        return out

    @property
    def side_places(self) -> int:
        """Places per sequence for lanes on a branch of their own (none without a second readout). LoopSpec's full
        tree grows as b_t = b_{t-1} + b_{t-X} births per cycle (Fibonacci-like at X = 2: millions of lanes at K = 1,
        S = 32); recdiff starts a lane off the main branch only while a side place is free, S/K of them, which
        keeps the output exact (a token no lane guessed starts a fresh lane) and the lanes at most 2·S/K."""
        return self.S // self.K if self.K2 is not None else 0

    @property
    def max_lanes(self) -> int:
        """The most live lanes of one sequence: S/K + 1 at their home places (a child starts K recurrences after its
        parent, and the youngest lane's child starts in the cycle its oldest ancestor commits) and the side places."""
        return self.S // self.K + 1 + self.side_places


@dataclass(eq=False)
class Lane:
    index: int                       # the completion index it predicts
    token: int                       # the token it processes
    pos: int                         # its position
    slot: int                        # where its K/V sit in the sequence's cache row
    bank: int                        # its row of the batch's state bank
    parent: Lane | None = None       # the uncommitted lane whose readout started it (None: committed)
    origin: int | None = None        # the parent's last recurrence before that readout
    stage: int = 0                   # the next recurrence to run (0-based)
    first: int | None = None         # q1's proposal for the next token
    second: int | None = None        # q2's proposal
    q1: Any = None                   # sampling: the distribution q1's proposal was drawn from (V,)
    r2: Any = None                   # sampling: the residual q2's proposal was drawn from (V,)
    children: list[Lane] = field(default_factory=list)


class Tree:
    """One sequence's live lanes, its committed tokens and its places (home positions, ``side`` places past the
    block)."""

    def __init__(self, prompt_len: int, side: list[int]) -> None:
        self.prompt_len = prompt_len
        self.tokens: list[int] = []                # committed c_0, c_1, ...
        self.lanes: list[Lane] = []                # live, in the order they started
        self.home: dict[int, Lane] = {}            # position → the live lane at its home place
        self.free_side = sorted(side, reverse=True)

    @property
    def committed_end(self) -> int:
        """Positions below this hold committed tokens: the prefix every lane sees."""
        return self.prompt_len + len(self.tokens)

    def has_place(self, index: int) -> bool:
        """Whether a lane of ``index`` can start: its home place is free, or a side place is."""
        return self.prompt_len + index - 1 not in self.home or bool(self.free_side)

    def start(self, index: int, token: int, bank: int, parent: Lane | None = None, origin: int | None = None) -> Lane:
        pos = self.prompt_len + index - 1
        slot = self.free_side.pop() if pos in self.home else pos
        lane = Lane(index=index, token=token, pos=pos, slot=slot, bank=bank, parent=parent, origin=origin)
        if slot == pos:
            self.home[pos] = lane
        if parent is not None:
            parent.children.append(lane)
        self.lanes.append(lane)
        return lane

    def visible(self, lane: Lane) -> list[int]:
        """The places ``lane`` sees beyond the committed prefix: its own and its uncommitted ancestors'."""
        out = []
        node: Lane | None = lane
        while node is not None:
            out.append(node.slot)
            node = node.parent
        return out

    def release(self, lane: Lane) -> None:
        self.lanes.remove(lane)
        if self.home.get(lane.pos) is lane:
            del self.home[lane.pos]
        elif lane.slot != lane.pos:
            self.free_side.append(lane.slot)
            self.free_side.sort(reverse=True)

    def commit(self, final: Lane, token: int, accepted: int | None) -> tuple[Lane | None, list[Lane], tuple | None]:
        """``final`` (the lane of the next uncommitted index, at full depth) commits ``token``; ``accepted``: the
        readout whose proposal it was (its last recurrence), None when neither proposal was right. Returns (the lane
        that goes on from ``token``: the matching child, else None for a fresh one to be started, the lanes
        dropped, a move (src, dst) of the kept lane's K/V to its home place, or None)."""
        assert final.index == len(self.tokens), "loopspec: a commit out of order"
        self.tokens.append(token)
        kept = next((c for c in final.children if c.token == token and c.origin == accepted), None)
        dropped = [lane for lane in self.lanes if lane is final or not _descends(lane, kept)]
        for lane in dropped:
            self.release(lane)
        move = None
        if kept is not None:
            kept.parent = None
            if kept.slot != kept.pos:  # its home place was a dropped sibling's
                move = (kept.slot, kept.pos)
                self.free_side.append(kept.slot)
                self.free_side.sort(reverse=True)
                kept.slot = kept.pos
                self.home[kept.pos] = kept
        return kept, dropped, move

    def drop_all(self) -> list[Lane]:
        dropped = list(self.lanes)
        for lane in dropped:
            self.release(lane)
        return dropped


def _descends(lane: Lane, root: Lane | None) -> bool:
    node: Lane | None = lane
    while node is not None:
        if node is root:
            return True
        node = node.parent
    return False
