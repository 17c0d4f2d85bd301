"""A campaign that runs past its time box (libFuzzer checks -max_total_time between inputs,
its clock starts after the import) is stopped by kvproof's SIGTERM and exits with libFuzzer's
interrupt code: that is the time box, not "a crash outside Python's exceptions". A process
that dies with that code on its own, or with another one, is still reported. The stand-in
is a plain Python process that behaves like libFuzzer on SIGTERM (no vLLM: this is kvproof's
own process handling)."""

from __future__ import annotations

import argparse
import sys

from kvproof.fuzz import run as fuzz_run

OVERRUN = ("import signal, sys, time\n"
           "signal.signal(signal.SIGTERM, lambda *a: (print('libFuzzer: run interrupted; exiting'), sys.exit(72)))\n"
           "time.sleep(60)\n")


def _campaign(tmp_path, monkeypatch):
    c = object.__new__(fuzz_run.Campaign)
    c.args = argparse.Namespace(status_every=1000, premise="engine")
    c.workdir = c.crash_dir = tmp_path
    c.log_dir, c.artifacts = tmp_path / "logs", tmp_path / "artifacts"
    c.log_dir.mkdir()
    c.base_execs = 0
    monkeypatch.setattr(fuzz_run, "read_stats", lambda wd: {"execs": 5})  # the harness had run inputs
    return c


def test_a_campaign_stopped_at_its_time_box_is_not_a_crash(tmp_path, monkeypatch, capsys):
    c = _campaign(tmp_path, monkeypatch)
    rc = c.run_process([sys.executable, "-c", OVERRUN], 0.1, "timeboxed", stop_after=1.0)
    assert rc == fuzz_run.INTERRUPTED and c.stopped_at_deadline
    assert c.harness_failed(rc) is None
    assert "past its time box" in capsys.readouterr().out


def test_a_process_that_dies_on_its_own_is_still_reported(tmp_path, monkeypatch, capsys):
    c = _campaign(tmp_path, monkeypatch)
    for code in (fuzz_run.INTERRUPTED, 77):
        rc = c.run_process([sys.executable, "-c", f"raise SystemExit({code})"], 30, "timeboxed")
        assert rc == code and not c.stopped_at_deadline
        assert c.harness_failed(rc) == 1
        assert "a crash outside Python's exceptions" in capsys.readouterr().out
