"""The registry contract: one decorator adds a schedule that names(), info(), generate() and validation see."""
from __future__ import annotations

import pytest

from primus_megatron.schedules import Op, ScheduleError, generate, info, names, register, simulate, validate
from primus_megatron.schedules import registry
from primus_megatron.schedules.ir import BW, F, V

TOY = "toy-gpipe-test-only"
TOY_ALIAS = "toy-gpipe-alias-test-only"
BROKEN = "toy-broken-test-only"
TOY_V = "toy-v-gpipe-test-only"


@pytest.fixture
def scratch_registry():
    """Whatever a test registers under the toy names is removed again afterwards."""
    names()  # load the built-ins first so they are not counted as test entries
    before = (dict(registry._REGISTRY), dict(registry._ALIASES))
    yield
    for key in (TOY, BROKEN, TOY_V, "toy-dup-test-only"):
        registry._REGISTRY.pop(key, None)
    registry._ALIASES.pop(TOY_ALIAS, None)
    assert (registry._REGISTRY, registry._ALIASES) == before


def gpipe(pp, microbatches, **_):
    """GPipe: every forward, then every full backward."""
    return [[Op(F, i) for i in range(microbatches)] + [Op(BW, i) for i in range(microbatches)] for _ in range(pp)]


def test_one_decorator_adds_a_schedule(scratch_registry):
    before = names()
    assert TOY not in before
    fn = register(TOY, aliases=(TOY_ALIAS,), memory="mx")(gpipe)
    assert fn is gpipe  # the decorator returns the generator unchanged
    assert TOY in names() and [n for n in names() if n != TOY] == before
    assert TOY_ALIAS not in names() and TOY_ALIAS in names(aliases=True)
    entry = info(TOY)
    assert info(TOY_ALIAS) is entry
    assert (entry.name, entry.generator, entry.placement, entry.chunks, entry.memory) == (TOY, gpipe, "loop", 1, "mx")
    assert entry.description == "GPipe: every forward, then every full backward."  # docstring's first line
    for p, m in [(2, 1), (3, 5), (4, 4)]:
        s = generate(TOY_ALIAS, p, m)
        assert s.name == TOY and s.ranks == tuple(tuple(r) for r in gpipe(p, m))
        validate(s)
        r = simulate(s)
        # GPipe, unit costs: m + p - 1 forward slots then m + p - 1 backward slots of 2; peak m.
        assert r.makespan == pytest.approx((m + p - 1) * 1.0 + (m + p - 1) * 2.0)
        assert r.max_peak_memory == m
    with pytest.raises(ScheduleError, match="memory limit"):
        generate(TOY, 4, 8, memory_limit=4)


def test_validation_sees_a_registered_generator(scratch_registry):
    @register(BROKEN)
    def broken(pp, microbatches, **_):
        # Backwards first on rank 0: waits on rank 1's gradient, which waits on rank 0's forward.
        return [[Op(BW, 0), Op(F, 0)]] + [[Op(F, 0), Op(BW, 0)] for _ in range(pp - 1)]

    assert BROKEN in names()
    with pytest.raises(ScheduleError, match=r"rank 0 op BW0 waits for"):
        generate(BROKEN, 2, 1)
    assert generate(BROKEN, 2, 1, validate=False).ranks[0] == (Op(BW, 0), Op(F, 0))


def test_a_registered_generator_must_keep_each_chunks_w_ops_in_microbatch_order(scratch_registry):
    """validate()'s W-order rule holds for a registered schedule as for the built-ins: here the
    last rank runs its W ops newest first (every dependency is satisfiable)."""
    from primus_megatron.schedules.ir import B, W

    @register(BROKEN, splits_backward=True)
    def w_reversed(pp, microbatches, **_):
        ranks = [[Op(F, i) for i in range(microbatches)] + [Op(B, i) for i in range(microbatches)]
                 + [Op(W, i) for i in range(microbatches)] for _ in range(pp)]
        ranks[-1][2 * microbatches:] = [Op(W, i) for i in reversed(range(microbatches))]
        return ranks

    with pytest.raises(ScheduleError, match=r"^rank 2 runs the W of microbatch 3 before the W of microbatch 0 on "
                                            r"chunk 0 \(stage 2\): each chunk's W ops must run in microbatch order"):
        generate(BROKEN, 3, 4)
    validate(generate(BROKEN, 3, 1))  # one microbatch: nothing to order


