"""The rendezvous check: a lowered schedule cannot hang on NCCL/RCCL.

It simulates the p2p semantics of NCCL/RCCL rather than gloo's more forgiving
ones: each pair of ranks shares one ordered channel, a send completes only
when the matching receive is the peer's next item on that channel (and vice
versa), and per (src, dst) messages match in FIFO order. A host posts sends
and receives without blocking and blocks only where a compute op needs a
receive to have completed, and at the end of the step for its own sends. A
schedule that passes cannot hang on any backend.

How: the k-th items two ranks post to each other meet once both are posted
and every earlier pair met, so each channel pair is summed up before the run
by the first index where it fails (both items sends, both receives, or two
different messages), and a receive has completed exactly when the peer has
posted more than its index on the channel and that index is below the pair's
first failure. Static problems (an op whose input is neither computed
earlier on its rank nor received by a receive posted before it) are found up
front too. What remains is a walk in which a rank posts its items and stops
at an op whose message has not arrived; every rank whose channel makes
progress is queued to run again. The walk visits ranks in the same order
whatever the schedule's size, so the first problem it meets, which the error
names, is well defined.
"""
from __future__ import annotations

from bisect import bisect_left
from collections import deque
from itertools import compress, count, repeat
from operator import add, and_, attrgetter, eq, is_, itemgetter, lt, mod, mul, ne, not_, or_
from typing import NamedTuple

from .compiled import rank_rows, rule_table
from .deps import RESULT_KINDS, describe
from .errors import ScheduleError
from .gc_pause import gc_paused
from .ir import B, F, Op
from .lowering import Lowered, Message, Recv, Send, incoming

_MSG, _PEER, _KIND = attrgetter("msg"), attrgetter("peer"), attrgetter("kind")
_ITEM_TYPES = frozenset({Op, Send, Recv})
_NEED, _RECV_FROM, _SLOT = attrgetter("need"), attrgetter("recv_from"), attrgetter("slot")
_OUT, _OUT2 = attrgetter("out"), attrgetter("out2")
NEVER = float("inf")


class Channels(NamedTuple):
    """Every rank's channels, numbered: channel `c` carries what rank `owner[c]` posts to
    rank `peer[c]`, in order (`items[c]`); `back[c]` is the channel the other way.
    A pair's k-th items meet (once both are posted) for k < `fails_at[c]`; at
    `fails_at[c]` they are two different messages if `mismatch[c]`, else items of one
    direction (or one side has no more items)."""

    items: list[list]
    owner: list[int]
    peer: list[int]
    back: list[int]
    fails_at: list[int]
    mismatch: list[bool]
    ids: dict  # (rank, peer) -> channel


@gc_paused
def check_channels(lowered: Lowered) -> None:
    """Simulate rendezvous p2p (module doc); raise naming who waits for what if it hangs."""
    pp = lowered.schedule.pp
    if len(lowered.ranks) != pp:
        raise ScheduleError(f"lowered schedule {lowered.schedule.name!r} has {len(lowered.ranks)} item lists "
                            f"for {pp} pipeline ranks")
    split = [_split(lowered, r) for r in range(pp)]
    chans = _channels(split)
    stops, posted = _walk([_events(lowered, r, split[r], chans) for r in range(pp)], chans, pp)
    stuck = [r for r in range(pp) if stops[r] < len(lowered.ranks[r])
             or any(_pending(chans, posted, c) for c in _outgoing(chans, r))]
    if stuck:
        raise ScheduleError(f"schedule {lowered.schedule.name!r} can hang: "
                            + "; ".join(_waiting(lowered, r, stops, chans, posted) for r in stuck))


class _Posted(NamedTuple):
    """What a rank posts to one peer, in order: the items, their positions, their messages,
    and which are receives."""

    items: list
    positions: list[int]
    msgs: list
    is_recv: list[bool]


_NOTHING = _Posted([], [], [], [])


