"""A tool call's timeout stops while its server's question is answered (``ports.CallClock``),
on trio's virtual clock: the time left is kept, holds nest, and the call is still bounded."""

from __future__ import annotations

import trio

from runtime.ports import CallClock


async def test_the_time_left_is_kept_across_a_pause(autojump_clock):
    with trio.move_on_after(10) as scope:
        clock = CallClock(scope)
        await trio.sleep(4)
        with clock.paused():
            await trio.sleep(100)  # a person answering: not the call's time
        started = trio.current_time()
        await trio.sleep(1000)
    assert scope.cancelled_caught and trio.current_time() - started == 6  # 10 - 4 left after the pause


async def test_holds_nest_and_the_clock_runs_again_after_the_last(autojump_clock):
    with trio.move_on_after(5) as scope:
        clock = CallClock(scope)
        with clock.paused():
            with clock.paused():
                await trio.sleep(50)
            await trio.sleep(50)  # the outer hold still stops it
        started = trio.current_time()
        await trio.sleep(1000)
    assert scope.cancelled_caught and trio.current_time() - started == 5


async def test_a_call_resumes_with_what_it_had_left(autojump_clock):
    with trio.move_on_after(2) as scope:
        clock = CallClock(scope)
        await trio.sleep(1.5)
        with clock.paused():
            await trio.sleep(30)
        started = trio.current_time()
        await trio.sleep(1000)
    assert scope.cancelled_caught and trio.current_time() - started == 0.5
