"""One notion of a dead tablet server (issue 31): the master's two liveness timeouts in
their enforced order, failed-after (the healing policy) >= dead-after (``tserver list``,
ksck, placement), checked where the flags are read (impl/servers/master.py) and where the
options are built (MasterOptions). The refusal of a bad order by a real process is
tests/master_integration/test_operator_view.py's."""

from __future__ import annotations

from pathlib import Path

import pytest

from revivify.impl.master.options import MasterOptions
from revivify.impl.servers.master import parse
from revivify.impl.servers.process import UsageError


def flags(tmp_path: Path, *extra: str) -> list[str]:
    return ["--fs-root", str(tmp_path / "m"), "--rpc-bind", "127.0.0.1:7001",
            "--webserver-bind", "off", *extra]


def test_dead_after_defaults_to_failed_after_when_that_is_lower(tmp_path: Path) -> None:
    options = parse(flags(tmp_path, "--tserver-failed-after-ms", "2000")).options
    assert (options.dead_after, options.failed_after) == (2.0, 2.0)
    options = parse(flags(tmp_path)).options
    assert (options.dead_after, options.failed_after) == (3.0, 3.0)
    options = parse(flags(tmp_path, "--tserver-failed-after-ms", "60000")).options
    assert (options.dead_after, options.failed_after) == (3.0, 60.0)
    options = parse(flags(tmp_path, "--tserver-dead-after-ms", "1000",
                          "--tserver-failed-after-ms", "1000")).options
    assert (options.dead_after, options.failed_after) == (1.0, 1.0)


def test_failed_after_below_dead_after_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--tserver-failed-after-ms 2000 is below "
                                         "--tserver-dead-after-ms 2500"):
        parse(flags(tmp_path, "--tserver-dead-after-ms", "2500",
                    "--tserver-failed-after-ms", "2000"))
    with pytest.raises(ValueError, match="before it is listed dead"):
        MasterOptions(fs_root="/nonexistent", dead_after=3.0, failed_after=2.0)
    assert MasterOptions(fs_root="/nonexistent", dead_after=2.0, failed_after=2.0)