class _Split(NamedTuple):
    """One rank's items: what it posts to each peer, all its messages, and its compute ops."""

    by_peer: dict  # peer -> _Posted
    msg_pos: list[int]
    peers: list[int]
    op_pos: list[int]
    ops: list


def _split(lowered: Lowered, r: int) -> _Split:
    items = lowered.ranks[r]
    types = list(map(type, items))
    is_op = list(map(is_, types, repeat(Op)))
    if not _ITEM_TYPES.issuperset(types):  # anything else is taken for a compute op (and checked as one)
        is_op = list(map(not_, map(or_, map(is_, types, repeat(Send)), map(is_, types, repeat(Recv)))))
    is_msg = list(map(not_, is_op))
    msgs, msg_pos = list(compress(items, is_msg)), list(compress(count(), is_msg))
    recv = list(map(is_, compress(types, is_msg), repeat(Recv)))
    peers = list(map(_PEER, msgs))
    by_peer = {}
    distinct = list(dict.fromkeys(peers))
    for peer in distinct:
        if type(peer) is not int or not 0 <= peer < lowered.schedule.pp:
            raise ScheduleError(f"rank {r} posts '{msgs[peers.index(peer)]}', but the pipeline has ranks "
                                f"0..{lowered.schedule.pp - 1}")
        if len(distinct) == 1:
            by_peer[peer] = _Posted(msgs, msg_pos, list(map(_MSG, msgs)), recv)
            break
        mine = list(map(eq, peers, repeat(peer)))
        posted = list(compress(msgs, mine))
        by_peer[peer] = _Posted(posted, list(compress(msg_pos, mine)), list(map(_MSG, posted)), list(compress(recv, mine)))
    return _Split(by_peer, msg_pos, peers, list(compress(count(), is_op)), list(compress(items, is_op)))


def _channels(split: list[_Split]) -> Channels:
    """Number the channels and find where each pair fails (see `Channels`)."""
    ids: dict[tuple[int, int], int] = {}
    for r, sp in enumerate(split):
        for peer in sp.by_peer:
            for key in ((r, peer), (peer, r)):
                ids.setdefault(key, len(ids))
    chans = Channels([[] for _ in ids], [0] * len(ids), [0] * len(ids), [0] * len(ids), [0] * len(ids),
                     [False] * len(ids), ids)
    posted = [_NOTHING] * len(ids)
    for (r, peer), c in ids.items():
        posted[c] = split[r].by_peer.get(peer, _NOTHING)
        chans.items[c] = posted[c].items
        chans.owner[c], chans.peer[c], chans.back[c] = r, peer, ids[(peer, r)]
    for c, a in enumerate(posted):
        b = posted[chans.back[c]]
        size = min(len(a.items), len(b.items))
        same = next(compress(count(), map(eq, a.is_recv, b.is_recv)), size)  # both receive or both send
        differ = next(compress(count(), map(ne, a.msgs, b.msgs)), size)
        chans.fails_at[c] = min(same, differ, size)
        chans.mismatch[c] = differ < min(same, size)
    return chans


class _Walk(NamedTuple):
    """One rank's part of the walk: an event per item that matters, in item order, as
    `keys` (position * `size` + event). An event below the number of channels is a
    channel: post the item there; from there up to `size` - 1 it is a wait for
    `waits[event - channels]`, the receive of the op's message as (channel back,
    index on the channel), or (-1, ((back, index), ...)) where the rank receives that
    message more than once; `size` - 1 is the rank's first static problem, `problem`."""

    keys: list[int]
    events: list[int]
    size: int
    waits: list[tuple]
    problem: str


