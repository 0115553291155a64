"""The control plane dies under the operator: kube-apiserver SIGKILLed, etcd restarted, history
compacted so that resuming a watch gets 410 Gone."""

from __future__ import annotations

import signal
import time

from tests.chaos.conftest import Case, ControlPlane

OBJECTS = 60
DOWN_SECONDS = 20  # longer than the inactivity timeout + the probe's grace: a dead watch shows


def test_no_fault_baseline(case: Case) -> None:
    case.start()
    started = time.monotonic()
    case.burst(OBJECTS)
    done = case.wait_handled()
    assert set(case.liveness_between(started, done)) <= {200}
    case.finish("none (baseline)", recovered_in=done - started)


def test_apiserver_sigkilled_mid_burst(case: Case, control_plane: ControlPlane) -> None:
    case.start()
    case.wait_liveness(200)
    restarted: list[float] = []

    def fault(step: int) -> None:
        if step == OBJECTS // 2:
            control_plane.kill("kube-apiserver", signal.SIGKILL)
            killed = time.monotonic()
            case.wait_liveness(500, timeout=DOWN_SECONDS + 30)
            assert time.monotonic() - killed < DOWN_SECONDS + 30
            control_plane.up()
            restarted.append(time.monotonic())

    case.burst(OBJECTS, during=fault)
    done = case.wait_handled()
    case.wait_liveness(200)
    case.finish("kube-apiserver SIGKILLed mid-burst, restarted", recovered_in=done - restarted[0])


def test_etcd_restarted_mid_burst(case: Case, control_plane: ControlPlane) -> None:
    case.start()
    case.wait_liveness(200)
    restarted: list[float] = []

    def fault(step: int) -> None:
        if step == OBJECTS // 2:
            control_plane.kill("etcd", signal.SIGKILL)
            time.sleep(DOWN_SECONDS)
            control_plane.up()
            restarted.append(time.monotonic())

    case.burst(OBJECTS, during=fault)
    done = case.wait_handled()
    case.wait_liveness(200)
    case.finish("etcd SIGKILLed mid-burst, restarted", recovered_in=done - restarted[0])