def test_registration_options_reach_generate(scratch_registry):
    seen = {}

    @register(TOY_V, placement=V, chunks=2)
    def v_gpipe(pp, microbatches, *, chunks, costs, memory_limit, **_):
        seen.update(chunks=chunks, memory_limit=memory_limit, comm=costs.comm)
        fwd = [Op(F, i, c) for c in (0, 1) for i in range(microbatches)]
        return [fwd + [Op(BW, i, c) for c in (1, 0) for i in range(microbatches)] for _ in range(pp)]

    s = generate(TOY_V, 3, 2, memory_limit=10)
    assert (s.placement, s.chunks_per_rank, s.num_stages) == (V, 2, 6)
    assert seen["chunks"] == 2 and seen["memory_limit"] == 10 and len(seen["comm"]) == 6
    with pytest.raises(ScheduleError, match="exactly 2 chunk"):
        generate(TOY_V, 3, 2, chunks=3)


@pytest.mark.parametrize("key", ["zbv", "zerobubble", "1f1b"])
def test_duplicate_names_rejected(scratch_registry, key):
    with pytest.raises(ValueError, match=f"{key!r} is registered twice"):
        register(key)(gpipe)
    with pytest.raises(ValueError, match="registered twice"):
        register("toy-dup-test-only", aliases=(key,))(gpipe)
    assert "toy-dup-test-only" not in names(aliases=True)  # nothing half-registered


def test_duplicate_test_name_rejected(scratch_registry):
    register(TOY, aliases=(TOY_ALIAS,))(gpipe)
    with pytest.raises(ValueError, match="registered twice"):
        register(TOY)(gpipe)
    with pytest.raises(ValueError, match="registered twice"):
        register("toy-dup-test-only", aliases=(TOY_ALIAS,))(gpipe)


def test_builtins_are_registered():
    """DESIGN.md's built-ins (a superset is fine: adding a schedule must not need a test edit)."""
    builtin = {"1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "zb-auto", "zbv", "v-half", "v-min", "zb-optimal"}
    assert builtin <= set(names())
    assert len(names()) == len(set(names()))
    assert info("zerobubble").name == "zb-h1"
    for name in builtin:
        entry = info(name)
        assert entry.description and "\n" not in entry.description
        assert entry.placement == (V if name in ("zbv", "v-half", "v-min") else "loop")
        assert entry.chunks == (2 if name in ("zbv", "v-half", "v-min", "interleaved-1f1b") else 1)
        assert entry.variable_chunks == (name == "interleaved-1f1b")


@pytest.mark.parametrize("name", [n for n in names() if info(n).needs_extra is None])
def test_declared_splits_backward_is_what_generation_yields(name):
    """`splits_backward` is a static fact of the registry entry (the runtime and the option checks
    read it without generating a schedule): every order the generator yields has W ops exactly
    when the entry says so."""
    entry = info(name)
    for pp, m in [(2, 1), (2, 4), (3, 6), (4, 8)]:
        schedule = generate(name, pp, m, validate=False)
        assert any(op.kind == "W" for ops in schedule.ranks for op in ops) == entry.splits_backward, (pp, m)


def test_zb_optimal_declares_w_ops():
    """zb-optimal's generator needs an optional extra (not imported here): its W ops are declared."""
    assert info("zb-optimal").splits_backward


def test_a_generator_that_contradicts_its_declared_splits_backward_fails(scratch_registry):
    register(TOY, splits_backward=True)(gpipe)  # gpipe runs full backwards (BW): no W ops
    with pytest.raises(ScheduleError, match=r"registered with splits_backward=True, but its order for pp=2, 2 "
                                            r"microbatches has no W ops: declare splits_backward=False"):
        generate(TOY, 2, 2)