def _events(lowered: Lowered, r: int, sp: _Split, chans: Channels) -> _Walk:
    """Rank r's walk (`_Walk`)."""
    sched = lowered.schedule
    rules, mbs, ran = rank_rows(sched, r, sp.ops)
    ids = {peer: chans.ids[(r, peer)] for peer in sp.by_peer}
    blocking = [x >= 0 for x in map(_RECV_FROM, rules)]
    block_pos = list(compress(sp.op_pos, blocking))
    msgs = _needed(sched, r, rules, mbs, blocking)
    size = len(chans.items) + len(block_pos) + 1
    paired = None
    if ran or len(set(msgs)) == len(msgs):
        paired = _paired(sp, chans, ids, block_pos, msgs, list(map(_RECV_FROM, compress(rules, blocking))), size)
    if paired is not None:
        keys, waits = paired
        fail = (NEVER, "")
    else:
        keys, waits, fail = _unpaired(r, sp, chans, ids, block_pos, msgs, size)
    if not ran:  # a schedule that ran computes every op's same-rank input before the op
        fail = _local_problem(r, sp, rules, mbs, blocking, 3 * sched.num_stages, fail)
    keys += map(add, map(mul, sp.msg_pos, repeat(size)), map(ids.__getitem__, sp.peers))
    keys.sort()
    if fail[0] < NEVER:
        del keys[bisect_left(keys, fail[0] * size):]
        keys.append(fail[0] * size + size - 1)
    return _Walk(keys, list(map(mod, keys, repeat(size))), size, waits, fail[1])


def _paired(sp: _Split, chans: Channels, ids: dict, block_pos: list, msgs: list, peers: list, size: int):
    """The usual case: the ops' messages are distinct, and from each peer the rank receives
    exactly the activations (and the gradients) its ops wait for, in the order of those
    ops, each before its op. Then the j-th such op waits for the j-th such receive and
    for no other: (event keys of the waits, the waits); None otherwise."""
    keys, waits = [], []
    nchan = len(chans.items)
    groups = list(zip(peers, map(_FIRST, msgs)))  # (peer, message kind) of each op's message
    receives = 0
    for peer, posted in sp.by_peer.items():
        received = list(compress(posted.msgs, posted.is_recv))
        receives += len(received)
        kinds = list(map(_KIND, received))
        for kind in (F, B):
            mine = list(map(eq, groups, repeat((peer, kind))))
            if True not in mine:
                continue
            got = list(map(and_, posted.is_recv, map(eq, map(_KIND, posted.msgs), repeat(kind)))) \
                if kinds.count(kind) != len(kinds) else posted.is_recv
            at = list(compress(block_pos, mine))
            if list(compress(posted.msgs, got)) != list(compress(msgs, mine)) \
                    or not all(map(lt, compress(posted.positions, got), at)):
                return None
            keys += map(add, map(mul, at, repeat(size)), count(nchan + len(waits)))
            waits += zip(repeat(chans.back[ids[peer]]), compress(count(), got))
    return (keys, waits) if len(waits) == len(msgs) == receives else None


def _unpaired(r: int, sp: _Split, chans: Channels, ids: dict, block_pos: list, msgs: list, size: int):
    """Any other case: each op waits for the receives of its message posted before it, and
    the first op with none is the rank's first static problem (`_events`)."""
    first, every = _receives(sp, ids, chans)
    found = list(map(first.get, msgs, repeat(_NO_RECEIVE)))
    waits, fail = list(map(_SECOND, found)), (NEVER, "")
    if every or not all(map(lt, map(_FIRST, found), block_pos)):
        waits, fail = _earlier_receives(r, sp, block_pos, msgs, first, every)
    keys = list(map(add, map(mul, block_pos, repeat(size)), count(len(chans.items))))
    return keys, waits, fail


def _needed(sched, r: int, rules: list, mbs: list, blocking: list) -> list[tuple]:
    """The message each op that waits for one needs (`blocking`), in op order, as a plain
    tuple (equal to the `Message`, and quicker to build)."""
    slots = rule_table(sched.pp, sched.chunks_per_rank, sched.placement)[r].slots
    kinds, srcs, stages = ([getattr(rule, f) for rule in slots] for f in ("recv_kind", "src", "stage"))
    mine = list(map(_SLOT, compress(rules, blocking)))
    return list(zip(map(kinds.__getitem__, mine), compress(mbs, blocking),
                    map(srcs.__getitem__, mine), map(stages.__getitem__, mine)))


_NO_RECEIVE = (NEVER, None)
_FIRST, _SECOND = itemgetter(0), itemgetter(1)


def _receives(sp: _Split, ids: dict, chans: Channels) -> tuple[dict, dict]:
    """(message -> (position, (channel back, index on the channel)) of the rank's first
    receive of it, and for the messages it receives more than once: message ->
    [(position, channel back, index), ...] of every receive; empty when there are none)."""
    first: dict = {}
    every: dict = {}
    total = 0
    for peer, posted in sp.by_peer.items():
        back = chans.back[ids[peer]]
        is_recv = posted.is_recv
        msgs = list(compress(posted.msgs, is_recv))
        pos, ks = list(compress(posted.positions, is_recv)), list(compress(count(), is_recv))
        total += len(msgs)
        got = dict(zip(reversed(msgs), zip(reversed(pos), zip(repeat(back), reversed(ks)))))  # the first wins
        for msg in got.keys() & first.keys():  # received from two peers: keep the earlier
            if first[msg][0] < got[msg][0]:
                got[msg] = first[msg]
        first.update(got)
    if len(first) < total:  # some message is received more than once: keep every receive of those
        for peer, posted in sp.by_peer.items():
            back = chans.back[ids[peer]]
            for k, (item, pos) in enumerate(zip(posted.items, posted.positions)):
                if type(item) is Recv:
                    every.setdefault(item.msg, []).append((pos, back, k))
        every = {msg: got for msg, got in every.items() if len(got) > 1}
    return first, every


def _earlier_receives(r: int, sp: _Split, block_pos: list, msgs: list, first: dict, every: dict):
    """The waits where some message is received more than once or some op's receive does
    not come before it: the receives posted before each op, and the first op with
    none, as (position, message) (`_events`)."""
    waits, fail = [], (NEVER, "")
    for pos, msg in zip(block_pos, msgs):
        got = every.get(msg) or ([(first[msg][0], *first[msg][1])] if msg in first else [])
        got = [(back, k) for at, back, k in got if at < pos]
        if not got and fail[0] == NEVER:
            op = sp.ops[sp.op_pos.index(pos)]
            fail = (pos, f"rank {r} op {op} needs {Message(*msg)} but posts no receive for it before the op")
        waits.append(got[0] if len(got) == 1 else (-1, tuple(got)))
    return waits, fail


def _local_problem(r: int, sp: _Split, rules: list, mbs: list, blocking: list, stride: int, fail: tuple) -> tuple:
    """The first op whose input is made on this rank but not before it, if it comes before `fail`."""
    bases = list(map(mul, mbs, repeat(stride)))
    made = dict(zip(reversed(list(map(add, bases, map(_OUT, rules)))), reversed(sp.op_pos)))  # key -> first maker
    second = [x >= 0 for x in map(_OUT2, rules)]
    if True in second:  # BW also makes a weight gradient
        more = dict(zip(reversed(list(map(add, compress(bases, second), map(_OUT2, compress(rules, second))))),
                        reversed(list(compress(sp.op_pos, second)))))
        for key, pos in more.items():
            if made.get(key, NEVER) > pos:
                made[key] = pos
    local = [not b and need >= 0 for b, need in zip(blocking, map(_NEED, rules))]
    positions = list(compress(sp.op_pos, local))
    keys = list(map(add, compress(bases, local), map(_NEED, compress(rules, local))))
    ok = list(map(lt, map(made.get, keys, repeat(NEVER)), positions))
    if False in ok:
        i = ok.index(False)
        if positions[i] < fail[0]:
            rule, op = list(compress(rules, local))[i], list(compress(sp.ops, local))[i]
            key = (RESULT_KINDS[rule.need % 3], op.mb, rule.src)
            return positions[i], f"rank {r} op {op} runs before {describe(key)}, which this rank computes later"
    return fail


def _walk(walks: list[_Walk], chans: Channels, pp: int) -> tuple[list[float], list[int]]:
    """Run the ranks (module doc): (per rank the position it stops at, items posted per channel)."""
    posted = [0] * len(chans.items)
    back, peer, fails_at, mismatch = chans.back, chans.peer, chans.fails_at, chans.mismatch
    codes = [w.events for w in walks]
    nchan = len(chans.items)
    # a receive whose pair fails before it never completes: its index becomes NEVER
    waits = [[(c, k if k < fails_at[c] else NEVER) if c >= 0 else (c, k) for c, k in w.waits] for w in walks]
    at = [0] * pp
    work = deque(range(pp))
    while work:
        r = work.popleft()
        ev, waits_r, last = codes[r], waits[r], walks[r].size - 1
        e, size = at[r], len(ev)
        while e < size:
            x = ev[e]
            if x < nchan:  # post an item on channel x
                k = posted[x]
                posted[x] = k + 1
                if posted[back[x]] > k:
                    if k < fails_at[x]:
                        work.append(peer[x])
                    elif k == fails_at[x] and mismatch[x]:
                        raise _mismatch(chans, x, k)
            elif x != last:
                c, k = waits_r[x - nchan]
                if posted[c] <= k if c >= 0 else not _any_arrived(k, posted, fails_at):
                    break
            else:
                raise ScheduleError(walks[r].problem)
            e += 1
        at[r] = e
    stops = [w.keys[e] // w.size if e < len(w.keys) else NEVER for w, e in zip(walks, at)]
    return stops, posted


def _any_arrived(receives: tuple, posted: list[int], fails_at: list[int]) -> bool:
    """For an op whose message the rank receives more than once: has any receive completed?"""
    return any(posted[c] > k and k < fails_at[c] for c, k in receives)


def _mismatch(chans: Channels, c: int, k: int) -> ScheduleError:
    x, y = chans.items[c][k], chans.items[chans.back[c]][k]
    send, recv, dst = (x, y, chans.peer[c]) if type(x) is Send else (y, x, chans.owner[c])
    return ScheduleError(f"rank {dst}'s next receive from rank {recv.peer} is {recv.msg} "
                         f"but that rank's next send to it is {send.msg}: messages between two ranks "
                         f"must be received in the order they are sent")


def _outgoing(chans: Channels, r: int) -> list[int]:
    """Rank r's channels, by peer."""
    return [chans.ids[(r, q)] for q in sorted(q for (p, q) in chans.ids if p == r)]


def _pending(chans: Channels, posted: list[int], c: int) -> bool:
    """True when channel c has posted items that never met their peer's."""
    return posted[c] > min(posted[c], posted[chans.back[c]], chans.fails_at[c])


def _head(chans: Channels, posted: list[int], c: int):
    return chans.items[c][min(posted[c], posted[chans.back[c]], chans.fails_at[c])]


def _waiting(lowered: Lowered, r: int, stops: list, chans: Channels, posted: list[int]) -> str:
    heads = []
    for c in _outgoing(chans, r):
        if _pending(chans, posted, c):
            q, back = chans.peer[c], chans.back[c]
            theirs = f"{_head(chans, posted, back)}" if _pending(chans, posted, back) else "nothing posted"
            heads.append(f"its channel to rank {q} is stuck at '{_head(chans, posted, c)}' while rank {q}'s is at "
                         f"'{theirs}'")
    items = lowered.ranks[r]
    if stops[r] < len(items):
        op = items[stops[r]]
        msg = incoming(lowered.schedule, r, op)
        return (f"rank {r} op {op} waits for {msg} from rank {lowered.schedule.owner(msg.src_stage)[0]}"
                + (f" ({heads[0]})" if heads else ""))
    return f"rank {r} finished but waits for its sends: " + ", ".join(heads)
